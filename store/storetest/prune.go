package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

var pruneCases = []testCase{
	{name: "CutoffsPerState", run: testPruneCutoffs},
	{name: "Limit", run: testPruneLimit},
}

// prune calls JobPrune and fails the test unless it deleted want jobs.
func prune(t *testing.T, st store.Store, p store.JobPruneParams, want int) {
	t.Helper()
	got, err := st.JobPrune(t.Context(), &p)
	if err != nil {
		t.Fatalf("JobPrune(%+v) error: %v", p, err)
	}
	if got != want {
		t.Fatalf("JobPrune(%+v) = %d, want %d", p, got, want)
	}
}

// JobPrune deletes finished jobs finalized before their state's cutoff
// (strictly), ignores states whose cutoff is zero, never touches pending or
// running jobs, and returns how many it deleted.
func testPruneCutoffs(t *testing.T, e *env) {
	t1 := at(time.Hour)
	t2 := t1.Add(time.Hour)
	far := at(1000 * time.Hour)
	n := 0
	mk := func(s store.JobState, finalized time.Time) int64 {
		n++
		return inState(t, e.st, finalized, s, "q", fmt.Sprintf("job-%d", n), "").ID
	}
	oldDone := []int64{mk(store.JobStateCompleted, t1), mk(store.JobStateCompleted, t1)}
	newDone := mk(store.JobStateCompleted, t2)
	cancelled := mk(store.JobStateCancelled, t1)
	dead := mk(store.JobStateDead, t1)
	pending := []int64{
		mk(store.JobStateScheduled, at(0)), mk(store.JobStateAvailable, at(0)),
		mk(store.JobStateRetrying, at(0)), mk(store.JobStateRunning, at(0)),
	}
	gone := func(ids ...int64) {
		t.Helper()
		for _, id := range ids {
			if _, err := e.st.JobGet(t.Context(), &store.JobGetParams{ID: id}); !wantErr(t, fmt.Sprintf("JobGet(%d) of a pruned job", id), err, store.ErrNotFound) {
				t.FailNow()
			}
		}
	}

	prune(t, e.st, store.JobPruneParams{Limit: 100}, 0)
	prune(t, e.st, store.JobPruneParams{CompletedBefore: t1, Limit: 100}, 0) // finalized at t1 is not before t1
	prune(t, e.st, store.JobPruneParams{CompletedBefore: t2, Limit: 100}, 2)
	gone(oldDone...)
	wantState(t, e.st, newDone, store.JobStateCompleted)
	prune(t, e.st, store.JobPruneParams{CompletedBefore: far, Limit: 100}, 1)
	gone(newDone)
	wantState(t, e.st, cancelled, store.JobStateCancelled)
	wantState(t, e.st, dead, store.JobStateDead)

	prune(t, e.st, store.JobPruneParams{CancelledBefore: far, Limit: 100}, 1)
	gone(cancelled)
	wantState(t, e.st, dead, store.JobStateDead)
	prune(t, e.st, store.JobPruneParams{DeadBefore: t1, Limit: 100}, 0)
	prune(t, e.st, store.JobPruneParams{DeadBefore: far, Limit: 100}, 1)
	gone(dead)

	prune(t, e.st, store.JobPruneParams{CompletedBefore: far, CancelledBefore: far, DeadBefore: far, Limit: 100}, 0)
	for i, s := range []store.JobState{store.JobStateScheduled, store.JobStateAvailable, store.JobStateRetrying, store.JobStateRunning} {
		wantState(t, e.st, pending[i], s)
	}
	wantCounts(t, e.st, "", map[countKey]int64{
		{"q", store.JobStateScheduled}: 1, {"q", store.JobStateAvailable}: 1,
		{"q", store.JobStateRetrying}: 1, {"q", store.JobStateRunning}: 1,
	})
}

// JobPrune deletes at most Limit jobs per call, and the counts drop with it.
func testPruneLimit(t *testing.T, e *env) {
	now := at(time.Hour)
	for i := range 5 {
		inState(t, e.st, now, store.JobStateCompleted, "q", fmt.Sprintf("job-%d", i), "")
	}
	inState(t, e.st, now, store.JobStateDead, "q", "dead", "")
	left := int64(5)
	for _, want := range []int{2, 2, 1, 0} {
		prune(t, e.st, store.JobPruneParams{CompletedBefore: now.Add(time.Second), DeadBefore: now, Limit: 2}, want)
		left -= int64(want)
		wantC := map[countKey]int64{{"q", store.JobStateDead}: 1}
		if left > 0 {
			wantC[countKey{"q", store.JobStateCompleted}] = left
		}
		wantCounts(t, e.st, "", wantC)
	}
}
