package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sortiehq/sortie/store"
)

var durabilityCases = []testCase{
	{name: "EnqueuedJobsSurviveReopen", durable: true, run: testDurableEnqueue},
	{name: "TransitionsSurviveReopen", durable: true, run: testDurableTransitions},
}

// snapshot returns every job of the store by ID, and the counts.
func snapshot(t *testing.T, st store.Store) (map[int64]*store.JobRow, map[countKey]int64) {
	t.Helper()
	rows := make(map[int64]*store.JobRow)
	for _, row := range listAll(t, st, store.JobListParams{}) {
		rows[row.ID] = get(t, st, row.ID)
	}
	return rows, counts(t, st, "")
}

// wantSameAfterReopen fails the test unless the reopened store holds exactly
// the jobs and counts of before.
func wantSameAfterReopen(t *testing.T, st store.Store, before map[int64]*store.JobRow, beforeCounts map[countKey]int64) {
	t.Helper()
	after, afterCounts := snapshot(t, st)
	if diff := cmp.Diff(before, after, rowOpts); diff != "" {
		t.Errorf("jobs changed across reopen (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(beforeCounts, afterCounts, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("JobCounts changed across reopen (-before +after):\n%s", diff)
	}
}

// Enqueued jobs are committed when JobEnqueueMany returns: after a reopen
// they are all there with every field, their unique keys still held, and new
// IDs still increase.
func testDurableEnqueue(t *testing.T, e *env) {
	now := at(time.Hour)
	keyed := &store.NewJob{
		Kind: "email.send", Queue: "mail", Args: []byte(`{"to":"ana@example.com"}`),
		Priority: 1, MaxAttempts: 3, RunAt: now.Add(time.Hour + time.Microsecond),
		UniqueKey: "k1", Tags: []string{"a", "b"}, Meta: []byte(`{"m":1}`), Timeout: time.Minute,
	}
	res := enqueue(t, e.st, now, keyed, newJob("plain"))
	bulk := enqueueN(t, e.st, now, 200, "bulk")
	before, beforeCounts := snapshot(t, e.st)
	if len(before) != 202 {
		t.Fatalf("JobList found %d jobs before reopen, want 202", len(before))
	}

	e.reopen(t)
	wantSameAfterReopen(t, e.st, before, beforeCounts)

	dup := enqueue(t, e.st, now, &store.NewJob{Kind: "email.send", Queue: "mail", Args: []byte(`{}`), Priority: 2, MaxAttempts: 1, UniqueKey: "k1"})
	if want := (store.EnqueueResult{ID: res[0].ID, Duplicate: true, State: store.JobStateScheduled}); dup[0] != want {
		t.Errorf("enqueue of unique key %q after reopen = %+v, want %+v", "k1", dup[0], want)
	}
	if id := enqueueOne(t, e.st, now, newJob("plain")); id <= bulk[len(bulk)-1] {
		t.Errorf("enqueue after reopen: ID = %d, want > %d (the highest ID before reopen)", id, bulk[len(bulk)-1])
	}
}

// Every transition is committed when its method returns: completed, failed,
// cancelled, dead and running jobs keep their state, errors and lease across
// a reopen, and a claim made before it can still finish after it.
func testDurableTransitions(t *testing.T, e *env) {
	now := at(time.Hour)
	jobs := make([]*store.NewJob, 5)
	for i := range jobs {
		jobs[i] = newJob("durable")
	}
	jobs[4].MaxAttempts = 1
	res := enqueue(t, e.st, now, jobs...)
	var rows [5]*store.JobRow
	for i, r := range res {
		rows[i] = fetchID(t, e.st, now, r.ID)
	}
	later := now.Add(time.Second)
	complete(t, e.st, later, rows[0])
	finishOne(t, e.st, later, &store.Report{ID: rows[1].ID, ClaimToken: rows[1].ClaimToken, Kind: store.ReportFailed, Error: failure(rows[1], later, "boom"), RunAt: later.Add(time.Minute)}, store.JobStateRetrying)
	// rows[2] stays running.
	finishOne(t, e.st, later, &store.Report{ID: rows[3].ID, ClaimToken: rows[3].ClaimToken, Kind: store.ReportCancelled, Error: failure(rows[3], later, "no")}, store.JobStateCancelled)
	finishOne(t, e.st, later, &store.Report{ID: rows[4].ID, ClaimToken: rows[4].ClaimToken, Kind: store.ReportFailed, Error: failure(rows[4], later, "last"), RunAt: later}, store.JobStateDead)
	before, beforeCounts := snapshot(t, e.st)

	e.reopen(t)
	wantSameAfterReopen(t, e.st, before, beforeCounts)

	// The running job's claim still holds, and its token still fences.
	if held := extend(t, e.st, later, lease, ref(rows[2])); !held[0] {
		t.Errorf("LeaseExtend of job %d with its claim token after reopen = false, want true", rows[2].ID)
	}
	complete(t, e.st, later, rows[2])
	// The retrying job comes back when due, with a new token.
	again := fetchID(t, e.st, later.Add(time.Minute), rows[1].ID)
	if again.Attempt != 2 || again.ClaimToken == rows[1].ClaimToken {
		t.Errorf("refetch of job %d after reopen: Attempt %d, ClaimToken %d; want Attempt 2 and a token other than %d", again.ID, again.Attempt, again.ClaimToken, rows[1].ClaimToken)
	}

	e.reopen(t)
	wantState(t, e.st, rows[2].ID, store.JobStateCompleted)
	wantState(t, e.st, again.ID, store.JobStateRunning)
}
