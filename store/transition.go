package store

import (
	"fmt"
	"time"
)

// ErrorRule says whether a report records its Error on the job.
type ErrorRule int

// The error rules of the report kinds.
const (
	// ErrorNone: the report records no error.
	ErrorNone ErrorRule = iota
	// ErrorOptional: the report's Error is recorded when it has one.
	ErrorOptional
	// ErrorAlways: an error is recorded, NoErrorMessage when the report has
	// none.
	ErrorAlways
)

// Transition is what a report of one kind does to its running job. The
// table Transitions is the one definition of outcome to next state: stores
// that apply reports in Go call NextStep, and stores that apply them inside
// the database (pgstore's finish_jobs) generate their statement from the
// table.
type Transition struct {
	// Kind is the report kind the rule is for.
	Kind ReportKind
	// State is the job's next state.
	State JobState
	// Exhausted, when set, replaces State for a job whose Attempt reached
	// its MaxAttempts; the job's RunAt is then kept.
	Exhausted JobState
	// Later, when set, replaces State when the report's RunAt is after Now.
	Later JobState
	// SetsRunAt: the job's RunAt becomes the report's (Now when zero).
	SetsRunAt bool
	// Uncounts: the attempt does not count (Attempt is decremented).
	Uncounts bool
	// Error says whether the report's Error is recorded.
	Error ErrorRule
	// Result: the report's Result is recorded.
	Result bool
}

// Transitions holds the rule of each report kind, indexed by kind.
var Transitions = [...]Transition{
	ReportCompleted: {Kind: ReportCompleted, State: JobStateCompleted, Result: true},
	ReportFailed: {Kind: ReportFailed, State: JobStateRetrying, Exhausted: JobStateDead, SetsRunAt: true,
		Error: ErrorAlways},
	ReportCancelled: {Kind: ReportCancelled, State: JobStateCancelled, Error: ErrorOptional},
	ReportSnoozed: {Kind: ReportSnoozed, State: JobStateAvailable, Later: JobStateScheduled, SetsRunAt: true,
		Uncounts: true},
	ReportReleased: {Kind: ReportReleased, State: JobStateAvailable, Uncounts: true},
}

// Valid reports whether k is a known report kind.
func (k ReportKind) Valid() bool {
	return k >= ReportCompleted && int(k) < len(Transitions)
}

// Step is what one report does to its job: the result of NextStep.
type Step struct {
	// State is the job's next state.
	State JobState
	// RunAt is the job's next RunAt; zero keeps the one it has.
	RunAt time.Time
	// Uncount: decrement Attempt.
	Uncount bool
	// Error, when not nil, is appended to the job's errors, its defaults
	// filled in (FillAttemptError).
	Error *AttemptError
	// Result becomes the job's Result when State is completed (nil clears
	// the Result of an earlier attempt).
	Result []byte
}

// Finalized reports whether the step ends the job (FinalizedAt = Now).
func (s *Step) Finalized() bool { return s.State.Finished() }

// NextStep applies the rule of o's kind (see Transitions) to a running job
// at attempt of maxAttempts. Every applied report also clears the job's
// lease and CancelRequested; a finished state sets FinalizedAt = now. o's
// kind must be valid (see ValidateReports).
func NextStep(o *Report, attempt, maxAttempts int, now time.Time) Step {
	t := &Transitions[o.Kind]
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
		e := FillAttemptError(o.Error, attempt, now)
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
func RescueState(attempt, maxAttempts int, cancelRequested bool) JobState {
	switch {
	case cancelRequested:
		return JobStateCancelled
	case attempt >= maxAttempts:
		return JobStateDead
	}
	return JobStateAvailable
}

// RescueError is the error JobRescue appends to a job whose attempt lost
// its lease.
func RescueError(attempt int, now time.Time) AttemptError {
	return AttemptError{Attempt: attempt, At: now, Message: LeaseLostMessage}
}

// ValidateReports checks the reports of a JobFinish: none is nil, each has
// a known kind, and only a release says its job never started. Every store
// calls it before applying any, so a bad report applies nothing.
func ValidateReports(reports []*Report) error {
	for i, o := range reports {
		if o == nil {
			return fmt.Errorf("report %d of %d is nil: %w", i+1, len(reports), ErrInvalidArgument)
		}
		if !o.Kind.Valid() {
			return fmt.Errorf("report %d of %d (job %d) has unknown kind %v: %w", i+1, len(reports), o.ID, o.Kind, ErrInvalidArgument)
		}
		if o.Unstarted && o.Kind != ReportReleased {
			return fmt.Errorf("report %d of %d (job %d) is %v and Unstarted, which goes with released only: %w", i+1, len(reports), o.ID, o.Kind, ErrInvalidArgument)
		}
	}
	return nil
}
