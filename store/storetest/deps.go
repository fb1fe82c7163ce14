package storetest

import (
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

var depsCases = []testCase{
	{name: "WaitingUntilAllCompleted", run: testDepsWaiting},
	{name: "DependsOnIndex", run: testDepsIndex},
	{name: "Workflow", run: testDepsWorkflow},
	{name: "FailureCancelsDependents", run: testDepsFailure},
	{name: "IgnoreDepFailure", run: testDepsIgnoreFailure},
	{name: "BadDependencyFailsBatch", run: testDepsBadBatch},
	{name: "DependencyAlreadyFinished", run: testDepsAlreadyFinished},
	{name: "SomeAlreadyFinished", run: testDepsSomeAlreadyFinished},
	{name: "WaitingIsPendingAndQueued", run: testDepsWaitingCounts},
	{name: "SignalWhenAvailable", run: testDepsSignal},
	{name: "RetryWaitingUnchanged", run: testDepsRetryWaiting},
	{name: "RetryWaitsForPendingDependency", run: testDepsRetryPendingDependency},
	{name: "RetryWaitsAgain", run: testDepsRetryWaitsAgain},
	{name: "RetryWaitsForFailedDependency", run: testDepsRetryFailedDependency},
	{name: "RetryRevivesDependents", run: testDepsRetryRevives},
	{name: "RetryRevivesOnlyItsOwn", run: testDepsRetryRevivesOnlyItsOwn},
	{name: "RetryChainInOrder", run: testDepsRetryChainInOrder},
	{name: "RetryConcurrently", run: testDepsRetryConcurrently},
	{name: "RetryRevivesAfterReopen", durable: true, run: testDepsRetryAfterReopen},
	{name: "PruneCancelsWaiting", run: testDepsPruneCancelsWaiting},
}

// dependent returns a job of queue that depends on ids.
func dependent(queue string, ids ...int64) *store.NewJob {
	j := newJobIn("child", queue)
	j.DependsOn = ids
	return j
}

// enqueueState enqueues j at now and fails the test unless it is a new
// job in state want.
func enqueueState(t *testing.T, st store.Store, now time.Time, j *store.NewJob, want store.JobState) int64 {
	t.Helper()
	res := enqueue(t, st, now, j)[0]
	if res.Duplicate || res.State != want {
		t.Fatalf("enqueue of a job depending on %v = %+v, want a new %s job", j.DependsOn, res, want)
	}
	wantState(t, st, res.ID, want)
	return res.ID
}

// claimID claims job id from queue at now.
func claimID(t *testing.T, st store.Store, queue string, id int64, now time.Time) *store.JobRow {
	t.Helper()
	rows := fetch(t, st, &store.JobFetchParams{Queue: queue, Limit: 1, Now: now})
	if len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("JobFetch(queue %q, limit 1) = %v, want [%d]", queue, ids(rows), id)
	}
	return rows[0]
}

// wantCancelledBy fails the test unless job id was cancelled because of
// its dependency dep: cancelled, with a last error naming dep.
func wantCancelledBy(t *testing.T, st store.Store, id, dep int64) {
	t.Helper()
	got := wantState(t, st, id, store.JobStateCancelled)
	name := regexp.MustCompile(fmt.Sprintf(`\b%d\b`, dep))
	if n := len(got.Errors); n == 0 || !name.MatchString(got.Errors[n-1].Message) {
		t.Errorf("job %d cancelled by its dependency %d: Errors %+v, want a last error naming job %d", id, dep, got.Errors, dep)
	}
	// A deleted dependency cannot be retried: nothing records it.
	want := dep
	if _, err := st.JobGet(t.Context(), &store.JobGetParams{ID: dep}); errors.Is(err, store.ErrNotFound) {
		want = 0
	}
	if got.CancelledBy != want {
		t.Errorf("job %d cancelled by its dependency %d: CancelledBy %d, want %d", id, dep, got.CancelledBy, want)
	}
}

// A job whose dependencies have not all finished is waiting and never
// claimed; when the last one completes it is available (scheduled if its
// RunAt is later). DependsOn round-trips.
func testDepsWaiting(t *testing.T, e *env) {
	now := at(time.Hour)
	deps := enqueueN(t, e.st, now, 2, "parent")
	c := enqueueState(t, e.st, now, dependent("kids", deps...), store.JobStateWaiting)
	late := dependent("kids", deps[0])
	late.RunAt = now.Add(time.Hour)
	d := enqueueState(t, e.st, now, late, store.JobStateWaiting)
	if got := get(t, e.st, c); cmp.Diff(deps, got.DependsOn) != "" || !got.LeaseUntil.IsZero() {
		t.Errorf("waiting job %d: DependsOn %v, LeaseUntil %v; want %v, zero", c, got.DependsOn, got.LeaseUntil, deps)
	}
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: "kids", Limit: 10, Now: now.Add(24 * time.Hour)}); len(got) != 0 {
		t.Fatalf("JobFetch of waiting jobs = %v, want none", got)
	}
	p0 := fetchID(t, e.st, now, deps[0])
	p1 := fetchID(t, e.st, now, deps[1])
	later := now.Add(time.Minute)
	complete(t, e.st, later, p0)
	wantState(t, e.st, c, store.JobStateWaiting)
	wantState(t, e.st, d, store.JobStateScheduled)
	finishOne(t, e.st, later, outcomeFor(p1, store.ReportFailed, later), store.JobStateRetrying)
	wantState(t, e.st, c, store.JobStateWaiting)
	p1 = fetchID(t, e.st, later.Add(time.Hour), deps[1])
	complete(t, e.st, later.Add(time.Hour), p1)
	got := wantState(t, e.st, c, store.JobStateAvailable)
	if !got.FinalizedAt.IsZero() || got.Attempt != 0 {
		t.Errorf("released job %d: FinalizedAt %v, Attempt %d; want zero, 0", c, got.FinalizedAt, got.Attempt)
	}
	claimID(t, e.st, "kids", c, later.Add(time.Hour))
	claimID(t, e.st, "kids", d, late.RunAt)
	// A dependency already completed does not make a new job wait.
	enqueueState(t, e.st, later, dependent("kids", deps...), store.JobStateAvailable)
}

// DependsOnIndex names earlier jobs of the same batch; their IDs end up in
// DependsOn.
func testDepsIndex(t *testing.T, e *env) {
	now := at(time.Hour)
	x := newJob("x")
	y := newJob("y")
	y.DependsOnIndex = []int{0}
	ext := enqueueOne(t, e.st, now, newJobIn("ext", "ext"))
	z := newJob("z")
	z.DependsOn = []int64{ext}
	z.DependsOnIndex = []int{0, 1}
	res := enqueue(t, e.st, now, x, y, z)
	want := []store.JobState{store.JobStateAvailable, store.JobStateWaiting, store.JobStateWaiting}
	for i, r := range res {
		if r.Duplicate || r.State != want[i] {
			t.Fatalf("batch job %d: %+v, want a new %s job", i, r, want[i])
		}
	}
	if got := get(t, e.st, res[1].ID).DependsOn; cmp.Diff([]int64{res[0].ID}, got) != "" {
		t.Errorf("job %d (DependsOnIndex [0]): DependsOn = %v, want [%d]", res[1].ID, got, res[0].ID)
	}
	if got := get(t, e.st, res[2].ID).DependsOn; sameIDs([]int64{ext, res[0].ID, res[1].ID}, got) != "" {
		t.Errorf("job %d: DependsOn = %v, want %v in any order", res[2].ID, got, []int64{ext, res[0].ID, res[1].ID})
	}
	complete(t, e.st, now, fetchID(t, e.st, now, res[0].ID))
	wantState(t, e.st, res[1].ID, store.JobStateAvailable)
	wantState(t, e.st, res[2].ID, store.JobStateWaiting)
	complete(t, e.st, now, fetchID(t, e.st, now, res[1].ID))
	wantState(t, e.st, res[2].ID, store.JobStateWaiting)
	complete(t, e.st, now, claimID(t, e.st, "ext", ext, now))
	wantState(t, e.st, res[2].ID, store.JobStateAvailable)
}

// With Workflow, every job of the batch gets WorkflowID = the batch's
// first ID, and JobList's WorkflowID filter lists exactly them.
func testDepsWorkflow(t *testing.T, e *env) {
	now := at(time.Hour)
	enqueueN(t, e.st, now, 2, "loose")
	flow := func(n int) []int64 {
		jobs := make([]*store.NewJob, n)
		for i := range jobs {
			jobs[i] = newJobIn("step", fmt.Sprintf("q%d", i%2))
			if i > 0 {
				jobs[i].DependsOnIndex = []int{i - 1}
			}
		}
		res, err := e.st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Jobs: jobs, Now: now, Workflow: true})
		if err != nil {
			t.Fatalf("JobEnqueueMany(workflow of %d jobs) error: %v", n, err)
		}
		out := make([]int64, len(res))
		for i, r := range res {
			out[i] = r.ID
		}
		return out
	}
	a := flow(3)
	b := flow(2)
	enqueueN(t, e.st, now, 2, "loose")
	for _, w := range [][]int64{a, b} {
		for _, id := range w {
			if got := get(t, e.st, id).WorkflowID; got != w[0] {
				t.Errorf("job %d of workflow %v: WorkflowID = %d, want %d", id, w, got, w[0])
			}
		}
		if got := listIDs(t, e.st, store.JobListParams{WorkflowID: w[0], Limit: 2}); cmp.Diff(w, got) != "" {
			t.Errorf("JobList(WorkflowID %d) = %v, want %v", w[0], got, w)
		}
	}
	for _, row := range listAll(t, e.st, store.JobListParams{Kind: "loose"}) {
		if row.WorkflowID != 0 {
			t.Errorf("job %d enqueued without Workflow: WorkflowID = %d, want 0", row.ID, row.WorkflowID)
		}
	}
	if got := listIDs(t, e.st, store.JobListParams{WorkflowID: a[0], Queue: "q1"}); cmp.Diff([]int64{a[1]}, got) != "" {
		t.Errorf("JobList(WorkflowID %d, queue q1) = %v, want [%d]", a[0], got, a[1])
	}
}

// endings are the ways a dependency can end without completing.
var endings = []struct {
	name string
	// end makes job id of queue end dead or cancelled at now.
	end func(t *testing.T, st store.Store, queue string, id int64, now time.Time)
}{
	{"dead by outcome", func(t *testing.T, st store.Store, queue string, id int64, now time.Time) {
		row := claimID(t, st, queue, id, now)
		finishOne(t, st, now, &store.Report{ID: id, ClaimToken: row.ClaimToken, Kind: store.ReportFailed, Error: failure(row, now, "boom"), RunAt: now}, store.JobStateDead)
	}},
	{"cancelled by outcome", func(t *testing.T, st store.Store, queue string, id int64, now time.Time) {
		row := claimID(t, st, queue, id, now)
		finishOne(t, st, now, outcomeFor(row, store.ReportCancelled, now), store.JobStateCancelled)
	}},
	{"dead by rescue", func(t *testing.T, st store.Store, queue string, id int64, now time.Time) {
		claimID(t, st, queue, id, now.Add(-time.Hour))
		wantRescued(t, st, now, 10, 1)
		wantState(t, st, id, store.JobStateDead)
	}},
	{"cancelled by JobCancel", func(t *testing.T, st store.Store, _ string, id int64, now time.Time) {
		cancelJob(t, st, id, now)
	}},
	{"deleted", func(t *testing.T, st store.Store, _ string, id int64, now time.Time) {
		if _, err := st.JobDelete(t.Context(), &store.JobDeleteParams{ID: id, Now: now}); err != nil {
			t.Fatalf("JobDelete(%d) error: %v", id, err)
		}
	}},
}

// A dependency that ends dead or cancelled (or is deleted) cancels its
// waiting dependents, with an error naming it, and theirs in turn, down
// the graph; jobs that do not depend on it are untouched.
func testDepsFailure(t *testing.T, e *env) {
	now := at(time.Hour)
	for i, end := range endings {
		q := fmt.Sprintf("parent-%d", i)
		p := newJobIn("parent", q)
		p.MaxAttempts = 1
		pid := enqueueOne(t, e.st, now, p)
		other := enqueueOne(t, e.st, now, newJobIn("other", q+"-other"))
		c := enqueueState(t, e.st, now, dependent(q+"-kids", pid), store.JobStateWaiting)
		both := enqueueState(t, e.st, now, dependent(q+"-kids", other, pid), store.JobStateWaiting)
		g := enqueueState(t, e.st, now, dependent(q+"-kids", c), store.JobStateWaiting)
		gg := enqueueState(t, e.st, now, dependent(q+"-kids", g), store.JobStateWaiting)
		unrelated := enqueueState(t, e.st, now, dependent(q+"-kids", other), store.JobStateWaiting)

		later := now.Add(time.Minute)
		end.end(t, e.st, q, pid, later)
		wantCancelledBy(t, e.st, c, pid)
		wantCancelledBy(t, e.st, both, pid)
		wantCancelledBy(t, e.st, g, c)
		wantCancelledBy(t, e.st, gg, g)
		if end.name != "deleted" {
			for _, id := range []int64{c, g, gg} {
				if got := get(t, e.st, id); !got.FinalizedAt.Equal(later) {
					t.Errorf("%s: dependent %d FinalizedAt = %v, want %v", end.name, id, got.FinalizedAt, later)
				}
			}
		}
		wantState(t, e.st, unrelated, store.JobStateWaiting)
		checkNow(t, e.st, end.name)
	}
}

// A dependent with IgnoreDepFailure counts a dependency that ended dead or
// cancelled (or was deleted) as finished: it starts once the others
// finished; its own dependents wait for it as usual.
func testDepsIgnoreFailure(t *testing.T, e *env) {
	now := at(time.Hour)
	for i, end := range endings {
		q := fmt.Sprintf("parent-%d", i)
		p := newJobIn("parent", q)
		p.MaxAttempts = 1
		pid := enqueueOne(t, e.st, now, p)
		other := enqueueOne(t, e.st, now, newJobIn("other", q+"-other"))
		lenient := dependent(q+"-kids", pid)
		lenient.IgnoreDepFailure = true
		c := enqueueState(t, e.st, now, lenient, store.JobStateWaiting)
		lenientBoth := dependent(q+"-kids", pid, other)
		lenientBoth.IgnoreDepFailure = true
		both := enqueueState(t, e.st, now, lenientBoth, store.JobStateWaiting)
		g := enqueueState(t, e.st, now, dependent(q+"-kids", c), store.JobStateWaiting)

		later := now.Add(time.Minute)
		end.end(t, e.st, q, pid, later)
		wantState(t, e.st, c, store.JobStateAvailable)
		wantState(t, e.st, both, store.JobStateWaiting)
		wantState(t, e.st, g, store.JobStateWaiting)
		complete(t, e.st, later, claimID(t, e.st, q+"-other", other, later))
		wantState(t, e.st, both, store.JobStateAvailable)
		complete(t, e.st, later, claimID(t, e.st, q+"-kids", c, later))
		wantState(t, e.st, g, store.JobStateAvailable)
	}
}

// An unknown dependency ID, or a DependsOnIndex not below the job's own
// index, fails the whole batch: nothing is inserted.
func testDepsBadBatch(t *testing.T, e *env) {
	now := at(time.Hour)
	existing := enqueueOne(t, e.st, now, newJob("parent"))
	self := newJob("self")
	self.DependsOnIndex = []int{1}
	later := newJob("later")
	later.DependsOnIndex = []int{2}
	for _, tt := range []struct {
		name string
		jobs []*store.NewJob
	}{
		{"unknown dependency ID", []*store.NewJob{newJob("ok"), dependent(defaultQueue, existing, 1<<50)}},
		{"DependsOnIndex of itself", []*store.NewJob{newJob("ok"), self}},
		{"DependsOnIndex of a later job", []*store.NewJob{newJob("ok"), later, newJob("ok")}},
	} {
		res, err := e.st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Jobs: tt.jobs, Now: now})
		if err == nil {
			t.Errorf("JobEnqueueMany with %s = %+v, want an error", tt.name, res)
		}
		if got := listIDs(t, e.st, store.JobListParams{}); cmp.Diff([]int64{existing}, got) != "" {
			t.Errorf("after a batch with %s: jobs %v, want only [%d] (nothing inserted)", tt.name, got, existing)
		}
	}
}

// A dependency that already completed does not hold a new job back; one
// that already ended dead or cancelled cancels it at enqueue, unless it
// has IgnoreDepFailure.
func testDepsAlreadyFinished(t *testing.T, e *env) {
	now := at(time.Hour)
	done := inState(t, e.st, now, store.JobStateCompleted, "p-completed", "job", "").ID
	dead := inState(t, e.st, now, store.JobStateDead, "p-dead", "job", "").ID
	cancelled := inState(t, e.st, now, store.JobStateCancelled, "p-cancelled", "job", "").ID
	later := now.Add(time.Minute)
	enqueueState(t, e.st, later, dependent("kids", done), store.JobStateAvailable)
	sched := dependent("kids", done)
	sched.RunAt = later.Add(time.Hour)
	enqueueState(t, e.st, later, sched, store.JobStateScheduled)
	for _, dep := range []int64{dead, cancelled} {
		id := enqueueState(t, e.st, later, dependent("kids", done, dep), store.JobStateCancelled)
		if got := get(t, e.st, id); !got.FinalizedAt.Equal(later) {
			t.Errorf("job %d cancelled at enqueue: FinalizedAt = %v, want %v", id, got.FinalizedAt, later)
		}
		lenient := dependent("kids", dep)
		lenient.IgnoreDepFailure = true
		enqueueState(t, e.st, later, lenient, store.JobStateAvailable)
	}
}

// A dependency that already completed, or already failed for a job that
// ignores failures, does not hold back a new job waiting for another one:
// when that one completes, the job is available.
func testDepsSomeAlreadyFinished(t *testing.T, e *env) {
	now := at(time.Hour)
	done := inState(t, e.st, now, store.JobStateCompleted, "p-completed", "job", "").ID
	dead := inState(t, e.st, now, store.JobStateDead, "p-dead", "job", "").ID
	pending := enqueueOne(t, e.st, now, newJobIn("parent", "p-pending"))
	c := enqueueState(t, e.st, now, dependent("kids", done, pending), store.JobStateWaiting)
	lenient := dependent("kids", dead, pending)
	lenient.IgnoreDepFailure = true
	l := enqueueState(t, e.st, now, lenient, store.JobStateWaiting)
	complete(t, e.st, now, claimID(t, e.st, "p-pending", pending, now))
	wantState(t, e.st, c, store.JobStateAvailable)
	wantState(t, e.st, l, store.JobStateAvailable)
}

// A waiting job is pending: it holds its unique key and takes room in a
// queue with MaxDepth.
func testDepsWaitingCounts(t *testing.T, e *env) {
	now := at(time.Hour)
	const q = "bounded"
	configure(t, e.st, q, store.QueueSettings{MaxDepth: 2}, now)
	p := enqueueOne(t, e.st, now, newJobIn("parent", "parents"))
	w := dependent(q, p)
	w.UniqueKey = "w"
	id := enqueueState(t, e.st, now, w, store.JobStateWaiting)
	wantDuplicate(t, e.st, now, keyed("w"), id, store.JobStateWaiting)
	enqueueOne(t, e.st, now, newJobIn("job", q))
	wantQueueFull(t, e.st, now, q, newJobIn("job", q))
}

// When a dependent becomes available, its queue's watchers are signalled
// (it may live in another queue than its dependency).
func testDepsSignal(t *testing.T, e *env) {
	now := at(time.Hour)
	p := enqueueOne(t, e.st, now, newJobIn("parent", "parents"))
	enqueueState(t, e.st, now, dependent("kids", p), store.JobStateWaiting)
	w, ok := watch(t, e.st, "kids")
	if !ok {
		return
	}
	drain(t, w)
	complete(t, e.st, now, claimID(t, e.st, "parents", p, now))
	waitSignal(t, w, "the dependency of a waiting job completed")
}
