package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

// retriable are the endings a job can be retried from (every one but a
// deletion).
func retriable() []int {
	var out []int
	for i, end := range endings {
		if end.name != "deleted" {
			out = append(out, i)
		}
	}
	return out
}

// dies claims job id of queue at now and fails its last attempt: it must
// end dead.
func dies(t *testing.T, st store.Store, queue string, id int64, now time.Time) {
	t.Helper()
	endings[0].end(t, st, queue, id, now)
}

// wantWaitingAgain fails the test unless job id, once cancelled as
// before, is waiting again: FinalizedAt cleared, everything else kept
// (its errors included).
func wantWaitingAgain(t *testing.T, st store.Store, before *store.JobRow) {
	t.Helper()
	want := *before
	want.State, want.FinalizedAt, want.CancelledBy = store.JobStateWaiting, time.Time{}, 0
	if diff := diffRow(&want, get(t, st, before.ID)); diff != "" {
		t.Errorf("job %d cancelled because of its dependency, after the dependency's retry (-want +got):\n%s", before.ID, diff)
	}
}

// wantNothingDue fails the test if a fetch of queue, a day after now,
// claims anything.
func wantNothingDue(t *testing.T, st store.Store, queue string, now time.Time) {
	t.Helper()
	if got := fetchIDs(t, st, &store.JobFetchParams{Queue: queue, Limit: 10, Now: now.Add(24 * time.Hour)}); len(got) != 0 {
		t.Fatalf("JobFetch(queue %q) = %v, want nothing: its jobs wait for their dependencies", queue, got)
	}
}

// JobRetry of a waiting job returns it unchanged: it keeps waiting, and
// its dependency releases it as before.
func testDepsRetryWaiting(t *testing.T, e *env) {
	now := at(time.Hour)
	p := enqueueOne(t, e.st, now, newJobIn("parent", "parents"))
	id := enqueueState(t, e.st, now, dependent(defaultQueue, p), store.JobStateWaiting)
	before := get(t, e.st, id)
	later := now.Add(time.Minute)
	if got := retryJob(t, e.st, id, later); diffRow(before, got) != "" {
		t.Errorf("JobRetry of waiting job %d returned a changed job (-before +returned):\n%s", id, diffRow(before, got))
	}
	wantRow(t, e.st, "after JobRetry of a waiting job", before)
	wantNothingDue(t, e.st, defaultQueue, later)
	complete(t, e.st, later, claimID(t, e.st, "parents", p, later))
	wantState(t, e.st, id, store.JobStateAvailable)
}

// A job retried while a dependency is pending waits for it (RunAt = Now,
// one more attempt when it used them all) and becomes available when the
// dependency completes. A dependency that completed, or no longer exists,
// does not hold a retried job back.
func testDepsRetryPendingDependency(t *testing.T, e *env) {
	now := at(time.Hour)
	p := enqueueOne(t, e.st, now, newJobIn("parent", "parents"))
	child := dependent("kids", p)
	child.MaxAttempts = 1
	c := enqueueState(t, e.st, now, child, store.JobStateWaiting)
	complete(t, e.st, now, claimID(t, e.st, "parents", p, now))
	dies(t, e.st, "kids", c, now)
	before := get(t, e.st, c)

	later := now.Add(time.Hour)
	retryJob(t, e.st, p, later) // completed: runs again
	got := retryJob(t, e.st, c, later)
	want := *before
	want.State, want.RunAt, want.FinalizedAt, want.MaxAttempts = store.JobStateWaiting, later, time.Time{}, before.Attempt+1
	if diff := diffRow(&want, got); diff != "" {
		t.Errorf("JobRetry of dead job %d whose dependency runs again returned (-want +got):\n%s", c, diff)
	}
	wantRow(t, e.st, "after JobRetry", &want)
	wantNothingDue(t, e.st, "kids", later)
	checkNow(t, e.st, "a retry that waits")
	complete(t, e.st, later, claimID(t, e.st, "parents", p, later))
	complete(t, e.st, later, claimID(t, e.st, "kids", c, later))

	if _, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: p, Now: later}); err != nil {
		t.Fatalf("JobDelete(%d) error: %v", p, err)
	}
	if got := retryJob(t, e.st, c, later); got.State != store.JobStateAvailable {
		t.Errorf("JobRetry of job %d whose dependency was deleted: State %q, want available", c, got.State)
	}

}

// A scheduled job whose dependency runs again, and a job cancelled while
// waiting for two pending jobs, wait again when retried, for each of those
// dependencies once.
func testDepsRetryWaitsAgain(t *testing.T, e *env) {
	later := at(time.Hour)
	sp := enqueueOne(t, e.st, later, newJobIn("parent", "sched-parent"))
	sched := dependent("sched", sp)
	sched.RunAt = later.Add(24 * time.Hour)
	sc := enqueueState(t, e.st, later, sched, store.JobStateWaiting)
	complete(t, e.st, later, claimID(t, e.st, "sched-parent", sp, later))
	wantState(t, e.st, sc, store.JobStateScheduled)
	retryJob(t, e.st, sp, later)
	if got := retryJob(t, e.st, sc, later); got.State != store.JobStateWaiting || !got.RunAt.Equal(later) {
		t.Errorf("JobRetry of scheduled job %d whose dependency runs again: State %q, RunAt %v; want waiting, %v", sc, got.State, got.RunAt, later)
	}
	complete(t, e.st, later, claimID(t, e.st, "sched-parent", sp, later))
	claimID(t, e.st, "sched", sc, later)

	// Cancelled while waiting for two jobs, then retried: it waits for
	// both again, each once.
	x := enqueueOne(t, e.st, later, newJobIn("x", "x"))
	z := enqueueOne(t, e.st, later, newJobIn("z", "z"))
	w := enqueueState(t, e.st, later, dependent("w", x, z), store.JobStateWaiting)
	cancelJob(t, e.st, w, later)
	if got := retryJob(t, e.st, w, later); got.State != store.JobStateWaiting {
		t.Fatalf("JobRetry of cancelled job %d whose dependencies are pending: State %q, want waiting", w, got.State)
	}
	complete(t, e.st, later, claimID(t, e.st, "x", x, later))
	wantState(t, e.st, w, store.JobStateWaiting)
	complete(t, e.st, later, claimID(t, e.st, "z", z, later))
	wantState(t, e.st, w, store.JobStateAvailable)
}

// A job retried while a dependency is dead or cancelled waits: it is
// cancelled again (naming it) when that dependency, retried, ends dead or
// cancelled again, and runs once it is retried and completes. With
// IgnoreDepFailure such a dependency does not hold it back.
func testDepsRetryFailedDependency(t *testing.T, e *env) {
	for _, i := range retriable() {
		end := endings[i]
		q := fmt.Sprintf("parent-%d", i)
		kids := q + "-kids"
		now := at(time.Hour)
		p := newJobIn("parent", q)
		p.MaxAttempts = 1
		pid := enqueueOne(t, e.st, now, p)
		c := enqueueState(t, e.st, now, dependent(kids, pid), store.JobStateWaiting)
		lenient := dependent(kids, pid)
		lenient.IgnoreDepFailure = true
		l := enqueueState(t, e.st, now, lenient, store.JobStateWaiting)
		end.end(t, e.st, q, pid, now)
		wantCancelledBy(t, e.st, c, pid)
		complete(t, e.st, now, claimID(t, e.st, kids, l, now))

		t1 := now.Add(time.Hour)
		if got := retryJob(t, e.st, c, t1); got.State != store.JobStateWaiting {
			t.Fatalf("%s: JobRetry of job %d while its dependency is %s: State %q, want waiting", end.name, c, get(t, e.st, pid).State, got.State)
		}
		if got := retryJob(t, e.st, l, t1); got.State != store.JobStateAvailable {
			t.Errorf("%s: JobRetry of job %d with IgnoreDepFailure: State %q, want available", end.name, l, got.State)
		}
		complete(t, e.st, t1, claimID(t, e.st, kids, l, t1))
		wantNothingDue(t, e.st, kids, t1)
		checkNow(t, e.st, end.name+", then its dependent retried")

		t2 := t1.Add(2 * time.Hour)
		retryJob(t, e.st, pid, t2)
		wantState(t, e.st, c, store.JobStateWaiting)
		end.end(t, e.st, q, pid, t2.Add(2*time.Hour))
		wantCancelledBy(t, e.st, c, pid)

		t3 := t2.Add(4 * time.Hour)
		retryJob(t, e.st, pid, t3)
		wantState(t, e.st, c, store.JobStateWaiting)
		complete(t, e.st, t3, claimID(t, e.st, q, pid, t3))
		wantState(t, e.st, c, store.JobStateAvailable)
		checkNow(t, e.st, end.name+", then retried until it completed")
	}
}

// Retrying a job that ended dead or cancelled revives the jobs its ending
// cancelled (at the time or later, at their enqueue), down the graph: they
// wait again, FinalizedAt cleared and errors kept, for it and for their
// other dependencies that have not completed, and run as those complete.
func testDepsRetryRevives(t *testing.T, e *env) {
	for _, i := range retriable() {
		end := endings[i]
		q := fmt.Sprintf("parent-%d", i)
		now := at(time.Hour)
		p := newJobIn("parent", q)
		p.MaxAttempts = 1
		pid := enqueueOne(t, e.st, now, p)
		other := enqueueOne(t, e.st, now, newJobIn("other", q+"-other"))
		c := enqueueState(t, e.st, now, dependent(q+"-kids", pid), store.JobStateWaiting)
		both := enqueueState(t, e.st, now, dependent(q+"-kids", pid, other), store.JobStateWaiting)
		g := enqueueState(t, e.st, now, dependent(q+"-g", c), store.JobStateWaiting)
		gg := enqueueState(t, e.st, now, dependent(q+"-gg", g), store.JobStateWaiting)

		later := now.Add(time.Hour)
		end.end(t, e.st, q, pid, later)
		late := enqueueState(t, e.st, later, dependent(q+"-late", pid), store.JobStateCancelled)
		var before []*store.JobRow
		for _, id := range []int64{c, both, g, gg, late} {
			before = append(before, wantState(t, e.st, id, store.JobStateCancelled))
		}

		t1 := later.Add(time.Hour)
		if got := retryJob(t, e.st, pid, t1); got.State != store.JobStateAvailable {
			t.Fatalf("%s: JobRetry of job %d: State %q, want available", end.name, pid, got.State)
		}
		for _, b := range before {
			wantWaitingAgain(t, e.st, b)
		}
		for _, s := range []string{"-kids", "-g", "-gg", "-late"} {
			wantNothingDue(t, e.st, q+s, t1)
		}
		checkNow(t, e.st, end.name+", then retried")

		complete(t, e.st, t1, claimID(t, e.st, q+"-other", other, t1))
		wantState(t, e.st, both, store.JobStateWaiting)
		complete(t, e.st, t1, claimID(t, e.st, q, pid, t1))
		for _, id := range []int64{c, both, late} {
			wantState(t, e.st, id, store.JobStateAvailable)
		}
		wantState(t, e.st, g, store.JobStateWaiting)
		complete(t, e.st, t1, claimID(t, e.st, q+"-kids", c, t1))
		complete(t, e.st, t1, claimID(t, e.st, q+"-g", g, t1))
		claimID(t, e.st, q+"-gg", gg, t1)
		checkNow(t, e.st, end.name+", then retried and completed")
	}
}

// A retry revives only the jobs cancelled because of its job: not one
// cancelled by JobCancel, by its own outcome or by a full queue, nor one
// retried since; and not one whose unique key another pending job holds,
// or whose other dependency no longer exists. A later retry of the
// dependency tries those again.
func testDepsRetryRevivesOnlyItsOwn(t *testing.T, e *env) {
	now := at(time.Hour)
	p := newJobIn("parent", "parents")
	p.MaxAttempts = 1
	pid := enqueueOne(t, e.st, now, p)
	byOperator := enqueueState(t, e.st, now, dependent("operator", pid), store.JobStateWaiting)
	cancelJob(t, e.st, byOperator, now)
	configure(t, e.st, "full", store.QueueSettings{MaxDepth: 1, Overflow: store.OverflowDropOldest}, now)
	dropped := enqueueState(t, e.st, now, dependent("full", pid), store.JobStateWaiting)
	enqueueOne(t, e.st, now, newJobIn("filler", "full"))
	wantState(t, e.st, dropped, store.JobStateCancelled)
	since := enqueueState(t, e.st, now, dependent("since", pid), store.JobStateWaiting)
	k := dependent("keyed", pid)
	k.UniqueKey = "revive-key"
	keyedID := enqueueState(t, e.st, now, k, store.JobStateWaiting)
	gone := enqueueOne(t, e.st, now, newJobIn("gone", "gone"))
	otherGone := enqueueState(t, e.st, now, dependent("other-gone", pid, gone), store.JobStateWaiting)

	p2 := enqueueOne(t, e.st, now, newJobIn("parent", "parents2"))
	own := enqueueState(t, e.st, now, dependent("own", p2), store.JobStateWaiting)
	complete(t, e.st, now, claimID(t, e.st, "parents2", p2, now))
	row := claimID(t, e.st, "own", own, now)
	finishOne(t, e.st, now, &store.Report{ID: own, ClaimToken: row.ClaimToken, Kind: store.ReportCancelled,
		Error: failure(row, now, fmt.Sprintf("dependency job %d ended dead", p2))}, store.JobStateCancelled)

	later := now.Add(time.Hour)
	dies(t, e.st, "parents", pid, later)
	for _, id := range []int64{since, keyedID, otherGone} {
		wantCancelledBy(t, e.st, id, pid)
	}
	retryJob(t, e.st, since, later)
	cancelJob(t, e.st, since, later)
	holder := enqueueOne(t, e.st, later, keyed("revive-key"))
	if _, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: gone, Now: later}); err != nil {
		t.Fatalf("JobDelete(%d) error: %v", gone, err)
	}
	left := []int64{byOperator, dropped, since, keyedID, otherGone, own}
	var before []*store.JobRow
	for _, id := range left {
		before = append(before, get(t, e.st, id))
	}

	t1 := later.Add(time.Hour)
	retryJob(t, e.st, pid, t1)
	retryJob(t, e.st, p2, t1)
	for _, b := range before {
		wantRow(t, e.st, fmt.Sprintf("job %d, not cancelled by the retried job's ending, after its retry", b.ID), b)
	}
	checkNow(t, e.st, "the dependencies retried")

	cancelJob(t, e.st, holder, t1)
	dies(t, e.st, "parents", pid, t1)
	retryJob(t, e.st, pid, t1.Add(time.Hour))
	wantState(t, e.st, keyedID, store.JobStateWaiting)
	wantDuplicate(t, e.st, t1, keyed("revive-key"), keyedID, store.JobStateWaiting)
	wantState(t, e.st, otherGone, store.JobStateCancelled)
}

// The operator's view of a chain A → B → C whose A died: retrying B (as
// retrying every cancelled job does) while A is dead runs nothing out of
// order; retrying A then runs A, B and C in order.
func testDepsRetryChainInOrder(t *testing.T, e *env) {
	now := at(time.Hour)
	const q = "chain"
	jobs := []*store.NewJob{newJobIn("a", q), newJobIn("b", q), newJobIn("c", q)}
	jobs[0].MaxAttempts = 1
	jobs[1].DependsOnIndex = []int{0}
	jobs[2].DependsOnIndex = []int{1}
	res, err := e.st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Jobs: jobs, Now: now, Workflow: true})
	if err != nil {
		t.Fatalf("JobEnqueueMany(chain) error: %v", err)
	}
	a, b, c := res[0].ID, res[1].ID, res[2].ID
	dies(t, e.st, q, a, now)
	wantCancelledBy(t, e.st, b, a)
	wantCancelledBy(t, e.st, c, b)

	later := now.Add(time.Hour)
	for _, id := range []int64{b, c} {
		if got := retryJob(t, e.st, id, later); got.State != store.JobStateWaiting {
			t.Errorf("JobRetry of chain step %d while step %d is dead: State %q, want waiting", id, a, got.State)
		}
	}
	wantNothingDue(t, e.st, q, later)
	checkNow(t, e.st, "the chain's later steps retried")
	retryJob(t, e.st, a, later)
	for _, id := range []int64{a, b, c} {
		got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: q, Limit: 10, Now: later})
		if diff := cmp.Diff([]int64{id}, got); diff != "" {
			t.Fatalf("JobFetch(queue %q, limit 10) = %v, want only step %d", q, got, id)
		}
		complete(t, e.st, later, get(t, e.st, id))
	}
}

// Which dependency cancelled a job survives a restart: retrying it after
// a reopen revives its dependents.
func testDepsRetryAfterReopen(t *testing.T, e *env) {
	now := at(time.Hour)
	p := newJobIn("parent", "parents")
	p.MaxAttempts = 1
	pid := enqueueOne(t, e.st, now, p)
	c := enqueueState(t, e.st, now, dependent("kids", pid), store.JobStateWaiting)
	dies(t, e.st, "parents", pid, now)
	wantCancelledBy(t, e.st, c, pid)
	e.reopen(t)
	retryJob(t, e.st, pid, now)
	wantState(t, e.st, c, store.JobStateWaiting)
	complete(t, e.st, now, claimID(t, e.st, "parents", pid, now))
	claimID(t, e.st, "kids", c, now)
}

// JobPrune of a dead dependency that a retried job waits for cancels that
// job, naming the dependency, at p.Now.
func testDepsPruneCancelsWaiting(t *testing.T, e *env) {
	now := at(time.Hour)
	p := newJobIn("parent", "parents")
	p.MaxAttempts = 1
	pid := enqueueOne(t, e.st, now, p)
	c := enqueueState(t, e.st, now, dependent("kids", pid), store.JobStateWaiting)
	dies(t, e.st, "parents", pid, now)
	later := now.Add(time.Hour)
	retryJob(t, e.st, c, later)
	pruneAt := later.Add(time.Hour)
	prune(t, e.st, store.JobPruneParams{DeadBefore: later, Now: pruneAt, Limit: 10}, 1)
	wantCancelledBy(t, e.st, c, pid)
	if got := get(t, e.st, c); !got.FinalizedAt.Equal(pruneAt) {
		t.Errorf("job %d cancelled by the prune of its dependency: FinalizedAt %v, want %v", c, got.FinalizedAt, pruneAt)
	}
}

// Retrying every job of many dead chains at once, as retrying every dead
// and cancelled job does, leaves each chain in order: its first step
// available, the others waiting for the step before.
func testDepsRetryConcurrently(t *testing.T, e *env) {
	now := at(time.Hour)
	const chains, q = 8, "chains"
	var all [][3]int64
	for range chains {
		jobs := []*store.NewJob{newJobIn("a", q), newJobIn("b", q), newJobIn("c", q)}
		jobs[0].MaxAttempts = 1
		jobs[1].DependsOnIndex = []int{0}
		jobs[2].DependsOnIndex = []int{1}
		res := enqueue(t, e.st, now, jobs...)
		all = append(all, [3]int64{res[0].ID, res[1].ID, res[2].ID})
	}
	for _, row := range fetch(t, e.st, &store.JobFetchParams{Queue: q, Limit: 100, Now: now}) {
		finishOne(t, e.st, now, &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportFailed,
			Error: failure(row, now, "boom"), RunAt: now}, store.JobStateDead)
	}
	later := now.Add(time.Hour)
	var wg sync.WaitGroup
	for _, c := range all {
		for _, id := range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := e.st.JobRetry(t.Context(), &store.JobRetryParams{ID: id, Now: later}); err != nil {
					t.Errorf("JobRetry(%d) error: %v", id, err)
				}
			}()
		}
	}
	wg.Wait()
	for _, c := range all {
		wantState(t, e.st, c[0], store.JobStateAvailable)
		wantState(t, e.st, c[1], store.JobStateWaiting)
		wantState(t, e.st, c[2], store.JobStateWaiting)
	}
	checkNow(t, e.st, "every job of the chains retried at once")
	for step := range 3 {
		rows := fetch(t, e.st, &store.JobFetchParams{Queue: q, Limit: 100, Now: later})
		if len(rows) != chains {
			t.Fatalf("JobFetch for step %d of the chains = %d jobs, want %d", step+1, len(rows), chains)
		}
		for _, row := range rows {
			if row.Kind != []string{"a", "b", "c"}[step] {
				t.Errorf("JobFetch for step %d of the chains claimed job %d of kind %q", step+1, row.ID, row.Kind)
			}
			complete(t, e.st, later, row)
		}
	}
}
