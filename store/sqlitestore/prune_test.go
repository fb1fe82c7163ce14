package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

// completeMany enqueues n jobs in queue "default" and completes them all at
// t0.
func completeMany(t *testing.T, st store.Store, n int) {
	t.Helper()
	ctx := context.Background()
	for left := n; left > 0; left -= min(left, 1000) {
		jobs := make([]*store.NewJob, min(left, 1000))
		for i := range jobs {
			jobs[i] = newJob("done")
		}
		enqueue(t, st, jobs...)
		res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: len(jobs), Now: t0, Lease: time.Minute})
		if err != nil || len(res.Jobs) != len(jobs) {
			t.Fatalf("JobFetch(%d) = %d jobs, %v", len(jobs), len(res.Jobs), err)
		}
		reports := make([]*store.Report, len(res.Jobs))
		for i, row := range res.Jobs {
			reports[i] = &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportCompleted}
		}
		if _, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: reports, Now: t0}); err != nil {
			t.Fatalf("JobFinish(%d) error: %v", len(reports), err)
		}
	}
}

// A prune larger than one chunk deletes exactly its limit, and writes
// issued while it runs do not wait for its end: it leaves the one writer
// between chunks.
func TestPruneLetsWritesThroughBetweenChunks(t *testing.T) {
	st := openTemp(t, nil)
	const finished = 6000
	completeMany(t, st, finished)
	ctx := context.Background()
	prune := func(limit int) <-chan int {
		done := make(chan int, 1)
		go func() {
			n, err := st.JobPrune(ctx, &store.JobPruneParams{CompletedBefore: t0.Add(time.Second), Limit: limit, Now: t0})
			if err != nil {
				t.Errorf("JobPrune error: %v", err)
			}
			done <- n
		}()
		return done
	}

	first := prune(5000)
	// Once the first chunk is in, the prune has chunks left to delete.
	for countOf(t, st, "default", store.JobStateCompleted) == finished {
		select {
		case n := <-first:
			t.Fatalf("the prune ended (%d jobs) before a write could be observed", n)
		default:
		}
	}
	enqueue(t, st, newJob("during"))
	select {
	case n := <-first:
		t.Fatalf("an enqueue issued during a prune of 5,000 jobs waited for its end (%d jobs pruned)", n)
	default:
	}
	if n := <-first; n != 5000 {
		t.Fatalf("JobPrune(limit 5000) = %d, want 5000", n)
	}
	if n := <-prune(5000); n != finished-5000 {
		t.Fatalf("second JobPrune = %d, want %d", n, finished-5000)
	}
	if got := countOf(t, st, "default", store.JobStateCompleted); got != 0 {
		t.Fatalf("%d completed jobs counted after pruning them all", got)
	}
	if got := len(listAll(t, st)); got != 1 {
		t.Fatalf("%d jobs listed after the prunes, want the one enqueued during them", got)
	}
}
