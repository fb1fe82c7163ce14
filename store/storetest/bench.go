package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Bench runs the hot-path benchmarks against the stores h makes, each
// reporting jobs/s:
//
//   - EnqueueSingle: 8 goroutines enqueueing one job per call;
//   - EnqueueBatch: one goroutine enqueueing 1,000 jobs per call;
//   - FetchFinish: one worker claiming batches of 100 preloaded jobs and
//     completing each batch in one JobFinish call;
//   - FetchFinishConcurrent: the same with 4 workers;
//   - FetchPartitionBacklog: a fetch from a queue with PartitionMaxRunning
//     2 whose saturated partition has 5,000 jobs queued, claiming the job
//     of a small partition behind them (the fetch must not read the
//     backlog; its time is measured here, never asserted by the suite).
//
// One op is one job, except for EnqueueBatch, where it is one batch.
// Harness.Reopen is not used.
func Bench(b *testing.B, h *Harness) {
	b.Run("EnqueueSingle", func(b *testing.B) { benchEnqueueSingle(b, h) })
	b.Run("EnqueueBatch", func(b *testing.B) { benchEnqueueBatch(b, h) })
	b.Run("FetchFinish", func(b *testing.B) { benchFetchFinish(b, h, 1) })
	b.Run("FetchFinishConcurrent", func(b *testing.B) { benchFetchFinish(b, h, 4) })
	b.Run("FetchPartitionBacklog", func(b *testing.B) { benchFetchPartitionBacklog(b, h) })
}

func benchFetchPartitionBacklog(b *testing.B, h *Harness) {
	const backlog = 5000
	st := h.New(b)
	now := at(time.Hour)
	configure(b, st, defaultQueue, store.QueueSettings{PartitionMaxRunning: 2}, now)
	flood := make([]*store.NewJob, backlog)
	for i := range flood {
		flood[i] = keyedJob("flood", "big")
	}
	enqueue(b, st, now, flood...)
	// Two of the big partition's jobs run for the whole benchmark.
	if got := fetch(b, st, &store.JobFetchParams{Limit: 2, Now: now}); len(got) != 2 {
		b.Fatalf("JobFetch() returned %d jobs, want 2", len(got))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		enqueue(b, st, now, keyedJob("few", "small"))
		b.StartTimer()
		rows := fetch(b, st, &store.JobFetchParams{Limit: 10, Now: now})
		b.StopTimer()
		if len(rows) != 1 || rows[0].PartitionKey != "small" {
			b.Fatalf("JobFetch() returned %d jobs, want the small partition's one", len(rows))
		}
		complete(b, st, now, rows[0])
		b.StartTimer()
	}
}

// reportJobs reports n jobs over elapsed as jobs/s.
func reportJobs(b *testing.B, n int, elapsed time.Duration) {
	if elapsed > 0 {
		b.ReportMetric(float64(n)/elapsed.Seconds(), "jobs/s")
	}
}

// benchJob is a typical small job.
func benchJob(i int) *store.NewJob {
	j := newJob("bench")
	j.Args = fmt.Appendf(nil, `{"user_id":%d,"template":"welcome"}`, i)
	return j
}

func benchEnqueueSingle(b *testing.B, h *Harness) {
	const goroutines = 8
	st := h.New(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				_, err := st.JobEnqueueMany(b.Context(), &store.JobEnqueueManyParams{Jobs: []*store.NewJob{benchJob(int(i))}, Now: t0})
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	reportJobs(b, b.N, elapsed)
}

func benchEnqueueBatch(b *testing.B, h *Harness) {
	const size = 1000
	st := h.New(b)
	batch := make([]*store.NewJob, size)
	for i := range batch {
		batch[i] = benchJob(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := st.JobEnqueueMany(b.Context(), &store.JobEnqueueManyParams{Jobs: batch, Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	reportJobs(b, b.N*size, elapsed)
}

func benchFetchFinish(b *testing.B, h *Harness, workers int) {
	const fetchSize = 100
	st := h.New(b)
	for i := 0; i < b.N; i += 1000 {
		batch := make([]*store.NewJob, min(1000, b.N-i))
		for k := range batch {
			batch[k] = benchJob(i + k)
		}
		if _, err := st.JobEnqueueMany(b.Context(), &store.JobEnqueueManyParams{Jobs: batch, Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
	now := t0.Add(time.Second)
	var done atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("bench-%d", w)
			for done.Load() < int64(b.N) {
				rows, err := store.FetchedJobs(st.JobFetch(b.Context(), &store.JobFetchParams{Queue: defaultQueue, Limit: fetchSize, Now: now, Lease: time.Minute, Worker: worker}))
				if err != nil {
					b.Error(err)
					return
				}
				if len(rows) == 0 {
					return // the others hold the rest
				}
				outs := make([]*store.Report, len(rows))
				for i, r := range rows {
					outs[i] = &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted}
				}
				if _, err := st.JobFinish(b.Context(), &store.JobFinishParams{Reports: outs, Now: now}); err != nil {
					b.Error(err)
					return
				}
				done.Add(int64(len(rows)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if got := done.Load(); got != int64(b.N) {
		b.Fatalf("completed %d jobs, want %d", got, b.N)
	}
	reportJobs(b, b.N, elapsed)
}
