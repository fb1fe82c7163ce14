package sortie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sortiehq/sortie/internal/strictjson"
	"github.com/sortiehq/sortie/store"
)

// ErrResultTooLarge: a handler's result is larger than Config.MaxResultBytes.
var ErrResultTooLarge = errors.New("sortie: job result too large")

// ErrNotInJob: the context is not a running job's.
var ErrNotInJob = errors.New("sortie: context is not a running job's (call it from a worker's Work)")

// progressMinInterval is the least time between two progress writes of one
// job; progress reported faster is written by the next heartbeat.
const progressMinInterval = 200 * time.Millisecond

// runningJob is what a handler's context knows about its job.
type runningJob struct {
	c   *Client
	row *JobRow

	mu           sync.Mutex
	result       []byte
	progress     float64
	progressSent time.Time
	progressDue  bool // a progress value waits for the heartbeat
	// completedInTx is set by CompleteTx once the completion applied inside
	// the application's transaction.
	completedInTx bool
	// steps are the durable steps the handler used (step.go).
	steps stepState
}

type runningJobKey struct{}

// runningJobCtx is a handler's context: ctx carrying rj. It takes the
// place of context.WithValue so that it is allocated with the job's run
// (see jobRun).
type runningJobCtx struct {
	context.Context
	rj *runningJob
}

func (c *runningJobCtx) Value(key any) any {
	if _, ok := key.(runningJobKey); ok {
		return c.rj
	}
	return c.Context.Value(key)
}

func (c *runningJobCtx) String() string {
	return fmt.Sprintf("%v.WithValue(sortie.runningJobKey, job %d)", c.Context, c.rj.row.ID)
}

func runningJobFrom(ctx context.Context) *runningJob {
	rj, _ := ctx.Value(runningJobKey{}).(*runningJob)
	return rj
}

// ClientFromContext returns the client running the job whose handler got
// ctx, or nil outside a handler. Handlers use it to enqueue follow-up jobs.
func ClientFromContext(ctx context.Context) *Client {
	if rj := runningJobFrom(ctx); rj != nil {
		return rj.c
	}
	return nil
}

// SetResult records v (encoded as JSON) as the job's result, stored when
// the handler returns nil. Dependent jobs and Wait can read it. A result
// larger than Config.MaxResultBytes is refused with ErrResultTooLarge and
// the previous result kept, and so is one whose JSON is not valid UTF-8
// (ErrInvalidArgument).
func SetResult(ctx context.Context, v any) error {
	rj := runningJobFrom(ctx)
	if rj == nil {
		return ErrNotInJob
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("sortie: encode result of job %d: %w", rj.row.ID, err)
	}
	if err := strictjson.ValidText(b); err != nil {
		// Raw JSON from a json.Marshaler is not checked by encoding/json.
		return invalidf("result of job %d: its JSON %v", rj.row.ID, err)
	}
	if limit := rj.c.cfg.MaxResultBytes; len(b) > limit {
		return fmt.Errorf("sortie: result of job %d is %d bytes, more than Config.MaxResultBytes (%d): %w", rj.row.ID, len(b), limit, ErrResultTooLarge)
	}
	rj.mu.Lock()
	rj.result = b
	rj.mu.Unlock()
	return nil
}

// SetProgress records the job's progress, 0 to 100, visible in JobGet and
// the dashboard within a moment (writes are spaced at least 200 ms apart; a
// newer value replaces one not yet written).
func SetProgress(ctx context.Context, percent float64) error {
	rj := runningJobFrom(ctx)
	if rj == nil {
		return ErrNotInJob
	}
	if math.IsNaN(percent) || percent < 0 || percent > 100 {
		return invalidf("SetProgress: progress must be 0 to 100, got %v", percent)
	}
	rj.mu.Lock()
	rj.progress = percent
	now := rj.c.clock.Now()
	if now.Sub(rj.progressSent) < progressMinInterval {
		rj.progressDue = true
		rj.mu.Unlock()
		return nil
	}
	rj.progressSent = now
	rj.progressDue = false
	rj.mu.Unlock()
	ref := store.LeaseRef{ID: rj.row.ID, ClaimToken: rj.row.ClaimToken}
	st, err := rj.c.extendClaim(ctx, ref, now, rj.c.cfg.Lease, &percent)
	if err != nil {
		return fmt.Errorf("sortie: record progress of job %d: %w", rj.row.ID, err)
	}
	if !st.Held {
		return fmt.Errorf("sortie: record progress of job %d: %w", rj.row.ID, errLeaseLost)
	}
	return nil
}

// TakeDueProgress returns a progress value waiting to be written, if any.
func (rj *runningJob) TakeDueProgress() (float64, bool) {
	rj.mu.Lock()
	defer rj.mu.Unlock()
	if !rj.progressDue {
		return 0, false
	}
	rj.progressDue = false
	rj.progressSent = rj.c.clock.Now()
	return rj.progress, true
}

// DependencyResults returns the results of the jobs the running job depends
// on, by job ID (a dependency that recorded none maps to nil).
func DependencyResults(ctx context.Context) (map[int64]json.RawMessage, error) {
	rj := runningJobFrom(ctx)
	if rj == nil {
		return nil, ErrNotInJob
	}
	out := make(map[int64]json.RawMessage, len(rj.row.DependsOn))
	for _, id := range rj.row.DependsOn {
		dep, err := rj.c.JobGet(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("sortie: result of dependency %d: %w", id, err)
		}
		out[id] = dep.Result
	}
	return out, nil
}

// Wait returns job id once it is finished (completed, cancelled or dead),
// with its result and errors. It waits as long as ctx allows, woken by the
// store where the store can notify.
func (c *Client) Wait(ctx context.Context, id int64) (*JobRow, error) {
	row, err := c.store.JobWait(ctx, &store.JobWaitParams{ID: id})
	if err != nil {
		return nil, jobError("wait for", id, err)
	}
	return row, nil
}

// JobResult decodes the result job id recorded into v. A job that has not
// completed, or recorded no result, leaves v unchanged and returns an error
// saying so.
func (c *Client) JobResult(ctx context.Context, id int64, v any) error {
	row, err := c.JobGet(ctx, id)
	if err != nil {
		return err
	}
	if row.State != JobStateCompleted {
		return fmt.Errorf("sortie: job %d has no result: it is %s", id, row.State)
	}
	if row.Result == nil {
		return fmt.Errorf("sortie: job %d completed without recording a result", id)
	}
	if err := json.Unmarshal(row.Result, v); err != nil {
		return fmt.Errorf("sortie: decode result of job %d: %w", id, err)
	}
	return nil
}

// stepState is what a running job's handler knows of its steps: those
// recorded by earlier attempts (read at the first step call) and this
// attempt's, the names this attempt used, and whether a Sleep or Await
// ended the attempt.
type stepState struct {
	mu        sync.Mutex
	loaded    bool
	recorded  map[string]*store.JobStep
	used      map[string]bool
	suspended *suspendError
}

// suspendError ends an attempt that a Sleep or Await ended in the store:
// the handler returns it, and the runtime records nothing more.
type suspendError struct {
	step  string
	state JobState
	until time.Time // a sleep's wake time
}

func (e *suspendError) Error() string {
	if !e.until.IsZero() {
		return fmt.Sprintf("job sleeps at step %q until %s", e.step, e.until.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("job awaits the children of step %q", e.step)
}
