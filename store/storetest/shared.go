package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

// sharedCases run on two handles of one database (Harness.Share), the way
// several processes share a store: what one handle does, the other must
// see and respect (DESIGN.md §3: exclusive claim, fencing, shared queue
// state, uniqueness). Handle A is the case's store, handle B the second one.
var sharedCases = []testCase{
	{name: "ExclusiveClaim", shared: true, run: testSharedClaim},
	{name: "FencingAfterRescue", shared: true, run: testSharedFencing},
	{name: "PauseResume", shared: true, run: testSharedPause},
	{name: "MaxRunning", shared: true, run: testSharedMaxRunning},
	{name: "RateLimit", shared: true, run: testSharedRateLimit},
	{name: "CancelRunning", shared: true, run: testSharedCancel},
	{name: "UniqueKey", shared: true, run: testSharedUnique},
	{name: "Wait", shared: true, run: testSharedWait},
	{name: "Watch", shared: true, run: testSharedWatch},
}

// handleNames names the handles of a shared case in messages.
var handleNames = [2]string{"A", "B"}

// Fetchers on both handles, fetching at once until the queue is empty,
// claim every job exactly once; each batch is completed through the other
// handle, so a claim's token is honoured wherever its outcome arrives, and
// no job is lost.
func testSharedClaim(t *testing.T, e *env) {
	const (
		n       = 300
		workers = 8
	)
	now := at(time.Hour)
	hs := [2]store.Store{e.st, e.share(t)}
	jobs := enqueueN(t, hs[0], now, n, "shared-claim")

	claimsOf := claimUntil(t, now, n, workers, func(w int) fetcher {
		by := w % 2
		return fetcher{st: hs[by], handle: by, worker: fmt.Sprintf("%s-%d", handleNames[by], w), limit: w%4 + 1,
			who: fmt.Sprintf("worker %d on handle %s", w, handleNames[by])}
	}, func(f fetcher, rows []*store.JobRow) {
		by, other := f.handle, 1-f.handle
		outs := make([]*store.Report, len(rows))
		for i, r := range rows {
			outs[i] = &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted}
		}
		res, err := hs[other].JobFinish(t.Context(), &store.JobFinishParams{Reports: outs, Now: now})
		if err != nil {
			t.Errorf("%s: JobFinish through handle %s error: %v", f.who, handleNames[other], err)
			return
		}
		for i, r := range res {
			if !r.Applied || r.State != store.JobStateCompleted {
				t.Errorf("JobFinish through handle %s of job %d claimed through handle %s = %+v, want {Applied: true, State: completed}", handleNames[other], rows[i].ID, handleNames[by], r)
			}
		}
	})
	wantClaimedOnce(t, jobs, claimsOf, " through the two handles")
	if t.Failed() {
		return
	}
	for _, st := range hs {
		fetchNone(t, st, now)
		wantCounts(t, st, "", map[countKey]int64{{defaultQueue, store.JobStateCompleted}: n})
	}
}

// A job claimed through A whose lease expired is rescued and claimed again
// through B: A's outcomes and heartbeats with the old token are refused and
// change nothing, while B's go through and A sees them.
func testSharedFencing(t *testing.T, e *env) {
	now := at(time.Hour)
	a, b := e.st, e.share(t)
	id := enqueueOne(t, a, now, newJob("shared-fenced"))
	old := fetchID(t, a, now, id)
	later := now.Add(time.Hour)
	wantRescued(t, b, later, 10, 1)
	cur := fetchID(t, b, later, id)
	if cur.Attempt != 2 || cur.ClaimToken == old.ClaimToken {
		t.Fatalf("claim through B after the rescue: Attempt %d, ClaimToken %d; want Attempt 2 and a token other than %d", cur.Attempt, cur.ClaimToken, old.ClaimToken)
	}
	before := get(t, a, id)
	if before.State != store.JobStateRunning || before.ClaimToken != cur.ClaimToken {
		t.Fatalf("job %d through A: State %q, ClaimToken %d; want running with B's token %d", id, before.State, before.ClaimToken, cur.ClaimToken)
	}

	for _, k := range outcomeKinds {
		if res := finish(t, a, later, outcomeFor(old, k, later)); res[0].Applied {
			t.Errorf("%v through A with A's stale token of job %d: Applied = true, want false", k, id)
		}
	}
	if held := extend(t, a, later, time.Hour, ref(old)); held[0] {
		t.Errorf("LeaseExtend through A with A's stale token of job %d = true, want false", id)
	}
	if diff := diffRow(before, get(t, b, id)); diff != "" {
		t.Errorf("stale calls through A changed job %d (-before +after, read through B):\n%s", id, diff)
	}

	beat := later.Add(time.Second)
	if held := extend(t, b, beat, lease, ref(cur)); !held[0] {
		t.Errorf("LeaseExtend through B with B's token of job %d = false, want true", id)
	}
	complete(t, b, beat, cur)
	if got := wantState(t, a, id, store.JobStateCompleted); !got.FinalizedAt.Equal(beat) {
		t.Errorf("job %d through A after B completed it: FinalizedAt %v, want %v", id, got.FinalizedAt, beat)
	}
}

// A pause through one handle stops fetches through both, while the job
// already running goes on; a resume through the other handle lets both
// fetch again.
func testSharedPause(t *testing.T, e *env) {
	now := at(time.Hour)
	a, b := e.st, e.share(t)
	ids := enqueueN(t, a, now, 4, "shared-paused")
	running := fetchID(t, b, now, ids[0])

	later := now.Add(time.Minute)
	pause(t, a, defaultQueue, true, later)
	wantQueue(t, "QueueGet through B after QueuePause(true) through A", &store.QueueRow{Name: defaultQueue, Paused: true, UpdatedAt: later}, queueGet(t, b, defaultQueue))
	fetchNone(t, b, later)
	fetchNone(t, b, later.Add(24*time.Hour))
	fetchNone(t, a, later)
	if held := extend(t, b, later, lease, ref(running)); !held[0] {
		t.Errorf("LeaseExtend through B of running job %d in the queue paused through A = false, want true", running.ID)
	}
	complete(t, b, later, running)

	resumed := later.Add(time.Minute)
	pause(t, b, defaultQueue, false, resumed)
	wantQueue(t, "QueueGet through A after QueuePause(false) through B", &store.QueueRow{Name: defaultQueue, UpdatedAt: resumed}, queueGet(t, a, defaultQueue))
	fetchID(t, a, resumed, ids[1])
	fetchID(t, b, resumed, ids[2])
}

// MaxRunning set through one handle caps the jobs running through both,
// under concurrent fetches; a job finished through one handle makes room
// for one more; a new setting through the other handle applies to both.
func testSharedMaxRunning(t *testing.T, e *env) {
	now := at(time.Hour)
	a, b := e.st, e.share(t)
	hs := []store.Store{a, b}
	set := store.QueueSettings{MaxRunning: 3}
	configure(t, a, defaultQueue, set, now)
	wantQueue(t, "QueueGet through B after QueueConfigure through A", &store.QueueRow{Name: defaultQueue, Settings: set, UpdatedAt: now}, queueGet(t, b, defaultQueue))
	enqueueN(t, b, now, 20, "shared-capped")

	var running []*store.JobRow
	for round := range 2 {
		running = append(running, concurrentFetchOn(t, hs, 6, 2, now)...)
		if len(running) != 3 {
			t.Fatalf("round %d: %d jobs running after concurrent fetches through both handles with MaxRunning 3, want 3", round, len(running))
		}
	}
	complete(t, b, now, running[0])
	if got := concurrentFetchOn(t, hs, 6, 2, now); len(got) != 1 {
		t.Fatalf("concurrent fetches through both handles after one of 3 running jobs finished claimed %d jobs, want 1", len(got))
	}

	later := now.Add(time.Minute)
	configure(t, b, defaultQueue, store.QueueSettings{MaxRunning: 5}, later)
	fetchCount(t, a, defaultQueue, later, 10, 2)
	fetchCount(t, b, defaultQueue, later, 10, 0)
	configure(t, a, defaultQueue, store.QueueSettings{}, later)
	fetchCount(t, b, defaultQueue, later, 20, 14)
}

// A rate limit holds across handles: concurrent fetches through both start
// at most RateLimit jobs in a window, and starts through one handle count
// against fetches through the other.
func testSharedRateLimit(t *testing.T, e *env) {
	now := at(time.Hour)
	a, b := e.st, e.share(t)
	const period = time.Minute
	configure(t, b, defaultQueue, store.QueueSettings{RateLimit: 3, RatePeriod: period}, now)
	enqueueN(t, a, now, 10, "shared-limited")
	if got := concurrentFetchOn(t, []store.Store{a, b}, 6, 2, now); len(got) != 3 {
		t.Fatalf("concurrent fetches through both handles with RateLimit 3 claimed %d jobs, want 3", len(got))
	}
	fetchCount(t, a, defaultQueue, now.Add(period/2), 10, 0)
	fetchCount(t, b, defaultQueue, now.Add(period-time.Microsecond), 10, 0)
	next := now.Add(period)
	fetchCount(t, a, defaultQueue, next, 1, 1)
	fetchCount(t, b, defaultQueue, next, 10, 2) // A's start counts
	fetchCount(t, a, defaultQueue, next, 10, 0)
	fetchCount(t, b, defaultQueue, next.Add(period/2), 10, 0)
}

// A cancel requested through B for a job running under A reaches A: its
// next LeaseExtend reports CancelRequested, and its cancelled outcome is
// seen through B. A pending job cancelled through B is never fetched
// through A.
func testSharedCancel(t *testing.T, e *env) {
	now := at(time.Hour)
	a, b := e.st, e.share(t)
	id := enqueueOne(t, a, now, newJob("shared-cancelled"))
	row := fetchID(t, a, now, id)
	if st := extendStatus(t, a, now, lease, ref(row)); st[0] != (store.LeaseStatus{Held: true}) {
		t.Fatalf("LeaseExtend through A before JobCancel = %+v, want {Held: true}", st[0])
	}

	later := now.Add(time.Minute)
	if got := cancelJob(t, b, id, later); got.State != store.JobStateRunning || !got.CancelRequested {
		t.Errorf("JobCancel through B of job %d running under A returned State %q, CancelRequested %v; want running, true", id, got.State, got.CancelRequested)
	}
	beat := later.Add(time.Second)
	if st := extendStatus(t, a, beat, lease, ref(row)); st[0] != (store.LeaseStatus{Held: true, CancelRequested: true}) {
		t.Errorf("LeaseExtend through A after JobCancel through B = %+v, want {Held: true, CancelRequested: true}", st[0])
	}
	end := beat.Add(time.Second)
	finishOne(t, a, end, &store.Report{ID: id, ClaimToken: row.ClaimToken, Kind: store.ReportCancelled, Error: failure(row, end, "cancel requested")}, store.JobStateCancelled)
	if got := wantState(t, b, id, store.JobStateCancelled); got.CancelRequested || !got.FinalizedAt.Equal(end) {
		t.Errorf("job %d through B after A cancelled it: CancelRequested %v, FinalizedAt %v; want false, %v", id, got.CancelRequested, got.FinalizedAt, end)
	}

	pending := enqueueOne(t, a, end, newJob("shared-cancelled"))
	if got := cancelJob(t, b, pending, end); got.State != store.JobStateCancelled {
		t.Errorf("JobCancel through B of available job %d: State %q, want cancelled", pending, got.State)
	}
	fetchNone(t, a, end)
}

// A unique key held through one handle makes the enqueue through the other
// a duplicate, while the holder is available or running; once it finished,
// the key is free through both. Enqueues of one key racing through both
// handles insert one job.
func testSharedUnique(t *testing.T, e *env) {
	now := at(time.Hour)
	a, b := e.st, e.share(t)
	id := enqueueOne(t, a, now, keyed("shared"))
	wantDuplicate(t, b, now, keyed("shared"), id, store.JobStateAvailable)
	row := fetchID(t, b, now, id)
	wantDuplicate(t, a, now, keyed("shared"), id, store.JobStateRunning)
	complete(t, b, now, row)
	again := enqueueOne(t, a, now, keyed("shared"))
	wantDuplicate(t, b, now, keyed("shared"), again, store.JobStateAvailable)

	const (
		workers = 8
		keys    = 3
	)
	hs := [2]store.Store{a, b}
	inserted := make([][]int64, keys)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				k := (i + w) % keys
				res, err := hs[w%2].JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Jobs: []*store.NewJob{keyed(fmt.Sprintf("race-%d", k))}, Now: now})
				if err != nil {
					t.Errorf("worker %d: JobEnqueueMany through handle %s error: %v", w, handleNames[w%2], err)
					return
				}
				if len(res) != 1 {
					t.Errorf("worker %d: JobEnqueueMany(1 job) returned %d results", w, len(res))
					return
				}
				if !res[0].Duplicate {
					mu.Lock()
					inserted[k] = append(inserted[k], res[0].ID)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for k, got := range inserted {
		if len(got) != 1 {
			t.Errorf("key race-%d: enqueues through both handles at once inserted %d jobs (%v), want 1", k, len(got), got)
		}
	}
}

// JobWait through B returns when the job is finished through A.
func testSharedWait(t *testing.T, e *env) {
	now := at(time.Hour)
	a, b := e.st, e.share(t)
	id := enqueueOne(t, a, now, newJob("shared-awaited"))
	type answer struct {
		row *store.JobRow
		err error
	}
	done := make(chan answer, 1)
	go func() {
		row, err := jobWait(t, b, id)
		done <- answer{row, err}
	}()
	row := fetchID(t, a, now, id)
	result := []byte(`{"ok":true}`)
	finishOne(t, a, now, &store.Report{ID: id, ClaimToken: row.ClaimToken, Kind: store.ReportCompleted, Result: result}, store.JobStateCompleted)
	w := <-done
	if w.err != nil {
		t.Fatalf("JobWait through B of job %d completed through A: error %v, want the job within %v", id, w.err, waitTimeout)
	}
	if w.row.State != store.JobStateCompleted || string(w.row.Result) != string(result) || !w.row.FinalizedAt.Equal(now) {
		t.Errorf("JobWait through B of job %d = State %q, Result %q, FinalizedAt %v; want completed, %q, %v", id, w.row.State, w.row.Result, w.row.FinalizedAt, result, now)
	}
}
