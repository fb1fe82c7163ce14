// Package transition holds the one definition of what a report does to
// its running job (the table Rules and Next), what JobRescue does to a job
// whose lease expired, and which history outcome a move counts as. Every
// Go backend applies reports through it (pgstore generates its finish
// statement from Rules), so an outcome means the same on each; only the
// backends import this package.
package transition

import (
	"time"

	"github.com/sortiehq/sortie/store"
)

// ErrorRule says whether a report records its Error on the job.
type ErrorRule int

// The error rules of the report kinds.
const (
	// ErrorNone: the report records no error.
	ErrorNone ErrorRule = iota
	// ErrorOptional: the report's Error is recorded when it has one.
	ErrorOptional
	// ErrorAlways: an error is recorded, store.NoErrorMessage when the report has
	// none.
	ErrorAlways
)

// Rule is what a report of one kind does to its running job. The
// table Rules is the one definition of outcome to next state: stores
// that apply reports in Go call Next, and stores that apply them inside
// the database (pgstore's finish_jobs) generate their statement from the
// table.
type Rule struct {
	// Kind is the report kind the rule is for.
	Kind store.ReportKind
	// State is the job's next state.
	State store.JobState
	// Exhausted, when set, replaces State for a job whose Attempt reached
	// its MaxAttempts; the job's RunAt is then kept.
	Exhausted store.JobState
	// Later, when set, replaces State when the report's RunAt is after Now.
	Later store.JobState
	// SetsRunAt: the job's RunAt becomes the report's (Now when zero).
	SetsRunAt bool
	// Uncounts: the attempt does not count (Attempt is decremented).
	Uncounts bool
	// Error says whether the report's Error is recorded.
	Error ErrorRule
	// Result: the report's Result is recorded.
	Result bool
}

// Rules holds the rule of each report kind, indexed by kind.
var Rules = [...]Rule{
	store.ReportCompleted: {Kind: store.ReportCompleted, State: store.JobStateCompleted, Result: true},
	store.ReportFailed: {Kind: store.ReportFailed, State: store.JobStateRetrying, Exhausted: store.JobStateDead, SetsRunAt: true,
		Error: ErrorAlways},
	store.ReportCancelled: {Kind: store.ReportCancelled, State: store.JobStateCancelled, Error: ErrorOptional},
	store.ReportSnoozed: {Kind: store.ReportSnoozed, State: store.JobStateAvailable, Later: store.JobStateScheduled, SetsRunAt: true,
		Uncounts: true},
	store.ReportReleased: {Kind: store.ReportReleased, State: store.JobStateAvailable, Uncounts: true},
}

// Step is what one report does to its job: the result of Next.
type Step struct {
	// State is the job's next state.
	State store.JobState
	// RunAt is the job's next RunAt; zero keeps the one it has.
	RunAt time.Time
	// Uncount: decrement Attempt.
	Uncount bool
	// Error, when not nil, is appended to the job's errors, its defaults
	// filled in (FillError).
	Error *store.AttemptError
	// Result becomes the job's Result when State is completed (nil clears
	// the Result of an earlier attempt).
	Result []byte
}

// Finalized reports whether the step ends the job (FinalizedAt = Now).
func (s *Step) Finalized() bool { return s.State.Finished() }

// Next applies the rule of o's kind (see Rules) to a running job
// at attempt of maxAttempts. Every applied report also clears the job's
// lease and CancelRequested; a finished state sets FinalizedAt = now. o's
// kind must be valid (see store.ValidateReports).
func Next(o *store.Report, attempt, maxAttempts int, now time.Time) Step {
	t := &Rules[o.Kind]
	s := Step{State: t.State, Uncount: t.Uncounts}
	runAt := o.RunAt
	if runAt.IsZero() {
		runAt = now
	}
	switch {
	case t.Exhausted != "" && attempt >= maxAttempts:
		s.State = t.Exhausted
	case t.SetsRunAt:
		s.RunAt = runAt
		if t.Later != "" && runAt.After(now) {
			s.State = t.Later
		}
	}
	if t.Error == ErrorAlways || (t.Error == ErrorOptional && o.Error != nil) {
		e := FillError(o.Error, attempt, now)
		s.Error = &e
	}
	if t.Result {
		s.Result = o.Result
	}
	return s
}

// RescueState is the state JobRescue gives a running job whose lease
// expired: cancelled when an operator asked it to stop, dead when its
// Attempt reached MaxAttempts, available otherwise. The rescue appends
// RescueError to its errors.
func RescueState(attempt, maxAttempts int, cancelRequested bool) store.JobState {
	switch {
	case cancelRequested:
		return store.JobStateCancelled
	case attempt >= maxAttempts:
		return store.JobStateDead
	}
	return store.JobStateAvailable
}

// RescueError is the error JobRescue appends to a job whose attempt lost
// its lease.
func RescueError(attempt int, now time.Time) store.AttemptError {
	return store.AttemptError{Attempt: attempt, At: now, Message: store.LeaseLostMessage}
}

// FillError returns a copy of e (the zero error when nil) with its
// defaults filled in: a zero Attempt becomes attempt, a zero At becomes now,
// and an empty Message becomes store.NoErrorMessage. Every store records an
// outcome's error through it.
func FillError(e *store.AttemptError, attempt int, now time.Time) store.AttemptError {
	var v store.AttemptError
	if e != nil {
		v = *e
	}
	if v.Attempt == 0 {
		v.Attempt = attempt
	}
	if v.At.IsZero() {
		v.At = now
	}
	if v.Message == "" {
		v.Message = store.NoErrorMessage
	}
	return v
}

// OutcomeOf returns the history outcome of a job entering state next, and
// whether it counts at all: a finished state counts as itself; a job that
// goes back to wait for another attempt after a failed one (failed: a
// store.ReportFailed outcome, or a lost lease) counts as retried; anything else
// (a snooze, a release, a promotion, a retry by an operator) does not
// count.
func OutcomeOf(next store.JobState, failed bool) (store.HistoryOutcome, bool) {
	switch {
	case next.Finished():
		return store.HistoryOutcome(next), true
	case failed && next.Pending() && next != store.JobStateRunning:
		return store.HistoryRetried, true
	}
	return "", false
}

// Retry says what JobRetry does with a job in state st before it looks at
// the job's unique key and dependencies: a running job is refused
// (ErrJobRunning), an available or waiting one is left as it is (skip
// with no error), and any other is moved.
func Retry(st store.JobState) (skip bool, err error) {
	switch st {
	case store.JobStateRunning:
		return true, store.ErrJobRunning
	case store.JobStateAvailable, store.JobStateWaiting:
		return true, nil
	}
	return false, nil
}
