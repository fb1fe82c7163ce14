package pgstore

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
)

// Lease extensions and finishes of the same jobs, each given the jobs in
// its own order, lock rows in one order (job ID) and so never deadlock:
// twice in a 50 s storm they did, and the runtime logged each as an outage.
func TestExtendAndFinishNeverDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, pgtest.URL(t), &Options{Schema: pgtest.Schema(t), Migrate: true, MaxConns: 4, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const jobs, rounds = 300, 4
	now := time.Now()
	for round := range rounds {
		batch := make([]*store.NewJob, jobs)
		for i := range batch {
			batch[i] = &store.NewJob{Kind: "k", Queue: "q"}
		}
		if _, err := s.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: batch, Now: now}); err != nil {
			t.Fatal(err)
		}
		rows, err := store.FetchedJobs(s.JobFetch(ctx, &store.JobFetchParams{Queue: "q", Limit: jobs, Now: now, Lease: time.Hour, Worker: "w"}))
		if err != nil || len(rows) != jobs {
			t.Fatalf("round %d: JobFetch() = %d jobs, %v; want %d", round, len(rows), err, jobs)
		}
		refs := make([]store.LeaseRef, len(rows))
		for i, r := range rows {
			refs[i] = store.LeaseRef{ID: r.ID, ClaimToken: r.ClaimToken}
		}
		slices.Reverse(refs) // the heartbeat in descending order
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		done := make(chan struct{})
		for range 2 {
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					if _, err := s.LeaseExtend(ctx, &store.LeaseExtendParams{Leases: refs, Now: now, Lease: time.Hour}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		// Finishes in shuffled batches, ascending within none of them.
		outcomes := make([]*store.Report, len(rows))
		for i, r := range rows {
			outcomes[i] = &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted}
		}
		rand.Shuffle(len(outcomes), func(i, j int) { outcomes[i], outcomes[j] = outcomes[j], outcomes[i] })
		var fwg sync.WaitGroup
		for part := range 3 {
			fwg.Go(func() {
				for k := part * 100; k < (part+1)*100; k += 50 {
					if _, err := s.JobFinish(ctx, &store.JobFinishParams{Reports: outcomes[k : k+50], Now: now}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		fwg.Wait()
		close(done)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	if n := s.conflicts.Load(); n != 0 {
		t.Fatalf("%d statements were run again after a deadlock; want none (rows locked in one order)", n)
	}
}
