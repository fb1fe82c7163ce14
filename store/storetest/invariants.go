package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sortiehq/sortie/store"
)

// checkInvariants checks what must hold of any store at rest, whatever
// happened before:
//
//   - JobList with a State filter returns only jobs in that state, and no
//     job is listed under two states;
//   - a running job has a LeaseUntil and a ClaimToken; a job that is not
//     running (a waiting one included) has no LeaseUntil;
//   - a pending job (waiting included) has no FinalizedAt; a finished job
//     has one; a waiting job has dependencies;
//   - JobCounts, with and without a Queue filter, equals the number of jobs
//     found by paging JobList per state (waiting included), and JobList
//     without filters finds
//     the same jobs;
//   - QueueLatency agrees with the RunAt of the jobs listed (checkLatency),
//     and JobHistory with itself (checkHistory).
func checkInvariants(t testing.TB, st store.Store) {
	t.Helper()
	listed := make(map[countKey]int64)
	queues := make(map[string]bool)
	stateOf := make(map[int64]store.JobState)
	// The earliest RunAt of each queue's available jobs, and of its
	// scheduled and retrying ones.
	available, waiting := make(map[string]time.Time), make(map[string]time.Time)
	for _, s := range store.JobStates {
		for _, row := range listAll(t, st, store.JobListParams{State: s, Limit: 500}) {
			if row.State != s {
				t.Errorf("invariant: JobList(state %q) returned job %d in state %q", s, row.ID, row.State)
			}
			if prev, ok := stateOf[row.ID]; ok {
				t.Errorf("invariant: job %d listed in states %q and %q", row.ID, prev, s)
			}
			stateOf[row.ID] = s
			switch s {
			case store.JobStateAvailable:
				earliest(available, row.Queue, row.RunAt)
			case store.JobStateScheduled, store.JobStateRetrying:
				earliest(waiting, row.Queue, row.RunAt)
			}
			listed[countKey{row.Queue, s}]++
			queues[row.Queue] = true
			switch {
			case s == store.JobStateRunning && (row.LeaseUntil.IsZero() || row.ClaimToken == 0):
				t.Errorf("invariant: running job %d has LeaseUntil %v and ClaimToken %d, want both set", row.ID, row.LeaseUntil, row.ClaimToken)
			case s != store.JobStateRunning && !row.LeaseUntil.IsZero():
				t.Errorf("invariant: %s job %d has LeaseUntil %v, want zero unless running", s, row.ID, row.LeaseUntil)
			}
			if s == store.JobStateWaiting && len(row.DependsOn) == 0 && row.WaitsFor == "" {
				t.Errorf("invariant: waiting job %d has no DependsOn and no WaitsFor, want what it waits for", row.ID)
			}
			switch {
			case s.Pending() && !row.FinalizedAt.IsZero():
				t.Errorf("invariant: %s job %d has FinalizedAt %v, want zero while pending", s, row.ID, row.FinalizedAt)
			case s.Finished() && row.FinalizedAt.IsZero():
				t.Errorf("invariant: %s job %d has no FinalizedAt", s, row.ID)
			}
		}
	}
	all := listAll(t, st, store.JobListParams{Limit: 500})
	if len(all) != len(stateOf) {
		t.Errorf("invariant: JobList without filters found %d jobs, JobList per state found %d", len(all), len(stateOf))
	}
	for _, row := range all {
		if _, ok := stateOf[row.ID]; !ok {
			t.Errorf("invariant: job %d (state %q) is listed without filters but not under its state", row.ID, row.State)
		}
	}
	if diff := cmp.Diff(listed, counts(t, st, ""), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("invariant: JobCounts disagrees with JobList (-listed +counted):\n%s", diff)
	}
	for q := range queues {
		want := make(map[countKey]int64)
		for k, n := range listed {
			if k.Queue == q {
				want[k] = n
			}
		}
		if diff := cmp.Diff(want, counts(t, st, q), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("invariant: JobCounts(queue %q) disagrees with JobList (-listed +counted):\n%s", q, diff)
		}
	}
	checkLatency(t, st, available, waiting)
	checkHistory(t, st)
	checkSteps(t, all)
}

// checkSteps checks what the steps of every job must show: WaitsFor only
// on a waiting job (naming a spawn step with children pending: no parent
// waits for nothing) or a scheduled one (naming a sleep step), and each
// spawn step's Pending equal to its children listed pending.
func checkSteps(t testing.TB, all []*store.JobRow) {
	t.Helper()
	type stepKey struct {
		job  int64
		name string
	}
	pending := make(map[stepKey]int)
	for _, row := range all {
		if row.ParentID != 0 && row.State.Pending() {
			pending[stepKey{row.ParentID, row.SpawnStep}]++
		}
	}
	for _, row := range all {
		kinds := make(map[string]store.JobStep, len(row.Steps))
		for _, s := range row.Steps {
			kinds[s.Name] = s
			if s.Kind == store.StepSpawn && s.Pending != pending[stepKey{row.ID, s.Name}] {
				t.Errorf("invariant: job %d's spawn step %q has Pending %d, but %d of its children are listed pending",
					row.ID, s.Name, s.Pending, pending[stepKey{row.ID, s.Name}])
			}
		}
		if row.WaitsFor == "" {
			continue
		}
		s, ok := kinds[row.WaitsFor]
		switch {
		case row.State == store.JobStateWaiting && (!ok || s.Kind != store.StepSpawn || s.Pending == 0):
			t.Errorf("invariant: job %d waits at %q with %+v, want a spawn step with children pending", row.ID, row.WaitsFor, s)
		case row.State == store.JobStateScheduled && (!ok || s.Kind != store.StepSleep):
			t.Errorf("invariant: scheduled job %d waits at %q, want a sleep step of that name", row.ID, row.WaitsFor)
		case row.State != store.JobStateWaiting && row.State != store.JobStateScheduled:
			t.Errorf("invariant: %s job %d has WaitsFor %q, want it empty", row.State, row.ID, row.WaitsFor)
		}
	}
}

// earliest keeps in m[q] the earliest of its value and at.
func earliest(m map[string]time.Time, q string, at time.Time) {
	if v, ok := m[q]; !ok || at.Before(v) {
		m[q] = at
	}
}

// checkNow runs checkInvariants in the middle of a case, so a sequence of
// transitions is checked step by step; step names the point reached.
func checkNow(t *testing.T, st store.Store, step string) {
	t.Helper()
	if t.Failed() {
		return
	}
	checkInvariants(t, st)
	if t.Failed() {
		t.Fatalf("invariants broken after %s", step)
	}
}
