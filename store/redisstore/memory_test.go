package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// BenchmarkQueuedJobMemory reports how much Redis's used_memory grows per
// queued job: SORTIE_BENCH_MEMORY_JOBS jobs (default 1,000,000) of sortie
// bench's shape (kind sortie_bench, args {"s":seq}) enqueued in batches
// of 1,000 into one queue of an empty server of its own, and never run.
// The same figure of the Redis peers is peerbench's memory workload
// (bench/peers). It runs once, whatever b.N:
//
//	go test -run '^$' -bench QueuedJobMemory -benchtime 1x ./store/redisstore/
func BenchmarkQueuedJobMemory(b *testing.B) {
	jobs := 1_000_000
	if v := os.Getenv("SORTIE_BENCH_MEMORY_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("SORTIE_BENCH_MEMORY_JOBS=%q: want a number of jobs, at least 1000", v)
		}
		jobs = n
	}
	srv := redistest.StartServer(b, &redistest.ServerOptions{})
	ctx := context.Background()
	opts, _, err := redisstore.ParseURL(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	st, err := redisstore.Open(ctx, srv.URL, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	before := redistest.InfoInt(b, rdb, "memory", "used_memory")
	now := time.Now()
	b.ResetTimer()
	for lo := 0; lo < jobs; lo += 1000 {
		batch := make([]*store.NewJob, min(1000, jobs-lo))
		for i := range batch {
			batch[i] = &store.NewJob{Kind: "sortie_bench", Queue: "default", Args: fmt.Appendf(nil, `{"s":%d}`, lo+i)}
		}
		if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: batch}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after := redistest.InfoInt(b, rdb, "memory", "used_memory")
	b.ReportMetric(float64(after-before)/float64(jobs), "bytes/job")
	b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
}
