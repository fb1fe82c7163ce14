package redisstore

import (
	"context"
	"fmt"

	"github.com/sortiehq/sortie/store"
)

// Durable steps are not yet kept by this store: every step method, a
// JobList by ParentID and an import of jobs with steps, a parent or a
// step they wait at return store.ErrUnsupported, and the conformance
// suite's Steps group checks exactly that (Harness.NoSteps). Nothing is
// silently dropped.

// errNoSteps is the error of every step method.
var errNoSteps = fmt.Errorf("redisstore: durable steps: %w", store.ErrUnsupported)

// StepAwait returns store.ErrUnsupported.
func (s *Store) StepAwait(context.Context, *store.StepAwaitParams) (*store.StepResult, error) {
	return nil, errNoSteps
}

// StepList returns store.ErrUnsupported.
func (s *Store) StepList(context.Context, *store.StepListParams) ([]store.JobStep, error) {
	return nil, errNoSteps
}

// StepRecord returns store.ErrUnsupported.
func (s *Store) StepRecord(context.Context, *store.StepRecordParams) ([]store.StepResult, error) {
	return nil, errNoSteps
}

// StepSleep returns store.ErrUnsupported.
func (s *Store) StepSleep(context.Context, *store.StepSleepParams) (*store.StepResult, error) {
	return nil, errNoSteps
}

// StepSpawn returns store.ErrUnsupported.
func (s *Store) StepSpawn(context.Context, *store.StepSpawnParams) (*store.StepResult, error) {
	return nil, errNoSteps
}

// importSteps refuses an import of jobs this store could not keep whole:
// with steps, a parent, or a step they wait at.
func importSteps(jobs []*store.JobRow) error {
	for _, j := range jobs {
		if len(j.Steps) > 0 || j.ParentID != 0 || j.WaitsFor != "" {
			return fmt.Errorf("job %d has durable steps or a parent job: %w", j.ID, errNoSteps)
		}
	}
	return nil
}
