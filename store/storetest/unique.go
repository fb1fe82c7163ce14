package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

var uniqueCases = []testCase{
	{name: "DuplicateWhilePending", run: testUniqueWhilePending},
	{name: "DuplicateWithinBatch", run: testUniqueWithinBatch},
	{name: "KeptThroughSnoozeRetryRelease", run: testUniqueKept},
	{name: "ReleasedWhenFinished", run: testUniqueReleased},
	{name: "ConcurrentEnqueues", run: testUniqueConcurrent},
}

// keyed returns a job of the default queue with unique key k.
func keyed(k string) *store.NewJob {
	j := newJob("unique")
	j.UniqueKey = k
	return j
}

// wantDuplicate enqueues a job with key k at now and fails the test unless
// it is a duplicate of holder in state s, and nothing was inserted.
func wantDuplicate(t *testing.T, st store.Store, now time.Time, j *store.NewJob, holder int64, s store.JobState) {
	t.Helper()
	before := len(listIDs(t, st, store.JobListParams{}))
	res := enqueue(t, st, now, j)
	if want := (store.EnqueueResult{ID: holder, Duplicate: true, State: s}); res[0] != want {
		t.Errorf("enqueue with unique key %q held by %s job %d = %+v, want %+v", j.UniqueKey, s, holder, res[0], want)
	}
	if after := len(listIDs(t, st, store.JobListParams{})); after != before {
		t.Errorf("duplicate enqueue of key %q: store holds %d jobs, want %d (nothing inserted)", j.UniqueKey, after, before)
	}
}

// A key held by a scheduled, available, running or retrying job keeps a
// second job with that key out; the result names the holder and its state.
func testUniqueWhilePending(t *testing.T, e *env) {
	now := at(time.Hour)
	onQueue := func(k, q string) *store.NewJob {
		j := keyed(k)
		j.Queue = q
		return j
	}
	sched := keyed("scheduled")
	sched.RunAt = now.Add(time.Hour)
	schedID := enqueueOne(t, e.st, now, sched)
	availID := enqueueOne(t, e.st, now, keyed("available"))
	runID := enqueueOne(t, e.st, now, onQueue("running", "run"))
	fetch(t, e.st, &store.JobFetchParams{Queue: "run", Limit: 1, Now: now})
	retryID := enqueueOne(t, e.st, now, onQueue("retrying", "retry"))
	rows := fetch(t, e.st, &store.JobFetchParams{Queue: "retry", Limit: 1, Now: now})
	if len(rows) != 1 {
		t.Fatalf("JobFetch(queue retry) returned %d jobs, want 1", len(rows))
	}
	finishOne(t, e.st, now, outcomeFor(rows[0], store.ReportFailed, now), store.JobStateRetrying)

	for _, c := range []struct {
		key    string
		queue  string
		holder int64
		state  store.JobState
	}{
		{"scheduled", defaultQueue, schedID, store.JobStateScheduled},
		{"available", defaultQueue, availID, store.JobStateAvailable},
		{"running", "run", runID, store.JobStateRunning},
		{"retrying", "retry", retryID, store.JobStateRetrying},
	} {
		wantDuplicate(t, e.st, now, onQueue(c.key, c.queue), c.holder, c.state)
		// The duplicate's own RunAt does not matter.
		later := onQueue(c.key, c.queue)
		later.RunAt = now.Add(24 * time.Hour)
		wantDuplicate(t, e.st, now, later, c.holder, c.state)
	}
	// The key is the whole identity: another queue and kind do not escape it.
	other := onQueue("available", "elsewhere")
	other.Kind = "other"
	wantDuplicate(t, e.st, now, other, availID, store.JobStateAvailable)
}

// Within one batch, a job whose key an earlier job of the batch holds is a
// duplicate of it; jobs without a key never are.
func testUniqueWithinBatch(t *testing.T, e *env) {
	now := at(time.Hour)
	sched := keyed("b")
	sched.RunAt = now.Add(time.Hour)
	res := enqueue(t, e.st, now, keyed("a"), sched, keyed("a"), newJob("plain"), keyed("b"), newJob("plain"), keyed("c"))
	for i, r := range []struct {
		dup    bool
		holder int
		state  store.JobState
	}{
		{false, 0, store.JobStateAvailable},
		{false, 1, store.JobStateScheduled},
		{true, 0, store.JobStateAvailable},
		{false, 3, store.JobStateAvailable},
		{true, 1, store.JobStateScheduled},
		{false, 5, store.JobStateAvailable},
		{false, 6, store.JobStateAvailable},
	} {
		got := res[i]
		if got.Duplicate != r.dup || got.State != r.state || (r.dup && got.ID != res[r.holder].ID) {
			t.Errorf("batch result %d = %+v, want {Duplicate: %v, State: %q} with the ID of result %d (%d)", i, got, r.dup, r.state, r.holder, res[r.holder].ID)
		}
	}
	if n := len(listIDs(t, e.st, store.JobListParams{})); n != 5 {
		t.Errorf("store holds %d jobs after a batch of 7 with 2 duplicates, want 5", n)
	}
}

// A job that snoozes, fails with attempts left, or is released is still
// pending, so it keeps its key.
func testUniqueKept(t *testing.T, e *env) {
	now := at(time.Hour)
	for _, c := range []struct {
		kind  store.ReportKind
		state store.JobState
	}{
		{store.ReportSnoozed, store.JobStateScheduled},
		{store.ReportFailed, store.JobStateRetrying},
		{store.ReportReleased, store.JobStateAvailable},
	} {
		k := "kept-" + c.kind.String()
		j := keyed(k)
		j.Queue = k
		id := enqueueOne(t, e.st, now, j)
		rows := fetch(t, e.st, &store.JobFetchParams{Queue: k, Limit: 1, Now: now})
		if len(rows) != 1 {
			t.Fatalf("JobFetch(queue %q) returned %d jobs, want 1", k, len(rows))
		}
		finishOne(t, e.st, now, outcomeFor(rows[0], c.kind, now), c.state)
		dup := keyed(k)
		dup.Queue = k
		wantDuplicate(t, e.st, now, dup, id, c.state)
	}
}

// Leaving the pending states releases the key: after the holder completes,
// is cancelled (by outcome or operator), dies (by outcome or rescue) or is
// deleted, a new job with the key is inserted.
func testUniqueReleased(t *testing.T, e *env) {
	now := at(time.Hour)
	for _, c := range []struct {
		how    string
		finish func(t *testing.T, row *store.JobRow)
	}{
		{"completed", func(t *testing.T, row *store.JobRow) { complete(t, e.st, now, row) }},
		{"cancelled by outcome", func(t *testing.T, row *store.JobRow) {
			finishOne(t, e.st, now, outcomeFor(row, store.ReportCancelled, now), store.JobStateCancelled)
		}},
		{"cancelled by JobCancel", func(t *testing.T, row *store.JobRow) {
			finishOne(t, e.st, now, outcomeFor(row, store.ReportReleased, now), store.JobStateAvailable)
			if _, err := e.st.JobCancel(t.Context(), &store.JobCancelParams{ID: row.ID, Now: now}); err != nil {
				t.Fatalf("JobCancel(%d) error: %v", row.ID, err)
			}
		}},
		{"dead by outcome", func(t *testing.T, row *store.JobRow) {
			finishOne(t, e.st, now, outcomeFor(row, store.ReportFailed, now), store.JobStateDead)
		}},
		{"dead by rescue", func(t *testing.T, row *store.JobRow) {
			wantRescued(t, e.st, now.Add(time.Hour), 10, 1)
			wantState(t, e.st, row.ID, store.JobStateDead)
		}},
		{"deleted", func(t *testing.T, row *store.JobRow) {
			finishOne(t, e.st, now, outcomeFor(row, store.ReportReleased, now), store.JobStateAvailable)
			if _, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: row.ID, Now: t0}); err != nil {
				t.Fatalf("JobDelete(%d) error: %v", row.ID, err)
			}
		}},
	} {
		k := "released-by-" + c.how
		j := keyed(k)
		j.MaxAttempts = 1
		id := enqueueOne(t, e.st, now, j)
		c.finish(t, fetchID(t, e.st, now, id))
		res := enqueue(t, e.st, now, keyed(k))
		if res[0].Duplicate || res[0].ID == id || res[0].State != store.JobStateAvailable {
			t.Errorf("enqueue with key %q after its holder was %s = %+v, want a new available job", k, c.how, res[0])
			continue
		}
		// Clear the default queue for the next round.
		complete(t, e.st, now, fetchID(t, e.st, now, res[0].ID))
	}
}

// Many goroutines enqueueing the same key at once insert exactly one job;
// every other result is a duplicate naming it.
func testUniqueConcurrent(t *testing.T, e *env) {
	const (
		workers = 16
		keys    = 5
	)
	now := at(time.Hour)
	type result struct {
		key int
		res store.EnqueueResult
	}
	results := make([][]result, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				k := (i + w) % keys // each worker goes through the keys in its own order
				batch := []*store.NewJob{keyed(fmt.Sprintf("race-%d", k))}
				if w%2 == 0 {
					batch = append(batch, keyed(fmt.Sprintf("own-%d-%d", w, k)))
				}
				res, err := e.st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Jobs: batch, Now: now})
				if err != nil {
					t.Errorf("worker %d: JobEnqueueMany error: %v", w, err)
					return
				}
				if len(res) != len(batch) {
					t.Errorf("worker %d: JobEnqueueMany returned %d results, want %d", w, len(res), len(batch))
					return
				}
				if len(batch) == 2 && res[1].Duplicate {
					t.Errorf("worker %d: own key %q reported duplicate", w, batch[1].UniqueKey)
				}
				results[w] = append(results[w], result{k, res[0]})
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	winners := make(map[int][]int64)
	dups := make(map[int][]int64)
	for _, rs := range results {
		for _, r := range rs {
			if r.res.Duplicate {
				dups[r.key] = append(dups[r.key], r.res.ID)
			} else {
				winners[r.key] = append(winners[r.key], r.res.ID)
			}
		}
	}
	for k := range keys {
		key := k
		if len(winners[key]) != 1 {
			t.Errorf("key race-%d: %d enqueues inserted a job (%v), want exactly 1", k, len(winners[key]), winners[key])
			continue
		}
		for _, id := range dups[key] {
			if id != winners[key][0] {
				t.Errorf("key race-%d: a duplicate names job %d, want the inserted job %d", k, id, winners[key][0])
			}
		}
		if len(dups[key]) != workers-1 {
			t.Errorf("key race-%d: %d duplicates, want %d", k, len(dups[key]), workers-1)
		}
	}
	var listed []int64
	for _, row := range listAll(t, e.st, store.JobListParams{}) {
		if strings.HasPrefix(row.UniqueKey, "race-") {
			listed = append(listed, row.ID)
		}
	}
	if len(listed) != keys {
		t.Errorf("store holds %d jobs with race-* keys, want %d", len(listed), keys)
	}
}
