package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// benchmarkWorkload runs w on target once per iteration and reports the
// workload's own figures: jobs/s over the timed phases, and latency
// percentiles of the median run. ns/op is one whole run, untimed phases
// (preloading, checking) included; read jobs/s.
func benchmarkWorkload(b *testing.B, target bench.Target, w bench.Workload, opts *bench.Options) {
	b.Helper()
	var results []bench.Result
	var jobs, secs float64
	for b.Loop() {
		res, err := bench.Run(context.Background(), target, w, opts)
		if err != nil {
			b.Fatal(err)
		}
		results = append(results, res)
		jobs += float64(res.Jobs)
		secs += res.Seconds
	}
	b.ReportMetric(jobs/secs, "jobs/s")
	if m := bench.Median(results); m.LatencyOf != "" {
		b.ReportMetric(m.P50ms, "p50-ms")
		b.ReportMetric(m.P99ms, "p99-ms")
	}
}

func sqliteFull(b *testing.B) bench.Target { return bench.SQLite("", b.TempDir(), nil) }

func sqliteNormal(b *testing.B) bench.Target {
	return bench.SQLite("", b.TempDir(), &sqlitestore.Options{Synchronous: sqlitestore.SynchronousNormal})
}

func BenchmarkEnqueueSingleMemstore(b *testing.B) {
	benchmarkWorkload(b, bench.Memory(), bench.EnqueueSingle, &bench.Options{Jobs: 50_000})
}

func BenchmarkEnqueueBatchMemstore(b *testing.B) {
	benchmarkWorkload(b, bench.Memory(), bench.EnqueueBatch, &bench.Options{Jobs: 100_000})
}

func BenchmarkDrainMemstore(b *testing.B) {
	benchmarkWorkload(b, bench.Memory(), bench.Drain, &bench.Options{Jobs: 100_000})
}

func BenchmarkLatencyMemstore(b *testing.B) {
	benchmarkWorkload(b, bench.Memory(), bench.Latency, &bench.Options{Duration: time.Second})
}

func BenchmarkEnqueueSingleSQLiteFull(b *testing.B) {
	benchmarkWorkload(b, sqliteFull(b), bench.EnqueueSingle, &bench.Options{Jobs: 10_000})
}

func BenchmarkEnqueueSingleSQLiteNormal(b *testing.B) {
	benchmarkWorkload(b, sqliteNormal(b), bench.EnqueueSingle, &bench.Options{Jobs: 20_000})
}

func BenchmarkEnqueueBatchSQLiteFull(b *testing.B) {
	benchmarkWorkload(b, sqliteFull(b), bench.EnqueueBatch, &bench.Options{Jobs: 50_000})
}

func BenchmarkDrainSQLiteFull(b *testing.B) {
	benchmarkWorkload(b, sqliteFull(b), bench.Drain, &bench.Options{Jobs: 50_000})
}

func BenchmarkDrainSQLiteNormal(b *testing.B) {
	benchmarkWorkload(b, sqliteNormal(b), bench.Drain, &bench.Options{Jobs: 50_000})
}

func BenchmarkLatencySQLiteFull(b *testing.B) {
	benchmarkWorkload(b, sqliteFull(b), bench.Latency, &bench.Options{Duration: time.Second})
}

// postgres is a fresh schema per run on the test server
// (SORTIE_TEST_POSTGRES_URL; the benchmarks skip without it). To compare
// two commits: go test -run '^$' -bench Postgres -count 6 ./bench/ | benchstat.
func postgres(b *testing.B) bench.Target { return bench.Postgres(pgtest.URL(b), "") }

func BenchmarkEnqueueSinglePostgres(b *testing.B) {
	benchmarkWorkload(b, postgres(b), bench.EnqueueSingle, &bench.Options{Jobs: 20_000})
}

func BenchmarkEnqueueBatchPostgres(b *testing.B) {
	benchmarkWorkload(b, postgres(b), bench.EnqueueBatch, &bench.Options{Jobs: 50_000})
}

func BenchmarkDrainPostgres(b *testing.B) {
	benchmarkWorkload(b, postgres(b), bench.Drain, &bench.Options{Jobs: 50_000})
}

func BenchmarkLatencyPostgres(b *testing.B) {
	benchmarkWorkload(b, postgres(b), bench.Latency, &bench.Options{Duration: time.Second})
}
