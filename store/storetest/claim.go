package storetest

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

var claimCases = []testCase{
	{name: "ExclusiveUnderConcurrency", run: testClaimExclusive},
}

// Many goroutines fetching at once never claim the same job twice: every
// job is claimed exactly once, and none is left available.
func testClaimExclusive(t *testing.T, e *env) {
	const (
		n       = 2000
		workers = 16
	)
	now := at(time.Hour)
	jobs := enqueueN(t, e.st, now, n, "claim")
	claimsOf := claimUntil(t, now, n, workers, func(w int) fetcher {
		return fetcher{st: e.st, worker: "w", limit: w%10 + 1, who: fmt.Sprintf("worker %d", w)}
	}, nil)
	if t.Failed() {
		return
	}
	wantClaimedOnce(t, jobs, claimsOf, "")
	fetchNone(t, e.st, now)
	wantCounts(t, e.st, "", map[countKey]int64{{defaultQueue, store.JobStateRunning}: n})
}

// fetcher is how one goroutine of claimUntil fetches: through st (the
// case's handle number handle), as worker, up to limit jobs a call; who
// names it in messages.
type fetcher struct {
	st     store.Store
	handle int
	worker string
	limit  int
	who    string
}

// claimUntil runs workers goroutines, goroutine w fetching the default
// queue at now as fetcherOf(w) says, until n jobs are claimed, and returns
// how many times each job was claimed. Each batch goes to claimed (when
// not nil) from the goroutine that fetched it. It fails t on a fetch
// error, a batch over its limit, or no end after 30 s.
func claimUntil(t *testing.T, now time.Time, n, workers int, fetcherOf func(w int) fetcher, claimed func(f fetcher, rows []*store.JobRow)) map[int64]int {
	t.Helper()
	var (
		total    atomic.Int64
		mu       sync.Mutex
		claimsOf = make(map[int64]int)
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(30 * time.Second)
	for w := range workers {
		f := fetcherOf(w)
		wg.Go(func() {
			for total.Load() < int64(n) {
				if time.Now().After(deadline) {
					t.Errorf("%s: gave up after 30s with %d of %d jobs claimed", f.who, total.Load(), n)
					return
				}
				rows, err := store.FetchedJobs(f.st.JobFetch(t.Context(), &store.JobFetchParams{
					Queue: defaultQueue, Limit: f.limit, Now: now, Lease: time.Hour, Worker: f.worker,
				}))
				if err != nil {
					t.Errorf("%s: JobFetch error: %v", f.who, err)
					return
				}
				if len(rows) > f.limit {
					t.Errorf("%s: JobFetch(limit %d) returned %d jobs", f.who, f.limit, len(rows))
				}
				if len(rows) == 0 {
					runtime.Gosched()
					continue
				}
				mu.Lock()
				for _, r := range rows {
					claimsOf[r.ID]++
				}
				mu.Unlock()
				total.Add(int64(len(rows)))
				if claimed != nil {
					claimed(f, rows)
				}
			}
		})
	}
	wg.Wait()
	return claimsOf
}

// wantClaimedOnce fails t unless each of jobs, and no other job, was
// claimed exactly once; where says through what (for messages).
func wantClaimedOnce(t *testing.T, jobs []int64, claimsOf map[int64]int, where string) {
	t.Helper()
	for _, id := range jobs {
		if c := claimsOf[id]; c != 1 {
			t.Errorf("job %d was claimed %d times%s, want exactly once", id, c, where)
		}
	}
	if len(claimsOf) != len(jobs) {
		t.Errorf("%d distinct jobs claimed, want %d", len(claimsOf), len(jobs))
	}
}
