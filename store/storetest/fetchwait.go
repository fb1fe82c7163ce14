package storetest

import (
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

var fetchWaitCases = []testCase{
	{name: "ClaimsWhatIsAvailable", run: testFetchWaitAvailable},
	{name: "NewJobEndsTheWait", run: testFetchWaitNewJob},
	{name: "LeavesWhatItMayNotClaim", run: testFetchWaitOthers},
	{name: "TimeoutClaimsNothingLater", run: testFetchWaitTimeout},
}

// fetchWaiter returns the store as a store.FetchWaiter, skipping the case
// for a store that is not one (its workers wait on QueueWatch, which the
// Watch group tests).
func fetchWaiter(t *testing.T, st store.Store) store.FetchWaiter {
	t.Helper()
	fw, ok := st.(store.FetchWaiter)
	if !ok {
		t.Skip("the store is not a store.FetchWaiter: its workers wait with QueueWatch (the Watch group)")
	}
	return fw
}

// fetchWait runs JobFetchWait on the default queue at now for up to wait.
func fetchWait(t *testing.T, fw store.FetchWaiter, p *store.JobFetchParams, wait time.Duration) []*store.JobRow {
	t.Helper()
	if p.Queue == "" {
		p.Queue = defaultQueue
	}
	p.Lease, p.Worker = lease, "waiter"
	res, err := fw.JobFetchWait(t.Context(), p, wait)
	if err != nil {
		t.Fatalf("JobFetchWait(limit %d, wait %v) error: %v", p.Limit, wait, err)
	}
	if len(res.Jobs) > p.Limit {
		t.Fatalf("JobFetchWait(limit %d) returned %d jobs", p.Limit, len(res.Jobs))
	}
	return res.Jobs
}

// A waiting fetch of a queue with jobs claims them at once, as JobFetch
// would.
func testFetchWaitAvailable(t *testing.T, e *env) {
	fw := fetchWaiter(t, e.st)
	now := at(time.Hour)
	want := enqueueN(t, e.st, now, 3, "k")[:2]
	rows := fetchWait(t, fw, &store.JobFetchParams{Limit: 2, Now: now}, time.Minute)
	if d := sameIDs(want, ids(rows)); d != "" {
		t.Fatalf("claimed %v, want the first two %v", ids(rows), want)
	}
	for _, r := range rows {
		if r.State != store.JobStateRunning || r.AttemptedBy != "waiter" || r.Attempt != 1 || r.ClaimToken == 0 {
			t.Errorf("job %d: %s attempt %d by %q token %d, want running, 1, waiter, a token", r.ID, r.State, r.Attempt, r.AttemptedBy, r.ClaimToken)
		}
	}
}

// A job enqueued while a worker waits ends the wait: the worker gets it,
// claimed once, either in the enqueue's step or by fetching again after a
// wake-up; its token applies its outcome.
func testFetchWaitNewJob(t *testing.T, e *env) {
	fw := fetchWaiter(t, e.st)
	now := at(time.Hour)
	got := make(chan *store.JobRow, 1)
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			res, err := fw.JobFetchWait(t.Context(), &store.JobFetchParams{Queue: defaultQueue, Limit: 5, Now: now, Lease: lease, Worker: "waiter"}, 5*time.Second)
			if err != nil {
				t.Errorf("JobFetchWait error: %v", err)
				break
			}
			if len(res.Jobs) > 0 {
				got <- res.Jobs[0]
				return
			}
		}
		got <- nil
	}()
	id := enqueueOne(t, e.st, now, newJob("k"))
	row := <-got
	if row == nil || row.ID != id {
		t.Fatalf("the waiting worker got %v, want job %d", row, id)
	}
	if row.State != store.JobStateRunning || row.AttemptedBy != "waiter" || row.AttemptedAt.Before(row.CreatedAt) {
		t.Errorf("job %d: %s by %q at %v (created %v), want running by waiter, not before its creation", id, row.State, row.AttemptedBy, row.AttemptedAt, row.CreatedAt)
	}
	fetchNone(t, e.st, now)
	finishOne(t, e.st, now.Add(time.Second), &store.Report{ID: id, ClaimToken: row.ClaimToken, Kind: store.ReportCompleted}, store.JobStateCompleted)
}

// A waiting worker with Kinds is never handed a job of another kind: the
// job stays available for a worker that has it.
func testFetchWaitOthers(t *testing.T, e *env) {
	fw := fetchWaiter(t, e.st)
	now := at(time.Hour)
	done := make(chan []*store.JobRow, 1)
	go func() {
		res, err := fw.JobFetchWait(t.Context(), &store.JobFetchParams{Queue: defaultQueue, Kinds: []string{"mine"}, Limit: 5, Now: now, Lease: lease, Worker: "waiter"}, 200*time.Millisecond)
		if err != nil {
			t.Errorf("JobFetchWait error: %v", err)
		}
		if res == nil {
			res = &store.JobFetchResult{}
		}
		done <- res.Jobs
	}()
	id := enqueueOne(t, e.st, now, newJob("theirs"))
	if rows := <-done; len(rows) != 0 {
		t.Fatalf("a worker of kind mine got %d jobs of kind theirs", len(rows))
	}
	wantState(t, e.st, id, store.JobStateAvailable)
}

// A wait that timed out claims nothing afterwards: a job enqueued later
// stays available.
func testFetchWaitTimeout(t *testing.T, e *env) {
	fw := fetchWaiter(t, e.st)
	now := at(time.Hour)
	if rows := fetchWait(t, fw, &store.JobFetchParams{Limit: 5, Now: now}, 20*time.Millisecond); len(rows) != 0 {
		t.Fatalf("a wait on an empty queue returned %d jobs", len(rows))
	}
	id := enqueueOne(t, e.st, now, newJob("k"))
	wantState(t, e.st, id, store.JobStateAvailable)
}
