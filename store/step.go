package store

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// StepKind says what a recorded step is.
type StepKind string

// The kinds of step a job records.
const (
	// StepRun is a step whose function ran once: Result is its JSON result.
	StepRun StepKind = "step"
	// StepSleep is a durable sleep: Until is the job's wake time.
	StepSleep StepKind = "sleep"
	// StepSpawn enqueued child jobs once: Children are their IDs.
	StepSpawn StepKind = "spawn"
)

// Valid reports whether k is one of the step kinds.
func (k StepKind) Valid() bool { return k == StepRun || k == StepSleep || k == StepSpawn }

// The limits of a step, the same on every store.
const (
	// MaxStepNameLen is the longest step name, in bytes.
	MaxStepNameLen = 255
	// MaxSpawn is the most jobs one StepSpawn enqueues.
	MaxSpawn = 100_000
)

// JobStep is one step a job recorded. Its name is unique within the job;
// a step is recorded once and never changed, except Pending.
type JobStep struct {
	// Name is the name the handler gave the step.
	Name string
	// Kind says what the step is.
	Kind StepKind
	// Attempt is the attempt that recorded the step.
	Attempt int
	// RecordedAt is when the step was recorded (the recording call's Now).
	RecordedAt time.Time
	// Size is the length of Result in bytes (StepRun).
	Size int
	// Result is a StepRun step's JSON result. JobGet and JobList leave it
	// nil; StepList returns it.
	Result []byte
	// Until is a StepSleep step's wake time.
	Until time.Time
	// ChildCount is how many jobs a StepSpawn step enqueued.
	ChildCount int
	// Children are the IDs of the jobs a StepSpawn step enqueued, in the
	// order given. JobGet and JobList leave it nil; StepList returns it.
	Children []int64
	// Pending is how many of a StepSpawn step's children are pending
	// (neither finished nor deleted), kept by the store in the step of
	// every change of a child.
	Pending int
}

// StepRecord is one step of a StepRecord call.
type StepRecord struct {
	// ID and ClaimToken name the running attempt recording the step.
	ID         int64
	ClaimToken int64
	// Name is the step's name: 1 to MaxStepNameLen bytes of UTF-8.
	Name string
	// Result is the step's JSON result.
	Result []byte
}

// StepResult says what a step call did to one job.
type StepResult struct {
	// Applied is false when the claim is stale: the job is gone, not
	// running, or was claimed again (ClaimToken mismatch). Nothing changed.
	Applied bool
	// Exists reports that the job already had a step of the name: the
	// call recorded nothing (the first record stands).
	Exists bool
	// CancelRequested reports that JobCancel asked the running job to stop:
	// StepSleep and StepAwait then change nothing, and the worker ends the
	// attempt as cancelled.
	CancelRequested bool
	// Suspended reports that the call ended the attempt (StepSleep, or
	// StepAwait with children pending); State is the job's state after.
	Suspended bool
	State     JobState
	// Children are the IDs of a StepSpawn step's children, new or recorded.
	Children []int64
}

// StepAwaitParams are the arguments of Store.StepAwait.
type StepAwaitParams struct {
	ID         int64
	ClaimToken int64
	// Name is the StepSpawn step whose children the job awaits.
	Name string
	Now  time.Time
}

// StepListParams are the arguments of Store.StepList.
type StepListParams struct {
	ID int64
}

// StepRecordParams are the arguments of Store.StepRecord.
type StepRecordParams struct {
	Steps []*StepRecord
	Now   time.Time
}

// StepSleepParams are the arguments of Store.StepSleep.
type StepSleepParams struct {
	ID         int64
	ClaimToken int64
	Name       string
	// Until is the wake time, between EarliestRunAt and LatestRunAt.
	Until time.Time
	Now   time.Time
}

// StepSpawnParams are the arguments of Store.StepSpawn.
type StepSpawnParams struct {
	ID         int64
	ClaimToken int64
	Name       string
	// Jobs are the children, 1 to MaxSpawn, checked as JobEnqueueMany
	// checks a batch; none may have a UniqueKey.
	Jobs []*NewJob
	// CancelWithParent marks every child JobRow.CancelWithParent.
	CancelWithParent bool
	Now              time.Time
}

// ValidateStepName checks a step name: 1 to MaxStepNameLen bytes of
// UTF-8. The error is a *FieldError for field "step name".
func ValidateStepName(name string) error {
	switch {
	case name == "":
		return fieldErrorf("step name", "is empty")
	case len(name) > MaxStepNameLen:
		return fieldErrorf("step name", "must be at most %d bytes, got %d", MaxStepNameLen, len(name))
	case !utf8.ValidString(name):
		return fieldErrorf("step name", "is not valid UTF-8")
	}
	return nil
}

// importSteps checks the steps of an imported job (as StepList returns
// them): valid names, each once, known kinds, each kind's fields, and a
// WaitsFor that names one of them, of the kind its state waits at.
func importSteps(j *JobRow) error {
	seen := make(map[string]*JobStep, len(j.Steps))
	for i := range j.Steps {
		s := &j.Steps[i]
		if err := ValidateStepName(s.Name); err != nil {
			return fmt.Errorf("steps[%d]: %w", i, err)
		}
		if seen[s.Name] != nil {
			return fmt.Errorf("steps[%d]: step %q appears twice", i, s.Name)
		}
		seen[s.Name] = s
		switch {
		case !s.Kind.Valid():
			return fmt.Errorf("steps[%d] (%q): kind %q is not step, sleep or spawn", i, s.Name, s.Kind)
		case s.Attempt < 0 || s.RecordedAt.IsZero():
			return fmt.Errorf("steps[%d] (%q): needs attempt and recorded_at", i, s.Name)
		case s.Kind == StepRun && !json.Valid(s.Result):
			return fmt.Errorf("steps[%d] (%q): result is not valid JSON", i, s.Name)
		case s.Kind == StepSleep && s.Until.IsZero():
			return fmt.Errorf("steps[%d] (%q): a sleep needs until", i, s.Name)
		case s.Kind == StepSpawn && len(s.Children) == 0 && s.ChildCount > 0:
			return fmt.Errorf("steps[%d] (%q): a spawn needs its children's IDs", i, s.Name)
		}
		for _, c := range s.Children {
			if c <= j.ID {
				return fmt.Errorf("steps[%d] (%q): child %d is not a later job", i, s.Name, c)
			}
		}
	}
	if j.WaitsFor == "" {
		return nil
	}
	want := map[JobState]StepKind{JobStateScheduled: StepSleep, JobStateWaiting: StepSpawn}[j.State]
	if s := seen[j.WaitsFor]; want == "" || s == nil || s.Kind != want {
		return fmt.Errorf("waits_for %q: a %s job waits at one of its steps (a sleep while scheduled, a spawn while waiting)", j.WaitsFor, j.State)
	}
	return nil
}
