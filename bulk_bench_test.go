package sortie_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// bulkJobsEnv sets how many dead jobs BenchmarkJobsBulkRetry retries.
const bulkJobsEnv = "SORTIE_BENCH_BULK_JOBS"

// BenchmarkJobsBulkRetry times Client.JobsBulk retrying every dead job of
// a store holding SORTIE_BENCH_BULK_JOBS of them (default 1,000,000), on
// SQLite (default options: synchronous FULL) and, with a server,
// PostgreSQL. The dead jobs are made through the store (enqueued, claimed
// and failed with their one attempt, 1,000 a call) before the timer
// starts. It runs once, whatever b.N, and reports jobs/s and the seconds
// the whole retry took:
//
//	go test -run '^$' -bench JobsBulkRetry -benchtime 1x -timeout 30m .
func BenchmarkJobsBulkRetry(b *testing.B) {
	jobs := 1_000_000
	if v := os.Getenv(bulkJobsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("%s=%q: want a number of jobs, at least 1000", bulkJobsEnv, v)
		}
		jobs = n
	}
	b.Run("sqlite", func(b *testing.B) {
		st, err := sqlitestore.Open(filepath.Join(b.TempDir(), "bulk.db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		benchBulkRetry(b, st, jobs)
	})
	b.Run("postgres", func(b *testing.B) {
		url, schema := pgtest.URL(b), pgtest.Schema(b)
		st, err := pgstore.Open(context.Background(), url, &pgstore.Options{Schema: schema, Migrate: true})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		benchBulkRetry(b, st, jobs)
	})
}

// benchBulkRetry fills st with n dead jobs and times their bulk retry.
func benchBulkRetry(b *testing.B, st store.Store, n int) {
	ctx := context.Background()
	start := time.Now()
	fillDead(b, st, n)
	b.Logf("made %d dead jobs in %s", n, time.Since(start).Round(time.Second))
	c, err := sortie.NewClient(st, &sortie.Config{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	res, err := c.JobsBulk(ctx, sortie.BulkRetry, &sortie.JobSearch{JobListParams: sortie.JobListParams{State: sortie.JobStateDead}}, nil)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if res.Changed != n || len(res.Failed) != 0 {
		b.Fatalf("JobsBulk() changed %d jobs with %d failures, want %d and none", res.Changed, len(res.Failed), n)
	}
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(n)/secs, "jobs/s")
	b.ReportMetric(secs, "s/retry-all")
}

// fillDead makes n dead jobs in st, in queue "default": enqueued with one
// attempt, claimed and failed, 1,000 a call.
func fillDead(tb testing.TB, st store.Store, n int) {
	tb.Helper()
	ctx := context.Background()
	now := time.Now()
	for lo := 0; lo < n; lo += 1000 {
		batch := make([]*store.NewJob, min(1000, n-lo))
		for i := range batch {
			batch[i] = &store.NewJob{Kind: "bulk", Queue: "default", MaxAttempts: 1, Args: fmt.Appendf(nil, `{"n":%d}`, lo+i)}
		}
		if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: batch, Now: now}); err != nil {
			tb.Fatal(err)
		}
		got, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: len(batch), Now: now, Lease: time.Hour, Worker: "bench"}))
		if err != nil || len(got) != len(batch) {
			tb.Fatalf("JobFetch() claimed %d jobs, %v; want %d", len(got), err, len(batch))
		}
		reports := make([]*store.Report, len(got))
		for i, j := range got {
			reports[i] = &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportFailed,
				Error: &store.AttemptError{Message: "smtp: 550 mailbox unavailable"}}
		}
		if _, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: reports, Now: now}); err != nil {
			tb.Fatal(err)
		}
	}
}
