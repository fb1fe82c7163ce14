package store

import "fmt"

// JobAction is what Store.JobActMany does to each of its jobs.
type JobAction string

// The actions of JobActMany: what JobRetry, JobCancel and JobDelete do to
// one job.
const (
	ActionRetry  JobAction = "retry"
	ActionCancel JobAction = "cancel"
	ActionDelete JobAction = "delete"
)

// Valid reports whether a is one of the actions.
func (a JobAction) Valid() bool {
	return a == ActionRetry || a == ActionCancel || a == ActionDelete
}

// MaxActMany is the most IDs one JobActMany call takes. It bounds the
// work (and on Redis the script's loop) of one step.
const MaxActMany = 1000

// ActResult is what JobActMany did to one job.
type ActResult struct {
	// Err is nil when the action applied, or found nothing to change (a
	// retry of an available job, a cancel of a finished one); otherwise it
	// is the refusal the single call returns, wrapping ErrNotFound,
	// ErrJobRunning or ErrUniqueConflict.
	Err error
}

// ValidateActMany checks the params of a JobActMany call: a known action
// and at most MaxActMany IDs. Every store calls it before looking at any
// job.
func ValidateActMany(p *JobActManyParams) error {
	if !p.Action.Valid() {
		return fmt.Errorf("action %q is not retry, cancel or delete: %w", p.Action, ErrInvalidArgument)
	}
	if len(p.IDs) > MaxActMany {
		return fmt.Errorf("%d IDs in one call, at most %d: %w", len(p.IDs), MaxActMany, ErrInvalidArgument)
	}
	return nil
}
