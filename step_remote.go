package sortie

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sortiehq/sortie/internal/strictjson"
	"github.com/sortiehq/sortie/store"
)

// Steps of a worker outside this process (the HTTP API's remote workers):
// it reads a job's recorded steps with JobSteps and records each new one
// with RecordStep under the claim token Take gave it, which is what Step
// does inside a handler.

// JobSteps returns the steps job id recorded, in the order they were
// recorded, with their results (a step's JSON) and a spawn's children's
// IDs. An unknown job returns an error wrapping ErrNotFound; a job
// without steps returns none.
func (c *Client) JobSteps(ctx context.Context, id int64) ([]JobStep, error) {
	list, err := c.store.StepList(ctx, &store.StepListParams{ID: id})
	if err != nil {
		return nil, fmt.Errorf("sortie: steps of job %d: %w", id, err)
	}
	return list, nil
}

// RecordStepResult says what RecordStep did.
type RecordStepResult struct {
	// Existed reports that the job had a step of the name already: nothing
	// was recorded, and Step is the earlier record, whose result the
	// worker must use instead of its own (another attempt ran the step
	// first).
	Existed bool
	// Step is the step as recorded, with its result.
	Step JobStep
}

// RecordStep records step name of the running attempt claimToken of job
// id with result, a JSON value, as Step does inside a handler: a worker
// that runs jobs it took with Take (or through the HTTP API) calls
// RecordStep after running the step's code, and uses the result it
// returns. When the job has a step of that name already, nothing is
// recorded and the earlier step is returned (Existed).
//
// It fails, recording nothing, when name is not 1 to 255 bytes of UTF-8
// or result is not JSON (ErrInvalidArgument), when result is larger than
// Config.MaxResultBytes (ErrResultTooLarge), when the job has a sleep or
// spawn of that name (ErrInvalidArgument), when the job does not exist
// (ErrNotFound), and when claimToken is no longer the job's claim
// (ErrLeaseLost: the job was rescued, finished or cancelled; the worker
// should stop running it).
func (c *Client) RecordStep(ctx context.Context, id, claimToken int64, name string, result []byte) (*RecordStepResult, error) {
	if err := c.checkStepRecord(id, claimToken, name, result); err != nil {
		return nil, err
	}
	res, err := c.recordStep(ctx, &store.StepRecord{ID: id, ClaimToken: claimToken, Name: name, Result: result})
	if err != nil {
		return nil, fmt.Errorf("sortie: record step %q of job %d: %w", name, id, err)
	}
	if !res.Applied {
		if _, _, err := c.claimedRow(ctx, id, claimToken); err != nil {
			return nil, fmt.Errorf("sortie: step %q not recorded: %w", name, err)
		}
		// Claimed again since the record was refused: still a lost claim.
		return nil, fmt.Errorf("sortie: step %q not recorded: %w", name, staleClaim(id, claimToken))
	}
	if !res.Exists {
		now := c.clock.Now()
		row, _, _ := c.claimedRow(ctx, id, claimToken)
		st := JobStep{Name: name, Kind: StepRun, RecordedAt: now, Size: len(result), Result: result}
		if row != nil {
			st.Attempt = row.Attempt
		}
		return &RecordStepResult{Step: st}, nil
	}
	list, err := c.JobSteps(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, st := range list {
		if st.Name != name {
			continue
		}
		if st.Kind != StepRun {
			return nil, invalidf("step %q of job %d is a %s, not a step: give the step a name of its own", name, id, st.Kind)
		}
		return &RecordStepResult{Existed: true, Step: st}, nil
	}
	return nil, fmt.Errorf("sortie: step %q of job %d was recorded but is gone (the job was deleted?): %w", name, id, ErrNotFound)
}

// checkStepRecord checks a RecordStep call's input.
func (c *Client) checkStepRecord(id, claimToken int64, name string, result []byte) error {
	switch {
	case id < 1:
		return invalidf("RecordStep: job ID must be positive, got %d", id)
	case claimToken == 0:
		return invalidf("RecordStep: claim token is 0: give the one Take returned")
	}
	if err := store.ValidateStepName(name); err != nil {
		return fmt.Errorf("sortie: RecordStep: %w", err)
	}
	if !json.Valid(result) || strictjson.ValidText(result) != nil {
		return invalidf("RecordStep: result of step %q of job %d is not valid JSON", name, id)
	}
	if limit := c.cfg.MaxResultBytes; len(result) > limit {
		return fmt.Errorf("sortie: result of step %q of job %d is %d bytes, more than Config.MaxResultBytes (%d): %w",
			name, id, len(result), limit, ErrResultTooLarge)
	}
	return nil
}
