package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

var periodicCases = []testCase{
	{name: "AdvanceFromZero", run: testPeriodicFromZero},
	{name: "StaleFromRefused", run: testPeriodicStale},
	{name: "ConcurrentAdvanceOnce", run: testPeriodicConcurrent},
	{name: "FailedEnqueueMovesNothing", run: testPeriodicFailedEnqueue},
	{name: "ListSorted", run: testPeriodicList},
}

// advance calls PeriodicAdvance and fails the test on error.
func advance(t testing.TB, st store.Store, p *store.PeriodicAdvanceParams) *store.PeriodicAdvanceResult {
	t.Helper()
	res, err := st.PeriodicAdvance(t.Context(), p)
	if err != nil {
		t.Fatalf("PeriodicAdvance(%q, from %v to %v) error: %v", p.Name, p.From, p.To, err)
	}
	if res == nil {
		t.Fatalf("PeriodicAdvance(%q) returned nil and no error", p.Name)
	}
	return res
}

// periodicList returns PeriodicList.
func periodicList(t testing.TB, st store.Store) []store.PeriodicRow {
	t.Helper()
	rows, err := st.PeriodicList(t.Context(), &store.PeriodicListParams{})
	if err != nil {
		t.Fatalf("PeriodicList error: %v", err)
	}
	return rows
}

// A schedule never advanced is at the zero time: advancing from zero
// applies, moves Last and enqueues the slot's jobs (as JobEnqueueMany).
func testPeriodicFromZero(t *testing.T, e *env) {
	if got := periodicList(t, e.st); len(got) != 0 {
		t.Fatalf("PeriodicList of a new store = %+v, want none", got)
	}
	now := at(time.Hour)
	slot := at(time.Hour - time.Minute)
	res := advance(t, e.st, &store.PeriodicAdvanceParams{Name: "nightly", To: slot, Now: now, Jobs: []*store.NewJob{newJob("report"), newJob("cleanup")}})
	if !res.Applied || !res.Last.Equal(slot) || len(res.Results) != 2 {
		t.Fatalf("PeriodicAdvance from zero = %+v, want Applied, Last %v, 2 results", res, slot)
	}
	for i, r := range res.Results {
		if r.Duplicate || r.State != store.JobStateAvailable {
			t.Errorf("PeriodicAdvance result %d = %+v, want a new available job", i, r)
		}
	}
	if got := listIDs(t, e.st, store.JobListParams{}); cmp.Diff([]int64{res.Results[0].ID, res.Results[1].ID}, got) != "" {
		t.Errorf("jobs after PeriodicAdvance = %v, want the two enqueued", got)
	}
	want := []store.PeriodicRow{{Name: "nightly", Last: slot, UpdatedAt: now}}
	if diff := cmp.Diff(want, periodicList(t, e.st)); diff != "" {
		t.Errorf("PeriodicList mismatch (-want +got):\n%s", diff)
	}
}

// An advance whose From is no longer the last slot changes nothing: it
// returns Applied false with the current Last and enqueues nothing.
func testPeriodicStale(t *testing.T, e *env) {
	now := at(time.Hour)
	s1, s2, s3 := at(time.Minute), at(2*time.Minute), at(3*time.Minute)
	advance(t, e.st, &store.PeriodicAdvanceParams{Name: "tick", To: s1, Now: now, Jobs: []*store.NewJob{newJob("tick")}})
	res := advance(t, e.st, &store.PeriodicAdvanceParams{Name: "tick", To: s1, Now: now, Jobs: []*store.NewJob{newJob("tick")}})
	if res.Applied || !res.Last.Equal(s1) || len(res.Results) != 0 {
		t.Errorf("second PeriodicAdvance from zero = %+v, want Applied false, Last %v, no results", res, s1)
	}
	res = advance(t, e.st, &store.PeriodicAdvanceParams{Name: "tick", From: s1, To: s2, Now: now, Jobs: []*store.NewJob{newJob("tick")}})
	if !res.Applied || !res.Last.Equal(s2) {
		t.Errorf("PeriodicAdvance from %v = %+v, want Applied, Last %v", s1, res, s2)
	}
	res = advance(t, e.st, &store.PeriodicAdvanceParams{Name: "tick", From: s1, To: s3, Now: now, Jobs: []*store.NewJob{newJob("tick")}})
	if res.Applied || !res.Last.Equal(s2) {
		t.Errorf("PeriodicAdvance from the old slot %v = %+v, want Applied false, Last %v", s1, res, s2)
	}
	if got := listIDs(t, e.st, store.JobListParams{}); len(got) != 2 {
		t.Errorf("jobs after two applied and two refused advances = %v, want 2", got)
	}
	// Other schedules are independent.
	if res := advance(t, e.st, &store.PeriodicAdvanceParams{Name: "other", To: s3, Now: now}); !res.Applied {
		t.Errorf("PeriodicAdvance of another schedule from zero = %+v, want Applied", res)
	}
}

// Many clients advancing the same slot at once: exactly one applies, and
// the slot's job is enqueued once.
func testPeriodicConcurrent(t *testing.T, e *env) {
	now := at(time.Hour)
	slot := at(time.Minute)
	const clients = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied int
		start   = make(chan struct{})
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := e.st.PeriodicAdvance(t.Context(), &store.PeriodicAdvanceParams{Name: "shared", To: slot, Now: now, Jobs: []*store.NewJob{newJob("slot")}})
			if err != nil {
				t.Errorf("PeriodicAdvance error: %v", err)
				return
			}
			if !res.Last.Equal(slot) {
				t.Errorf("PeriodicAdvance = %+v, want Last %v", res, slot)
			}
			if res.Applied {
				mu.Lock()
				applied++
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if applied != 1 {
		t.Errorf("%d of %d concurrent PeriodicAdvance calls for one slot applied, want exactly 1", applied, clients)
	}
	if got := listIDs(t, e.st, store.JobListParams{}); len(got) != 1 {
		t.Errorf("jobs after concurrent advances = %v, want exactly one", got)
	}
}

// The advance and its enqueue are one step: when the enqueue fails, the
// schedule does not move.
func testPeriodicFailedEnqueue(t *testing.T, e *env) {
	now := at(time.Hour)
	bad := newJob("")
	res, err := e.st.PeriodicAdvance(t.Context(), &store.PeriodicAdvanceParams{Name: "broken", To: at(time.Minute), Now: now, Jobs: []*store.NewJob{newJob("ok"), bad}})
	if err == nil {
		t.Fatalf("PeriodicAdvance with a job of empty kind = %+v, want an error", res)
	}
	if got := periodicList(t, e.st); len(got) != 0 {
		t.Errorf("PeriodicList after a failed advance = %+v, want none", got)
	}
	if got := listIDs(t, e.st, store.JobListParams{}); len(got) != 0 {
		t.Errorf("jobs after a failed advance = %v, want none", got)
	}
	if res := advance(t, e.st, &store.PeriodicAdvanceParams{Name: "broken", To: at(time.Minute), Now: now}); !res.Applied {
		t.Errorf("PeriodicAdvance from zero after a failed one = %+v, want Applied", res)
	}
}

// PeriodicList returns every schedule's state, by name.
func testPeriodicList(t *testing.T, e *env) {
	now := at(time.Hour)
	for i, name := range []string{"b", "c", "a"} {
		advance(t, e.st, &store.PeriodicAdvanceParams{Name: name, To: at(time.Duration(i) * time.Minute), Now: now.Add(time.Duration(i) * time.Second)})
	}
	advance(t, e.st, &store.PeriodicAdvanceParams{Name: "b", From: at(0), To: at(10 * time.Minute), Now: now.Add(time.Minute)})
	want := []store.PeriodicRow{
		{Name: "a", Last: at(2 * time.Minute), UpdatedAt: now.Add(2 * time.Second)},
		{Name: "b", Last: at(10 * time.Minute), UpdatedAt: now.Add(time.Minute)},
		{Name: "c", Last: at(time.Minute), UpdatedAt: now.Add(time.Second)},
	}
	if diff := cmp.Diff(want, periodicList(t, e.st)); diff != "" {
		t.Errorf("PeriodicList mismatch (-want +got):\n%s", diff)
	}
}
