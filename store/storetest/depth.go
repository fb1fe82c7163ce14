package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

var depthCases = []testCase{
	{name: "Reject", run: testDepthReject},
	{name: "DropOldest", run: testDepthDropOldest},
}

// wantQueueFull fails the test unless enqueueing jobs (none of them a
// duplicate) at now fails with ErrQueueFull, in the words of
// store.QueueFullError, inserting nothing.
func wantQueueFull(t *testing.T, st store.Store, now time.Time, queue string, jobs ...*store.NewJob) {
	t.Helper()
	before := len(listIDs(t, st, store.JobListParams{}))
	qr, err := st.QueueGet(t.Context(), &store.QueueGetParams{Queue: queue})
	if err != nil {
		t.Fatalf("QueueGet(%q) error: %v", queue, err)
	}
	var queued, adding int64
	for k, n := range counts(t, st, queue) {
		if k.State.Queued() {
			queued += n
		}
	}
	for _, j := range jobs {
		if j.Queue == queue {
			adding++
		}
	}
	res, err := st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Jobs: jobs, Now: now})
	if !errors.Is(err, store.ErrQueueFull) {
		t.Fatalf("JobEnqueueMany(%d jobs) into full queue %q = %v, %v; want an error wrapping ErrQueueFull", len(jobs), queue, res, err)
	}
	want := store.QueueFullError(queue, qr.Settings.MaxDepth, queued, adding).Error()
	if !strings.HasSuffix(err.Error(), want) {
		t.Errorf("JobEnqueueMany into full queue %q error = %q, want it to end with %q", queue, err, want)
	}
	if after := len(listIDs(t, st, store.JobListParams{})); after != before {
		t.Errorf("rejected batch: store holds %d jobs, want %d (nothing inserted)", after, before)
	}
}

// OverflowReject fails a batch that would take the queue's queued jobs
// (scheduled and available included, running not) past MaxDepth, whole;
// duplicates take no room.
func testDepthReject(t *testing.T, e *env) {
	now := at(time.Hour)
	const q = "bounded"
	configure(t, e.st, q, store.QueueSettings{MaxDepth: 3, Overflow: store.OverflowReject}, now)
	keyedIn := newJobIn("job", q)
	keyedIn.UniqueKey = "k"
	scheduled := newJobIn("job", q)
	scheduled.RunAt = now.Add(time.Hour)
	enqueue(t, e.st, now, keyedIn, scheduled)

	wantQueueFull(t, e.st, now, q, newJobIn("job", q), newJobIn("job", q))
	wantQueueFull(t, e.st, now, q, newJobIn("job", "other"), newJobIn("job", q), newJobIn("job", q))
	dup := newJobIn("job", q)
	dup.UniqueKey = "k"
	res := enqueue(t, e.st, now, newJobIn("job", q), dup)
	if !res[1].Duplicate || res[0].Duplicate {
		t.Fatalf("enqueue of a new job and a duplicate into a queue with room for one = %+v, want new then duplicate", res)
	}
	wantQueueFull(t, e.st, now, q, newJobIn("job", q))

	// A running job does not count: claiming one makes room.
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: q, Limit: 1, Now: now}); len(got) != 1 {
		t.Fatalf("JobFetch(queue %q) = %v, want one job", q, got)
	}
	enqueueOne(t, e.st, now, newJobIn("job", q))
	wantQueueFull(t, e.st, now, q, newJobIn("job", q))
	// Other queues are not limited.
	enqueue(t, e.st, now, newJobIn("job", "other"), newJobIn("job", "other"), newJobIn("job", "other"), newJobIn("job", "other"))
	wantCounts(t, e.st, q, map[countKey]int64{
		{q, store.JobStateRunning}:   1,
		{q, store.JobStateAvailable}: 2,
		{q, store.JobStateScheduled}: 1,
	})
}

// OverflowDropOldest makes room by cancelling the queue's oldest queued
// jobs (lowest IDs, running ones left alone), each with an error saying it
// was dropped, counted in QueueRow.Dropped, their unique keys released.
func testDepthDropOldest(t *testing.T, e *env) {
	now := at(time.Hour)
	const q = "lossy"
	configure(t, e.st, q, store.QueueSettings{MaxDepth: 3, Overflow: store.OverflowDropOldest}, now)
	run := enqueueOne(t, e.st, now, newJobIn("job", q))
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: q, Limit: 1, Now: now}); len(got) != 1 || got[0] != run {
		t.Fatalf("JobFetch(queue %q) = %v, want [%d]", q, got, run)
	}
	oldest := newJobIn("job", q)
	oldest.UniqueKey = "oldest"
	second := newJobIn("job", q)
	second.RunAt = now.Add(time.Hour)
	old := enqueue(t, e.st, now, oldest, second, newJobIn("job", q))

	later := now.Add(time.Minute)
	res := enqueue(t, e.st, later, newJobIn("job", q), newJobIn("job", q))
	for i, r := range res {
		if r.Duplicate || r.State != store.JobStateAvailable {
			t.Errorf("enqueue into a full drop-oldest queue, job %d: %+v, want a new available job", i, r)
		}
	}
	for _, r := range old[:2] {
		got := wantState(t, e.st, r.ID, store.JobStateCancelled)
		if !got.FinalizedAt.Equal(later) {
			t.Errorf("dropped job %d: FinalizedAt %v, want %v", r.ID, got.FinalizedAt, later)
		}
		if n := len(got.Errors); n == 0 || !strings.Contains(got.Errors[n-1].Message, "dropped") {
			t.Errorf("dropped job %d: Errors %+v, want a last error mentioning \"dropped\"", r.ID, got.Errors)
		}
	}
	wantState(t, e.st, old[2].ID, store.JobStateAvailable)
	wantState(t, e.st, run, store.JobStateRunning)
	if got := queueGet(t, e.st, q); got.Dropped != 2 {
		t.Errorf("QueueGet(%q).Dropped = %d, want 2", q, got.Dropped)
	}
	k := keyed("oldest")
	if r := enqueue(t, e.st, later, k); r[0].Duplicate {
		t.Errorf("enqueue with the key of a dropped job = duplicate of %d, want the key released", r[0].ID)
	}
	enqueueOne(t, e.st, later, newJobIn("job", q))
	if got := queueGet(t, e.st, q); got.Dropped != 3 {
		t.Errorf("QueueGet(%q).Dropped after one more drop = %d, want 3", q, got.Dropped)
	}
	wantState(t, e.st, old[2].ID, store.JobStateCancelled)
	wantCounts(t, e.st, q, map[countKey]int64{
		{q, store.JobStateRunning}:   1,
		{q, store.JobStateAvailable}: 3,
		{q, store.JobStateCancelled}: 3,
	})
}
