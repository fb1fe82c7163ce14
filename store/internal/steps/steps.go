// Package steps holds the rules of durable steps that do not depend on how
// a store keeps its rows: checking the params of the Step methods, what a
// recorded step of the wrong kind means, the state a sleep ends in, when
// an awaiting job is ready, the encoding of a spawn step's children, and
// the texts of their errors. Every backend calls them, so a step means the
// same on each; only the backends import this package.
package steps

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sortiehq/sortie/store"
)

// CheckRecords checks the steps of a StepRecord call: none nil, each name
// valid (store.ValidateStepName) and each result valid JSON. The error
// names the step (its index from 1 and its name) and wraps
// store.ErrInvalidArgument.
func CheckRecords(recs []*store.StepRecord) error {
	for i, r := range recs {
		if r == nil {
			return fmt.Errorf("step %d of %d is nil: %w", i+1, len(recs), store.ErrInvalidArgument)
		}
		if err := store.ValidateStepName(r.Name); err != nil {
			return fmt.Errorf("step %d of %d (job %d): %w", i+1, len(recs), r.ID, err)
		}
		if !json.Valid(r.Result) {
			return fmt.Errorf("step %d of %d (job %d, %q): result is not valid JSON: %w", i+1, len(recs), r.ID, r.Name, store.ErrInvalidArgument)
		}
	}
	return nil
}

// CheckSleep checks a StepSleep call: a valid name and a wake time within
// store.EarliestRunAt and store.LatestRunAt.
func CheckSleep(p *store.StepSleepParams) error {
	if err := store.ValidateStepName(p.Name); err != nil {
		return err
	}
	if p.Until.Before(store.EarliestRunAt) || p.Until.After(store.LatestRunAt) {
		return &store.FieldError{Field: "until", Problem: fmt.Sprintf("must be between %s and %s, got %s",
			store.EarliestRunAt.Format(time.RFC3339), store.LatestRunAt.Format(time.RFC3339), p.Until.UTC().Format(time.RFC3339))}
	}
	return nil
}

// CheckSpawn checks a StepSpawn call and fills in its jobs' defaults: a
// valid name, 1 to store.MaxSpawn jobs, each valid (store.ValidateJobs)
// and none with a UniqueKey (the spawn step itself enqueues them once).
func CheckSpawn(p *store.StepSpawnParams) error {
	if err := store.ValidateStepName(p.Name); err != nil {
		return err
	}
	if n := len(p.Jobs); n < 1 || n > store.MaxSpawn {
		return fmt.Errorf("spawn %q: %d jobs, want 1 to %d: %w", p.Name, n, store.MaxSpawn, store.ErrInvalidArgument)
	}
	if err := store.ValidateJobs(p.Jobs); err != nil {
		return fmt.Errorf("spawn %q: %w", p.Name, err)
	}
	for i, j := range p.Jobs {
		if j.UniqueKey != "" {
			return fmt.Errorf("spawn %q: job %d of %d (kind %q) has a unique key; a spawned job cannot have one, the spawn step enqueues it once: %w",
				p.Name, i+1, len(p.Jobs), j.Kind, store.ErrInvalidArgument)
		}
	}
	return nil
}

// CheckAwait checks a StepAwait call: a valid name.
func CheckAwait(p *store.StepAwaitParams) error {
	return store.ValidateStepName(p.Name)
}

// WrongKindError is the error of a call that found step name of job id
// recorded as kind got when it needs kind want: a step name used for two
// different things.
func WrongKindError(id int64, name string, got, want store.StepKind) error {
	return fmt.Errorf("job %d: step %q is recorded as a %s, not a %s: %w", id, name, got, want, store.ErrInvalidArgument)
}

// NoSpawnError is the error of a StepAwait of job id naming a step that
// is not one of its spawn steps.
func NoSpawnError(id int64, name string) error {
	return fmt.Errorf("job %d has no spawn step %q to await: %w", id, name, store.ErrInvalidArgument)
}

// Existing checks a step found under the name a call records: a step of
// kind want is the call's own, recorded by an earlier attempt (nil); one
// of another kind is WrongKindError.
func Existing(id int64, s *store.JobStep, want store.StepKind) error {
	if s.Kind != want {
		return WrongKindError(id, s.Name, s.Kind, want)
	}
	return nil
}

// SleepState returns the state a sleeping job waits in: scheduled until
// its wake time, or available when that is not after now.
func SleepState(until, now time.Time) store.JobState {
	if until.After(now) {
		return store.JobStateScheduled
	}
	return store.JobStateAvailable
}

// Suspended is the result of a call that ended the attempt, leaving the
// job in state.
func Suspended(state store.JobState) *store.StepResult {
	return &store.StepResult{Applied: true, Suspended: true, State: state}
}

// ParentCancelledMessage is the error recorded on a child cancelled because
// its parent was cancelled or, when deleted, deleted.
func ParentCancelledMessage(parent int64, deleted bool) string {
	if deleted {
		return fmt.Sprintf("parent job %d was deleted", parent)
	}
	return fmt.Sprintf("parent job %d was cancelled", parent)
}

// WaitsFor returns the WaitsFor a job in state shows, stored being what
// the store holds: only a waiting or scheduled job waits at a step.
func WaitsFor(state store.JobState, stored string) string {
	if state == store.JobStateWaiting || state == store.JobStateScheduled {
		return stored
	}
	return ""
}

// EncodeChildren returns children as the JSON array the SQL stores keep.
func EncodeChildren(children []int64) string {
	b, _ := json.Marshal(children) // []int64 always encodes
	return string(b)
}

// DecodeChildren reads children as EncodeChildren wrote them.
func DecodeChildren(s string) ([]int64, error) {
	var ids []int64
	if err := json.Unmarshal([]byte(s), &ids); err != nil {
		return nil, fmt.Errorf("decode spawned children: %w", err)
	}
	return ids, nil
}

// Summary returns s as JobGet and JobList show it: without its Result and
// Children.
func Summary(s store.JobStep) store.JobStep {
	s.Result, s.Children = nil, nil
	return s
}

// ErrStale is what a backend's fenced step write reports when the claim is
// not the job's; it never leaves the backend.
var ErrStale = errors.New("stale claim")

// ImportAwaitReady reports whether an imported job waiting at the spawn
// step st may be released: none of its children is pending, and every
// one is in the store (held reports that). A child not yet imported may
// come in a later call of the same import.
func ImportAwaitReady(st *store.JobStep, held func(id int64) bool) bool {
	if st.Pending > 0 {
		return false
	}
	for _, c := range st.Children {
		if !held(c) {
			return false
		}
	}
	return true
}

// Children returns the IDs of a spawn's children, from the results of
// their enqueue, and how many of them are pending: the count the spawn
// step starts with.
func Children(results []store.EnqueueResult) (ids []int64, pending int) {
	ids = make([]int64, len(results))
	for i, r := range results {
		ids[i] = r.ID
		if r.State.Pending() {
			pending++
		}
	}
	return ids, pending
}
