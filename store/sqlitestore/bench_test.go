package sqlitestore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// reportRate reports jobs per second over the benchmark's timed part.
func reportRate(b *testing.B, jobs int, start time.Time) {
	b.ReportMetric(float64(jobs)/time.Since(start).Seconds(), "jobs/s")
}

var benchModes = []struct {
	name string
	opts *sqlitestore.Options
}{
	{"Full", nil},
	{"Normal", &sqlitestore.Options{Synchronous: sqlitestore.SynchronousNormal}},
	{"Relaxed", &sqlitestore.Options{RelaxedClaims: true}},
}

// BenchmarkEnqueueSingle: 8 producers, one job per call, each waiting for
// its own commit (group commit shares the syncs).
func BenchmarkEnqueueSingle(b *testing.B) {
	for _, m := range benchModes[:2] {
		b.Run(m.name, func(b *testing.B) {
			st := openTemp(b, m.opts)
			ctx := context.Background()
			const producers = 8
			var next atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					job := []*store.NewJob{newJob("bench")}
					for next.Add(1) <= int64(b.N) {
						if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: job, Now: t0}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			reportRate(b, b.N, start)
		})
	}
}

func batchOf(n int) []*store.NewJob {
	jobs := make([]*store.NewJob, n)
	for i := range jobs {
		jobs[i] = &store.NewJob{Kind: "bench", Queue: "default", Args: []byte(`{"n":12345}`)}
	}
	return jobs
}

// BenchmarkEnqueueBatch: one producer, 1,000 jobs per call.
func BenchmarkEnqueueBatch(b *testing.B) {
	st := openTemp(b, nil)
	ctx := context.Background()
	jobs := batchOf(1000)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N*len(jobs), start)
}

// preload enqueues n available jobs.
func preload(b *testing.B, st store.Store, n int) {
	b.Helper()
	ctx := context.Background()
	jobs := batchOf(1000)
	for n > 0 {
		k := min(n, len(jobs))
		if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs[:k], Now: t0}); err != nil {
			b.Fatal(err)
		}
		n -= k
	}
}

// BenchmarkFetchFinish: one worker loop, fetch 100 then complete them in one
// call; an op is one job.
func BenchmarkFetchFinish(b *testing.B) {
	for _, m := range []int{0, 2} {
		mode := benchModes[m]
		b.Run(mode.name, func(b *testing.B) {
			st := openTemp(b, mode.opts)
			ctx := context.Background()
			preload(b, st, b.N)
			b.ResetTimer()
			start := time.Now()
			done := 0
			for done < b.N {
				n, err := fetchFinish(ctx, st, 100)
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					b.Fatalf("fetched nothing after %d of %d jobs", done, b.N)
				}
				done += n
			}
			reportRate(b, done, start)
		})
	}
}

// BenchmarkDrain: 4 concurrent workers, each fetching 25 and completing
// them, like a runtime with 100 worker goroutines; an op is one job.
func BenchmarkDrain(b *testing.B) {
	for _, m := range []int{0, 2} {
		mode := benchModes[m]
		b.Run(mode.name, func(b *testing.B) {
			st := openTemp(b, mode.opts)
			ctx := context.Background()
			preload(b, st, b.N)
			b.ResetTimer()
			start := time.Now()
			var done atomic.Int64
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						n, err := fetchFinish(ctx, st, 25)
						if err != nil {
							b.Error(err)
							return
						}
						if n == 0 {
							return
						}
						done.Add(int64(n))
					}
				}()
			}
			wg.Wait()
			if int(done.Load()) != b.N {
				b.Fatalf("drained %d jobs, want %d", done.Load(), b.N)
			}
			reportRate(b, b.N, start)
		})
	}
}

func fetchFinish(ctx context.Context, st store.Store, limit int) (int, error) {
	rows, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: limit, Now: t0, Lease: time.Minute, Worker: "w"})
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	outs := make([]*store.Outcome, len(rows))
	for i, r := range rows {
		outs[i] = &store.Outcome{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.OutcomeCompleted}
	}
	res, err := st.JobFinish(ctx, &store.JobFinishParams{Outcomes: outs, Now: t0})
	if err != nil {
		return 0, err
	}
	for _, r := range res {
		if !r.Applied {
			return 0, context.Canceled
		}
	}
	return len(rows), nil
}
