package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

var benchArgs = []byte(`{"user_id":12345,"template":"welcome"}`)

func benchJobs(n int) []*store.NewJob {
	jobs := make([]*store.NewJob, n)
	for i := range jobs {
		jobs[i] = &store.NewJob{Kind: "email", Queue: "default", Args: benchArgs, Priority: 2, MaxAttempts: 25}
	}
	return jobs
}

// BenchmarkFetchFinish measures one worker round: claim 100 jobs, then
// complete them in one JobFinish. One op is 100 jobs, from a queue of
// 100,000. With kinds, the fetch filters on 4 kinds that include the
// jobs' kind; with kinds-behind, 100,000 jobs of another kind come first
// in the queue and the fetch asks only for the jobs' kind.
func BenchmarkFetchFinish(b *testing.B) {
	for _, bc := range []struct {
		name    string
		kinds   []string
		blocker bool
	}{
		{"all", nil, false},
		{"kinds", []string{"sms", "push", "email", "webhook"}, false},
		{"kinds-behind", []string{"email"}, true},
	} {
		b.Run(bc.name, func(b *testing.B) { benchFetchFinish(b, bc.kinds, bc.blocker) })
	}
}

func benchFetchFinish(b *testing.B, kinds []string, blocker bool) {
	ctx := context.Background()
	const batch, fill = 100, 100_000
	st := memstore.New()
	defer st.Close()
	jobs := benchJobs(1000)
	now := t0
	if blocker {
		other := benchJobs(1000)
		for _, j := range other {
			j.Kind, j.Priority = "report", 1
		}
		for range fill / len(other) {
			if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: other, Now: now}); err != nil {
				b.Fatal(err)
			}
		}
	}
	refill := func() {
		_, _ = st.JobPrune(ctx, &store.JobPruneParams{CompletedBefore: now.Add(time.Hour), Limit: fill})
		for range fill / len(jobs) {
			if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now}); err != nil {
				b.Fatal(err)
			}
		}
	}
	refill()
	outs := make([]*store.Report, batch)
	for i := range outs {
		outs[i] = new(store.Report)
	}
	left := fill
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if left < batch {
			b.StopTimer()
			refill()
			left = fill
			b.StartTimer()
		}
		rows, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Kinds: kinds, Limit: batch, Now: now, Lease: time.Minute, Worker: "w"}))
		if err != nil || len(rows) != batch {
			b.Fatalf("JobFetch() = %d rows, %v", len(rows), err)
		}
		for i, r := range rows {
			*outs[i] = store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted}
		}
		if _, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: outs, Now: now}); err != nil {
			b.Fatal(err)
		}
		left -= batch
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkEnqueueBatch measures JobEnqueueMany with 1,000 jobs per call.
func BenchmarkEnqueueBatch(b *testing.B) {
	ctx := context.Background()
	const batch = 1000
	jobs := benchJobs(batch)
	st := memstore.New()
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		if n == 200 { // keep the store at a realistic size
			b.StopTimer()
			_ = st.Close()
			st, n = memstore.New(), 0
			b.StartTimer()
		}
		if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: t0}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	_ = st.Close()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkEnqueueSingleParallel measures one-job enqueues from 8
// goroutines at once (4 per CPU on a 2-CPU machine).
func BenchmarkEnqueueSingleParallel(b *testing.B) {
	ctx := context.Background()
	var cur atomic.Pointer[memstore.Store]
	cur.Store(memstore.New())
	var total atomic.Int64
	b.SetParallelism(max(1, 8/testingProcs()))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		jobs := benchJobs(1)
		for pb.Next() {
			if total.Add(1)%200_000 == 0 {
				cur.Store(memstore.New()) // bound memory; the old store is dropped
			}
			if _, err := cur.Load().JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: t0}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkListPage measures one page of 50 from 100,000 jobs, filtered by
// a state that 1 job in 100 has.
func BenchmarkListPage(b *testing.B) {
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()
	jobs := benchJobs(1000)
	for range 100 {
		if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
	for id := int64(1); id <= 100_000; id += 100 {
		if _, err := st.JobCancel(ctx, &store.JobCancelParams{ID: id, Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("state", func(b *testing.B) {
		b.ReportAllocs()
		after := int64(0)
		for b.Loop() {
			rows, err := st.JobList(ctx, &store.JobListParams{State: store.JobStateCancelled, Limit: 50, AfterID: after})
			if err != nil {
				b.Fatal(err)
			}
			after = 0
			if len(rows) == 50 {
				after = rows[49].ID
			}
		}
	})
	b.Run("kind-none", func(b *testing.B) { // worst case: walks all 100,000
		b.ReportAllocs()
		for b.Loop() {
			if _, err := st.JobList(ctx, &store.JobListParams{Kind: "nope", Limit: 50}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkFetchFinishPartitioned is BenchmarkFetchFinish/all with every job
// in one of 100 partitions, under PartitionMaxRunning 1,000, plus one
// flooding partition of 100,000 jobs held at its limit of 1 running job.
func BenchmarkFetchFinishPartitioned(b *testing.B) {
	ctx := context.Background()
	const batch, fill = 100, 100_000
	st := memstore.New()
	defer st.Close()
	if _, err := st.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: "default", Settings: store.QueueSettings{PartitionMaxRunning: 1000}}); err != nil {
		b.Fatal(err)
	}
	now := t0
	flood := benchJobs(1000)
	for _, j := range flood {
		j.PartitionKey = "flood"
	}
	for range fill / len(flood) {
		if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: flood, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
	// Hold the flooding partition at a running limit of its own.
	if _, err := st.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: "default", Settings: store.QueueSettings{PartitionMaxRunning: 1}}); err != nil {
		b.Fatal(err)
	}
	if rows, _ := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 1, Now: now, Lease: time.Hour})); len(rows) != 1 {
		b.Fatal("could not saturate the flooding partition")
	}
	if _, err := st.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: "default", Settings: store.QueueSettings{PartitionMaxRunning: 1000}}); err != nil {
		b.Fatal(err)
	}
	jobs := benchJobs(1000)
	for i, j := range jobs {
		j.PartitionKey = fmt.Sprint("p", i%100)
	}
	refill := func() {
		_, _ = st.JobPrune(ctx, &store.JobPruneParams{CompletedBefore: now.Add(time.Hour), Limit: fill})
		for range fill / len(jobs) {
			if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now}); err != nil {
				b.Fatal(err)
			}
		}
	}
	refill()
	outs := make([]*store.Report, batch)
	for i := range outs {
		outs[i] = new(store.Report)
	}
	left := fill
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if left < batch {
			b.StopTimer()
			refill()
			left = fill
			b.StartTimer()
		}
		rows, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: batch, Now: now, Lease: time.Minute, Worker: "w"}))
		if err != nil || len(rows) == 0 {
			b.Fatalf("JobFetch() = %d rows, %v", len(rows), err)
		}
		for i, r := range rows {
			*outs[i] = store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted}
		}
		if _, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: outs[:len(rows)], Now: now}); err != nil {
			b.Fatal(err)
		}
		left -= len(rows)
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
}
