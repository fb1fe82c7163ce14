package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

var limitsCases = []testCase{
	{name: "MaxRunningConcurrent", run: testMaxRunning},
	{name: "RateLimitWindow", run: testRateLimitWindow},
	{name: "RateLimitSliding", run: testRateLimitSliding},
	{name: "RateLimitOlderClock", run: testRateLimitOlderClock},
	{name: "RateLimitInterval", run: testRateLimitInterval},
	{name: "RateLimitUnstartedRelease", run: testRateLimitUnstartedRelease},
	{name: "RateLimitReservedAhead", run: testRateLimitReservedAhead},
	{name: "NextRunAtRateLimit", run: testNextRunAtRateLimit},
	{name: "PartitionMaxRunning", run: testPartitionMaxRunning},
	{name: "PartitionNoOverlapConcurrent", run: testPartitionNoOverlap},
	{name: "PartitionRateLimit", run: testPartitionRateLimit},
	{name: "Fairness", run: testFairness},
}

// keyedJob returns a job of the default queue with partition key k.
func keyedJob(kind, k string) *store.NewJob {
	j := newJob(kind)
	j.PartitionKey = k
	return j
}

// concurrentFetch runs n fetches of the default queue at now at once (each
// with limit) and returns every job claimed.
func concurrentFetch(t *testing.T, st store.Store, n, limit int, now time.Time) []*store.JobRow {
	t.Helper()
	return concurrentFetchOn(t, []store.Store{st}, n, limit, now)
}

// concurrentFetchOn is concurrentFetch spreading the fetches over the
// handles sts in turn.
func concurrentFetchOn(t *testing.T, sts []store.Store, n, limit int, now time.Time) []*store.JobRow {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		all   []*store.JobRow
		start = make(chan struct{})
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rows, err := store.FetchedJobs(sts[i%len(sts)].JobFetch(t.Context(), &store.JobFetchParams{Queue: defaultQueue, Limit: limit, Now: now, Lease: lease, Worker: fmt.Sprintf("worker-%d", i)}))
			if err != nil {
				t.Errorf("JobFetch error: %v", err)
				return
			}
			mu.Lock()
			all = append(all, rows...)
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return all
}

// MaxRunning caps the queue's running jobs across concurrent fetchers;
// finishing a job makes room for one more.
func testMaxRunning(t *testing.T, e *env) {
	now := at(time.Hour)
	configure(t, e.st, defaultQueue, store.QueueSettings{MaxRunning: 3}, now)
	enqueueN(t, e.st, now, 30, "capped")
	var running []*store.JobRow
	for round := range 3 {
		running = append(running, concurrentFetch(t, e.st, 6, 2, now)...)
		if len(running) != 3 {
			t.Fatalf("round %d: %d jobs running after concurrent fetches with MaxRunning 3, want 3", round, len(running))
		}
	}
	complete(t, e.st, now, running[0])
	got := concurrentFetch(t, e.st, 6, 2, now)
	if len(got) != 1 {
		t.Fatalf("concurrent fetches after one of 3 running jobs finished claimed %d jobs, want 1", len(got))
	}
	wantCounts(t, e.st, defaultQueue, map[countKey]int64{
		{defaultQueue, store.JobStateRunning}:   3,
		{defaultQueue, store.JobStateCompleted}: 1,
		{defaultQueue, store.JobStateAvailable}: 26,
	})
}

// fetchCount claims up to limit jobs of queue at now and fails the test
// unless it gets want.
func fetchCount(t *testing.T, st store.Store, queue string, now time.Time, limit, want int) []*store.JobRow {
	t.Helper()
	rows := fetch(t, st, &store.JobFetchParams{Queue: queue, Limit: limit, Now: now})
	if len(rows) != want {
		t.Fatalf("JobFetch(queue %q, limit %d, now t0+%v) returned %d jobs, want %d", queue, limit, now.Sub(t0), len(rows), want)
	}
	return rows
}

// RateLimit N allows N starts in any window (Now-RatePeriod, Now], however
// fast the jobs finish: a window closes exactly RatePeriod after a start.
func testRateLimitWindow(t *testing.T, e *env) {
	now := at(time.Hour)
	const period = time.Minute
	configure(t, e.st, defaultQueue, store.QueueSettings{RateLimit: 3, RatePeriod: period}, now)
	enqueueN(t, e.st, now, 10, "limited")
	for _, r := range fetchCount(t, e.st, defaultQueue, now, 10, 3) {
		complete(t, e.st, now, r)
	}
	fetchCount(t, e.st, defaultQueue, now, 10, 0)
	fetchCount(t, e.st, defaultQueue, now.Add(period/2), 10, 0)
	fetchCount(t, e.st, defaultQueue, now.Add(period-time.Microsecond), 10, 0)
	fetchCount(t, e.st, defaultQueue, now.Add(period), 10, 3)
	fetchCount(t, e.st, defaultQueue, now.Add(period), 10, 0)
	// Small fetches share the window too.
	next := now.Add(2 * period)
	fetchCount(t, e.st, defaultQueue, next, 1, 1)
	fetchCount(t, e.st, defaultQueue, next, 1, 1)
	fetchCount(t, e.st, defaultQueue, next, 10, 1)
	fetchCount(t, e.st, defaultQueue, next, 10, 0)
}

// Processes read their clocks before they reach the store, so a fetch can
// arrive with an older Now than a start already recorded. That start has
// happened and counts; and a fetch with a later Now must not forget starts
// that an older fetch's window still holds.
func testRateLimitOlderClock(t *testing.T, e *env) {
	now := at(time.Hour)
	const period = time.Minute
	configure(t, e.st, defaultQueue, store.QueueSettings{RateLimit: 2, RatePeriod: period}, now)
	enqueueN(t, e.st, now, 10, "clocks")
	fetchCount(t, e.st, defaultQueue, now.Add(10*time.Second), 1, 1) // start A at +10s
	fetchCount(t, e.st, defaultQueue, now, 10, 1)                    // older clock: A counts, one more (B at +0s)
	fetchCount(t, e.st, defaultQueue, now.Add(5*time.Second), 10, 0)
	fetchCount(t, e.st, defaultQueue, now.Add(65*time.Second), 10, 1) // window (+5s, +65s] holds A: one more (C)
	fetchCount(t, e.st, defaultQueue, now.Add(50*time.Second), 10, 0) // window (-10s, +50s] holds B and A, and C came after
}

// The window slides: starts at different times leave it one by one, which
// fixed buckets (per minute) would get wrong.
func testRateLimitSliding(t *testing.T, e *env) {
	now := at(time.Hour)
	const period = time.Minute
	configure(t, e.st, defaultQueue, store.QueueSettings{RateLimit: 2, RatePeriod: period}, now)
	enqueueN(t, e.st, now, 10, "sliding")
	fetchCount(t, e.st, defaultQueue, now, 1, 1)
	fetchCount(t, e.st, defaultQueue, now.Add(30*time.Second), 10, 1)
	fetchCount(t, e.st, defaultQueue, now.Add(59*time.Second), 10, 0)
	fetchCount(t, e.st, defaultQueue, now.Add(period), 10, 1) // the start at now left
	fetchCount(t, e.st, defaultQueue, now.Add(90*time.Second-time.Microsecond), 10, 0)
	fetchCount(t, e.st, defaultQueue, now.Add(90*time.Second), 10, 1) // the start at now+30s left
	fetchCount(t, e.st, defaultQueue, now.Add(100*time.Second), 10, 0)
}

// RateLimit 1 is a strict interval queue: one job per period, in fetch
// order.
func testRateLimitInterval(t *testing.T, e *env) {
	now := at(time.Hour)
	const period = 10 * time.Second
	configure(t, e.st, defaultQueue, store.QueueSettings{RateLimit: 1, RatePeriod: period}, now)
	specs := []orderSpec{{3, 0}, {1, 0}, {2, 0}, {1, 0}, {2, -time.Second}}
	want := enqueueOrdered(t, e.st, now, specs)
	var got []int64
	for i := range len(want) + 1 {
		slot := now.Add(time.Duration(i) * period)
		n := 1
		if i == len(want) {
			n = 0
		}
		got = append(got, ids(fetchCount(t, e.st, defaultQueue, slot, 5, n))...)
		fetchCount(t, e.st, defaultQueue, slot.Add(period/2), 5, 0)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("interval queue claimed jobs in the wrong order (-want +got):\n%s", diff)
	}
}

// A release whose handler never started (Report.Unstarted: its claim came
// back after the start it reserved, or the queue was paused before that
// start) gives the start back at once, to the queue's window and to its
// partition's, whether it comes before or after the reserved start. A
// release of a handler that started gives nothing back, nor does an
// unstarted release refused for a stale claim.
func testRateLimitUnstartedRelease(t *testing.T, e *env) {
	now := at(time.Hour)
	const period = time.Minute
	release := func(row *store.JobRow, unstarted bool, at time.Time) {
		t.Helper()
		finishOne(t, e.st, at, &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportReleased, Unstarted: unstarted},
			store.JobStateAvailable)
	}
	const q = "rated"
	configure(t, e.st, q, store.QueueSettings{RateLimit: 2, RatePeriod: period}, now)
	enqueue(t, e.st, now, newJobIn("job", q), newJobIn("job", q), newJobIn("job", q), newJobIn("job", q))
	// Claimed for a start reserved a second ahead, as workers claim.
	start, later := now.Add(time.Second), now.Add(2*time.Second)
	rows := fetchCount(t, e.st, q, start, 10, 2)
	release(rows[0], false, later) // an interrupted handler: its start counts
	fetchCount(t, e.st, q, later, 10, 0)
	stale := &store.Report{ID: rows[1].ID, ClaimToken: rows[1].ClaimToken + 1000, Kind: store.ReportReleased, Unstarted: true}
	if res := finish(t, e.st, now, stale); res[0].Applied {
		t.Fatalf("JobFinish(job %d released with a stale claim token) applied, want refused", rows[1].ID)
	}
	fetchCount(t, e.st, q, later, 10, 0)
	release(rows[1], true, now) // before its reserved start
	again := fetchCount(t, e.st, q, later, 10, 1)
	fetchCount(t, e.st, q, later, 10, 0)
	release(again[0], true, later.Add(time.Second)) // after its reserved start
	fetchCount(t, e.st, q, later.Add(time.Second), 10, 1)
	fetchCount(t, e.st, q, later.Add(time.Second), 10, 0)
	// The interrupted start leaves the window a period after it, not before.
	fetchCount(t, e.st, q, start.Add(period-time.Microsecond), 10, 0)
	fetchCount(t, e.st, q, start.Add(period), 10, 1)

	const p = "partitioned"
	configure(t, e.st, p, store.QueueSettings{RateLimit: 2, RatePeriod: period, PartitionRateLimit: 1, PartitionRatePeriod: period}, now)
	keyed := func(k string) *store.NewJob {
		j := keyedJob("job", k)
		j.Queue = p
		return j
	}
	res := enqueue(t, e.st, now, keyed("a"), keyed("a"), keyed("b"), keyed("b"))
	got := fetch(t, e.st, &store.JobFetchParams{Queue: p, Limit: 10, Now: now})
	if diff := cmp.Diff([]int64{res[0].ID, res[2].ID}, ids(got)); diff != "" {
		t.Fatalf("JobFetch with PartitionRateLimit 1 mismatch (-want +got):\n%s", diff)
	}
	release(got[0], true, now)
	// Both windows gave the start back: the queue's (2 starts) and key a's.
	if ids := fetchIDs(t, e.st, &store.JobFetchParams{Queue: p, Limit: 10, Now: now}); cmp.Diff([]int64{res[0].ID}, ids) != "" {
		t.Fatalf("JobFetch after job %d (key a) gave its start back = %v, want [%d]", res[0].ID, ids, res[0].ID)
	}
	fetchCount(t, e.st, p, now, 10, 0)
}

// A worker claims from a rate-limited queue for a start it reserves
// ahead of its clock, by up to store.MaxStartAhead, so fetches of workers
// with different leads come with Nows that far apart. A fetch far ahead
// that finds nothing to claim must not forget a start that a fetch lagging
// behind still counts, in the queue's window and in a partition's, and a
// start given back later must still be there to forget: giving it back
// takes no other start with it.
func testRateLimitReservedAhead(t *testing.T, e *env) {
	now := at(time.Hour)
	const period = 100 * time.Millisecond
	ahead, lagging := now.Add(store.MaxStartAhead), now.Add(period/2)
	for _, c := range []struct {
		queue    string
		settings store.QueueSettings
		job      func() *store.NewJob
	}{
		{"ahead", store.QueueSettings{RateLimit: 1, RatePeriod: period}, func() *store.NewJob { return newJobIn("job", "ahead") }},
		{"ahead-keyed", store.QueueSettings{PartitionRateLimit: 1, PartitionRatePeriod: period}, func() *store.NewJob {
			j := keyedJob("job", "a")
			j.Queue = "ahead-keyed"
			return j
		}},
	} {
		configure(t, e.st, c.queue, c.settings, now)
		enqueue(t, e.st, now, c.job())
		first := fetchCount(t, e.st, c.queue, now, 10, 1)
		fetchCount(t, e.st, c.queue, ahead, 10, 0) // the one job is running
		enqueue(t, e.st, now, c.job(), c.job())
		fetchCount(t, e.st, c.queue, lagging, 10, 0) // the start at now is in the window
		finishOne(t, e.st, lagging, &store.Report{ID: first[0].ID, ClaimToken: first[0].ClaimToken, Kind: store.ReportReleased, Unstarted: true},
			store.JobStateAvailable)
		fetchCount(t, e.st, c.queue, lagging, 10, 1)
		fetchCount(t, e.st, c.queue, lagging, 10, 0)
		fetchCount(t, e.st, c.queue, lagging.Add(period), 10, 1)
	}
}

// nextRunAt returns the NextAt of a fetch from queue at now that claims
// nothing: its Kinds match no job. NextAt counts every job of the queue,
// whatever the fetch's Kinds.
func nextRunAt(t *testing.T, st store.Store, queue string, now time.Time) time.Time {
	t.Helper()
	res, err := st.JobFetch(t.Context(), &store.JobFetchParams{Queue: queue, Kinds: []string{"no-such-kind"}, Limit: 1,
		Now: now, Lease: time.Minute, Worker: "probe"})
	if err != nil {
		t.Fatalf("JobFetch(%q) error: %v", queue, err)
	}
	if len(res.Jobs) != 0 {
		t.Fatalf("JobFetch(%q, kinds no-such-kind) claimed %d jobs, want none", queue, len(res.Jobs))
	}
	return res.NextAt
}

// When the rate limit holds back available jobs, a short fetch's NextAt
// is when
// the window next allows a start, or an earlier scheduled RunAt; with
// nothing held back it reports only scheduled and retrying jobs.
func testNextRunAtRateLimit(t *testing.T, e *env) {
	now := at(time.Hour)
	const period = time.Minute
	for _, q := range []string{"plain", "early", "late"} {
		configure(t, e.st, q, store.QueueSettings{RateLimit: 2, RatePeriod: period}, now)
		enqueue(t, e.st, now, newJobIn("job", q), newJobIn("job", q), newJobIn("job", q))
	}
	early := newJobIn("job", "early")
	early.RunAt = now.Add(30 * time.Second)
	late := newJobIn("job", "late")
	late.RunAt = now.Add(2 * period)
	enqueue(t, e.st, now, early, late)

	for _, q := range []string{"plain", "early", "late"} {
		fetchCount(t, e.st, q, now, 1, 1)
		fetchCount(t, e.st, q, now.Add(10*time.Second), 10, 1)
	}
	check := func(q string, at time.Time, want time.Time) {
		t.Helper()
		if got := nextRunAt(t, e.st, q, at); !got.Equal(want) {
			t.Errorf("JobFetch(%q, now t0+%v).NextAt = %v, want %v", q, at.Sub(t0), got, want)
		}
	}
	held := now.Add(20 * time.Second)
	check("plain", held, now.Add(period)) // the start at now leaves the window
	check("early", held, early.RunAt)     // a scheduled job comes first
	check("late", held, now.Add(period))  // the window opens first
	check("plain", now.Add(period-time.Microsecond), now.Add(period))
	fetchCount(t, e.st, "plain", now.Add(period), 10, 1)
	// Nothing is held back any more: no jobs are left.
	check("plain", now.Add(period), time.Time{})
	// In a queue without a rate limit, available jobs are not reported.
	enqueueOne(t, e.st, now, newJobIn("job", "free"))
	check("free", now, time.Time{})
}

// PartitionMaxRunning caps each partition key's running jobs: a key at its
// limit does not hold back other keys' jobs behind it, jobs without a key
// are not subject to it, and a finished job makes room for its key.
func testPartitionMaxRunning(t *testing.T, e *env) {
	now := at(time.Hour)
	configure(t, e.st, defaultQueue, store.QueueSettings{PartitionMaxRunning: 1}, now)
	res := enqueue(t, e.st, now,
		keyedJob("job", "a"), keyedJob("job", "a"), keyedJob("job", "a"),
		keyedJob("job", "b"), newJob("job"), keyedJob("job", "b"), newJob("job"))
	id := func(i int) int64 { return res[i].ID }
	first := fetch(t, e.st, &store.JobFetchParams{Limit: 10, Now: now})
	if diff := cmp.Diff([]int64{id(0), id(3), id(4), id(6)}, ids(first)); diff != "" {
		t.Fatalf("JobFetch with PartitionMaxRunning 1 mismatch (-want +got):\n%s", diff)
	}
	fetchNone(t, e.st, now)
	complete(t, e.st, now, first[0]) // key a
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Limit: 10, Now: now}); cmp.Diff([]int64{id(1)}, got) != "" {
		t.Fatalf("JobFetch after key a's job finished = %v, want [%d]", got, id(1))
	}
	// Released, the job of key b frees its key for the next one of b.
	finishOne(t, e.st, now, &store.Report{ID: first[1].ID, ClaimToken: first[1].ClaimToken, Kind: store.ReportReleased}, store.JobStateAvailable)
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Limit: 10, Now: now}); cmp.Diff([]int64{id(3)}, got) != "" {
		t.Fatalf("JobFetch after key b's job was released = %v, want [%d]", got, id(3))
	}
}

// PartitionMaxRunning 1 is a lock: under concurrent fetchers, two jobs of
// one key never run at once.
func testPartitionNoOverlap(t *testing.T, e *env) {
	now := at(time.Hour)
	const keys, perKey, workers = 4, 6, 4
	configure(t, e.st, defaultQueue, store.QueueSettings{PartitionMaxRunning: 1}, now)
	var jobs []*store.NewJob
	for i := range keys * perKey {
		jobs = append(jobs, keyedJob("sync", fmt.Sprintf("account-%d", i%keys)))
	}
	enqueue(t, e.st, now, jobs...)
	var (
		mu      sync.Mutex
		running = make(map[string]int64) // key -> job running now
		done    int
		wg      sync.WaitGroup
	)
	deadline := time.Now().Add(10 * time.Second)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				mu.Lock()
				finished := done == keys*perKey
				mu.Unlock()
				if finished {
					return
				}
				rows, err := store.FetchedJobs(e.st.JobFetch(t.Context(), &store.JobFetchParams{Queue: defaultQueue, Limit: keys + 1, Now: now, Lease: lease, Worker: fmt.Sprintf("w%d", w)}))
				if err != nil {
					t.Errorf("JobFetch error: %v", err)
					return
				}
				mu.Lock()
				for _, r := range rows {
					if other, ok := running[r.PartitionKey]; ok {
						t.Errorf("jobs %d and %d of partition %q running at once, want at most one (PartitionMaxRunning 1)", other, r.ID, r.PartitionKey)
					}
					running[r.PartitionKey] = r.ID
				}
				mu.Unlock()
				for _, r := range rows {
					// Forget the job before the store frees its key, so a
					// fetch that claims the key's next job finds it gone.
					mu.Lock()
					delete(running, r.PartitionKey)
					done++
					mu.Unlock()
					res, err := e.st.JobFinish(t.Context(), &store.JobFinishParams{Now: now, Reports: []*store.Report{{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted}}})
					if err != nil || !res[0].Applied {
						t.Errorf("JobFinish(job %d) = %v, %v; want applied", r.ID, res, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if done != keys*perKey {
		t.Fatalf("%d of %d jobs finished within 10s", done, keys*perKey)
	}
}

// PartitionRateLimit caps each key's starts in any window of
// PartitionRatePeriod; jobs without a key are not subject to it.
func testPartitionRateLimit(t *testing.T, e *env) {
	now := at(time.Hour)
	const period = time.Minute
	configure(t, e.st, defaultQueue, store.QueueSettings{PartitionRateLimit: 1, PartitionRatePeriod: period}, now)
	res := enqueue(t, e.st, now,
		keyedJob("job", "a"), keyedJob("job", "a"), keyedJob("job", "b"), keyedJob("job", "a"),
		keyedJob("job", "b"), newJob("job"), newJob("job"))
	id := func(i int) int64 { return res[i].ID }
	got := fetch(t, e.st, &store.JobFetchParams{Limit: 10, Now: now})
	if diff := cmp.Diff([]int64{id(0), id(2), id(5), id(6)}, ids(got)); diff != "" {
		t.Fatalf("JobFetch with PartitionRateLimit 1 mismatch (-want +got):\n%s", diff)
	}
	for _, r := range got {
		complete(t, e.st, now, r)
	}
	fetchNone(t, e.st, now)
	fetchNone(t, e.st, now.Add(period-time.Microsecond))
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Limit: 10, Now: now.Add(period)}); cmp.Diff([]int64{id(1), id(4)}, got) != "" {
		t.Fatalf("JobFetch one period later = %v, want [%d %d]", got, id(1), id(4))
	}
	fetchNone(t, e.st, now.Add(period))
}

// Fairness: a tenant with a large backlog enqueued first cannot starve a
// small tenant. With PartitionMaxRunning 2 and the big tenant's jobs kept
// running, the small tenant's jobs are claimed from the first fetch on.
// (That a fetch does not read the big tenant's backlog is measured by
// Bench's FetchPartitionBacklog; the suite never asserts a speed.)
func testFairness(t *testing.T, e *env) {
	now := at(time.Hour)
	const big, small = 5000, 10
	configure(t, e.st, defaultQueue, store.QueueSettings{PartitionMaxRunning: 2}, now)
	jobs := make([]*store.NewJob, big)
	for i := range jobs {
		jobs[i] = keyedJob("flood", "tenant-a")
	}
	enqueue(t, e.st, now, jobs...)
	jobs = jobs[:small]
	for i := range jobs {
		jobs[i] = keyedJob("few", "tenant-b")
	}
	var bIDs []int64
	for _, r := range enqueue(t, e.st, now, jobs...) {
		bIDs = append(bIDs, r.ID)
	}
	var claimedB []int64
	aRunning := 0
	for round := range small / 2 {
		rows := fetch(t, e.st, &store.JobFetchParams{Limit: 10, Now: now})
		var gotB []*store.JobRow
		for _, r := range rows {
			switch r.PartitionKey {
			case "tenant-a":
				aRunning++ // kept running
			case "tenant-b":
				gotB = append(gotB, r)
				claimedB = append(claimedB, r.ID)
			}
		}
		if aRunning > 2 {
			t.Fatalf("round %d: %d jobs of tenant-a running, want at most 2", round, aRunning)
		}
		if len(gotB) != 2 {
			t.Fatalf("round %d: JobFetch(limit 10) claimed %d jobs of tenant-b, want 2 (tenant-a's backlog must not starve it)", round, len(gotB))
		}
		for _, r := range gotB {
			complete(t, e.st, now, r)
		}
	}
	if diff := cmp.Diff(bIDs, claimedB); diff != "" {
		t.Errorf("tenant-b's jobs claimed (-want +got):\n%s", diff)
	}
}
