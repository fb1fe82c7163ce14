package storetest

import (
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

	var (
		claimed  atomic.Int64
		mu       sync.Mutex
		claimsOf = make(map[int64]int)
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(30 * time.Second)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			limit := w%10 + 1
			for claimed.Load() < n {
				if time.Now().After(deadline) {
					t.Errorf("worker %d: gave up after 30s with %d of %d jobs claimed", w, claimed.Load(), n)
					return
				}
				rows, err := e.st.JobFetch(t.Context(), &store.JobFetchParams{
					Queue: defaultQueue, Limit: limit, Now: now, Lease: time.Hour, Worker: "w",
				})
				if err != nil {
					t.Errorf("worker %d: JobFetch error: %v", w, err)
					return
				}
				if len(rows) > limit {
					t.Errorf("worker %d: JobFetch(limit %d) returned %d jobs", w, limit, len(rows))
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
				claimed.Add(int64(len(rows)))
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, id := range jobs {
		if c := claimsOf[id]; c != 1 {
			t.Errorf("job %d was claimed %d times, want exactly once", id, c)
		}
	}
	if len(claimsOf) != n {
		t.Errorf("%d distinct jobs claimed, want %d", len(claimsOf), n)
	}
	fetchNone(t, e.st, now)
	wantCounts(t, e.st, "", map[countKey]int64{{defaultQueue, store.JobStateRunning}: n})
}
