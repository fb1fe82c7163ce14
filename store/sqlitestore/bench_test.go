package sqlitestore_test

import (
	"context"
	"fmt"
	"slices"
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
	rows, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: limit, Now: t0, Lease: time.Minute, Worker: "w"}))
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	outs := make([]*store.Report, len(rows))
	for i, r := range rows {
		outs[i] = &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted}
	}
	res, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: outs, Now: t0})
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

// BenchmarkLatency: a worker waiting on QueueWatch, a producer enqueueing
// one job every 2 ms (500 jobs/s); reports the enqueue-call-to-claim
// latency percentiles. b.N is the number of jobs.
func BenchmarkLatency(b *testing.B) {
	for _, m := range []int{0, 2} {
		mode := benchModes[m]
		b.Run(mode.name, func(b *testing.B) {
			st := openTemp(b, mode.opts)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w, err := st.QueueWatch(ctx, &store.QueueWatchParams{Queue: "default"})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			var mu sync.Mutex
			sent := make(map[string]time.Time, b.N)
			lat := make([]time.Duration, 0, b.N)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for len(lat) < b.N {
					select {
					case <-w.C:
					case <-ctx.Done():
						return
					}
					for {
						rows, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 10, Now: t0, Lease: time.Minute}))
						if err != nil || len(rows) == 0 {
							break
						}
						now := time.Now()
						mu.Lock()
						for _, r := range rows {
							lat = append(lat, now.Sub(sent[string(r.Args)]))
						}
						mu.Unlock()
					}
				}
			}()
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			b.ResetTimer()
			for i := range b.N {
				<-tick.C
				args := []byte(fmt.Sprintf(`{"i":%d}`, i))
				mu.Lock()
				sent[string(args)] = time.Now()
				mu.Unlock()
				if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{{Kind: "lat", Queue: "default", Args: args}}, Now: t0}); err != nil {
					b.Fatal(err)
				}
			}
			<-done
			slices.Sort(lat)
			pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(pct(0.50), "p50_ms")
			b.ReportMetric(pct(0.95), "p95_ms")
			b.ReportMetric(pct(0.99), "p99_ms")
		})
	}
}

// BenchmarkInspect: JobCounts, JobGet and the first page of JobList on a
// store holding 1,000,000 jobs (half completed). Setup takes a while.
func BenchmarkInspect(b *testing.B) {
	st := openTemp(b, &sqlitestore.Options{Synchronous: sqlitestore.SynchronousNormal})
	ctx := context.Background()
	preload(b, st, 1_000_000)
	for {
		n, err := fetchFinish(ctx, st, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if c := countOf(b, st, "default", store.JobStateCompleted); n == 0 || c >= 500_000 {
			break
		}
	}
	for _, bc := range []struct {
		name string
		run  func() error
	}{
		{"Counts", func() error { _, err := st.JobCounts(ctx, &store.JobCountsParams{}); return err }},
		{"Get", func() error { _, err := st.JobGet(ctx, &store.JobGetParams{ID: 777_777}); return err }},
		{"ListAll", func() error {
			_, err := st.JobList(ctx, &store.JobListParams{Limit: 100, Desc: true})
			return err
		}},
		{"ListCompleted", func() error {
			_, err := st.JobList(ctx, &store.JobListParams{State: store.JobStateCompleted, Limit: 100})
			return err
		}},
		{"ListAvailableQueue", func() error {
			_, err := st.JobList(ctx, &store.JobListParams{Queue: "default", State: store.JobStateAvailable, Limit: 100, AfterID: 900_000})
			return err
		}},
		{"FetchShort", func() error {
			// A fetch that claims nothing and reads when more may be.
			_, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Kinds: []string{"none"}, Limit: 1, Lease: time.Minute})
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				if err := bc.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
