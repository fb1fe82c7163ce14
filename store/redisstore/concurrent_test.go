package redisstore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// Concurrent enqueues from many callers: each caller gets the results of
// its own batch and nothing else (its IDs, its duplicates, a refusal of
// its batch alone while the batches beside it land), and one unique key
// has one holder however many callers race for it.
func TestConcurrentEnqueuesKeepTheirOwnResults(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := redisstore.Open(ctx, redistest.URL(t), &redisstore.Options{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const callers, each = 16, 40
	type outcome struct {
		caller, n int
		jobs      []*store.NewJob
		res       []store.EnqueueResult
		err       error
	}
	out := make(chan outcome, callers*each)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range each {
				jobs := []*store.NewJob{{Kind: "k", Queue: "comb", Args: fmt.Appendf(nil, `{"c":%d,"n":%d}`, c, n)}}
				switch n % 4 {
				case 1: // a unique key every caller shares: one holder, the rest duplicates
					jobs[0].UniqueKey = "shared"
				case 2: // a batch of two
					jobs = append(jobs, &store.NewJob{Kind: "k2", Queue: "comb", Args: []byte(`{}`)})
				case 3: // refused: depends on a job that does not exist
					jobs[0].DependsOn = []int64{1<<40 + int64(c)}
				}
				res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: jobs})
				out <- outcome{caller: c, n: n, jobs: jobs, res: res, err: err}
			}
		}()
	}
	wg.Wait()
	close(out)

	seen := make(map[int64]string)
	var holder int64
	for o := range out {
		name := fmt.Sprintf("caller %d enqueue %d", o.caller, o.n)
		if o.n%4 == 3 {
			if !errors.Is(o.err, store.ErrNotFound) {
				t.Errorf("%s: error %v, want the unknown dependency's ErrNotFound", name, o.err)
			}
			continue
		}
		if o.err != nil || len(o.res) != len(o.jobs) {
			t.Fatalf("%s: %v, %v", name, o.res, o.err)
		}
		for i, r := range o.res {
			if o.n%4 == 1 && r.Duplicate {
				continue
			}
			if o.n%4 == 1 {
				if holder != 0 {
					t.Errorf("%s: a second holder %d of the shared key (first %d)", name, r.ID, holder)
				}
				holder = r.ID
			}
			if prev, dup := seen[r.ID]; dup {
				t.Fatalf("%s: ID %d given twice (also to %s)", name, r.ID, prev)
			}
			seen[r.ID] = name
			got, err := st.JobGet(ctx, &store.JobGetParams{ID: r.ID})
			if err != nil {
				t.Fatalf("%s: JobGet(%d): %v", name, r.ID, err)
			}
			if got.Kind != o.jobs[i].Kind || string(got.Args) != string(o.jobs[i].Args) {
				t.Errorf("%s: job %d is %s %s, want %s %s", name, r.ID, got.Kind, got.Args, o.jobs[i].Kind, o.jobs[i].Args)
			}
		}
	}
	if holder == 0 {
		t.Error("no enqueue holds the shared unique key")
	}
	// Every other job is the shared key's duplicate, refused, or in seen.
	total := available(t, st, "comb")
	if total != int64(len(seen)) {
		t.Errorf("%d jobs available, want the %d enqueued", total, len(seen))
	}
}

// available returns how many jobs of queue q are available.
func available(t *testing.T, st store.Store, q string) int64 {
	t.Helper()
	counts, err := st.JobCounts(t.Context(), &store.JobCountsParams{Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range counts {
		if c.State == store.JobStateAvailable {
			n += c.Count
		}
	}
	return n
}
