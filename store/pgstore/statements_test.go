package pgstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// statementCounter is a pgx tracer counting the statements sent to the
// server (queries, and each query of a batch).
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// countedStore returns a store on a fresh schema whose pool counts its
// statements in the returned counter.
func countedStore(t *testing.T) (*pgstore.Store, *statementCounter) {
	t.Helper()
	ctx := t.Context()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := pgstore.New(ctx, pool, &pgstore.Options{Schema: schema, Migrate: true, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, counter
}

// A fetch from a rate-limited queue (and one also capped by MaxRunning)
// takes a bounded, small number of statements, next due time included:
// whether it claims its limit, fewer, or nothing because the window is
// full.
func TestRateLimitedFetchStatements(t *testing.T) {
	t.Parallel()
	const maxStatements = 4
	st, counter := countedStore(t)
	ctx := t.Context()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	settings := store.QueueSettings{RateLimit: 3, RatePeriod: time.Minute, MaxRunning: 10}
	if _, err := st.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: "limited", Settings: settings, Now: now}); err != nil {
		t.Fatal(err)
	}
	var jobs []*store.NewJob
	for range 5 {
		jobs = append(jobs, &store.NewJob{Kind: "k", Queue: "limited", RunAt: now})
	}
	jobs = append(jobs, &store.NewJob{Kind: "k", Queue: "limited", RunAt: now.Add(time.Hour)})
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now}); err != nil {
		t.Fatal(err)
	}
	free := now.Add(time.Minute) // a period after the first starts
	for i, tt := range []struct {
		limit      int
		wantJobs   int
		wantNextAt time.Time
	}{
		{limit: 2, wantJobs: 2},                   // claims its limit
		{limit: 5, wantJobs: 1, wantNextAt: free}, // the window allows one more: a short fetch
		{limit: 5, wantJobs: 0, wantNextAt: free}, // the window is full
	} {
		before := counter.n.Load()
		res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "limited", Limit: tt.limit, Now: now.Add(time.Duration(i) * time.Second), Lease: time.Minute, Worker: "w"})
		if err != nil {
			t.Fatal(err)
		}
		n := counter.n.Load() - before
		if len(res.Jobs) != tt.wantJobs || !res.NextAt.Equal(tt.wantNextAt) {
			t.Fatalf("fetch %d: JobFetch() returned %d jobs, NextAt %v; want %d, %v", i, len(res.Jobs), res.NextAt, tt.wantJobs, tt.wantNextAt)
		}
		if n > maxStatements {
			t.Errorf("fetch %d (limit %d, %d jobs): %d statements, want at most %d", i, tt.limit, tt.wantJobs, n, maxStatements)
		}
		t.Logf("fetch %d (limit %d, %d jobs): %d statements", i, tt.limit, tt.wantJobs, n)
	}
}

// A heartbeat, progress included, is one statement however many leases it
// extends.
func TestHeartbeatStatements(t *testing.T) {
	t.Parallel()
	st, counter := countedStore(t)
	ctx := t.Context()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	jobs := []*store.NewJob{{Kind: "k", Queue: "q"}, {Kind: "k", Queue: "q"}, {Kind: "k", Queue: "q"}}
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now}); err != nil {
		t.Fatal(err)
	}
	rows, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "q", Limit: 3, Now: now, Lease: time.Minute, Worker: "w"}))
	if err != nil || len(rows) != 3 {
		t.Fatalf("JobFetch() = %d jobs, %v; want 3", len(rows), err)
	}
	refs := make([]store.LeaseRef, len(rows))
	for i, r := range rows {
		refs[i] = store.LeaseRef{ID: r.ID, ClaimToken: r.ClaimToken}
	}
	before := counter.n.Load()
	res, err := st.LeaseExtend(ctx, &store.LeaseExtendParams{Leases: refs, Now: now, Lease: time.Minute,
		Progress: map[store.LeaseRef]float64{refs[0]: 40, refs[2]: 60}})
	if err != nil || !res[0].Held || !res[1].Held || !res[2].Held {
		t.Fatalf("LeaseExtend() = %+v, %v; want three held", res, err)
	}
	if n := counter.n.Load() - before; n != 1 {
		t.Errorf("a heartbeat of 3 leases, 2 with progress: %d statements, want 1", n)
	}
	for i, want := range []float64{40, 0, 60} {
		row, err := st.JobGet(ctx, &store.JobGetParams{ID: refs[i].ID})
		if err != nil || row.Progress != want {
			t.Errorf("job %d after the heartbeat: Progress %v, %v; want %v", refs[i].ID, row.Progress, err, want)
		}
	}
}

// A fetch from a queue with partition limits takes a bounded, small number
// of statements, next due time included, however many partitions have
// work: whether it claims from every partition or all are at their limit.
func TestPartitionLimitedFetchStatements(t *testing.T) {
	t.Parallel()
	const maxStatements = 4
	for _, partitions := range []int{1, 3, 20} {
		t.Run(fmt.Sprintf("%d partitions", partitions), func(t *testing.T) {
			t.Parallel()
			st, counter := countedStore(t)
			ctx := t.Context()
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			settings := store.QueueSettings{PartitionMaxRunning: 1, PartitionRateLimit: 5, PartitionRatePeriod: time.Minute, MaxRunning: 100}
			if _, err := st.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: "fair", Settings: settings, Now: now}); err != nil {
				t.Fatal(err)
			}
			var jobs []*store.NewJob
			for i := range 3 * partitions {
				jobs = append(jobs, &store.NewJob{Kind: "k", Queue: "fair", PartitionKey: fmt.Sprintf("p%d", i%partitions), RunAt: now})
			}
			if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now}); err != nil {
				t.Fatal(err)
			}
			for i, want := range []int{partitions, 0} { // one of each partition, then all at their limit
				before := counter.n.Load()
				res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "fair", Limit: 100, Now: now, Lease: time.Minute, Worker: "w"})
				if err != nil {
					t.Fatal(err)
				}
				n := counter.n.Load() - before
				if len(res.Jobs) != want {
					t.Fatalf("fetch %d: JobFetch() returned %d jobs, want %d", i, len(res.Jobs), want)
				}
				if n > maxStatements {
					t.Errorf("fetch %d (%d partitions, %d jobs): %d statements, want at most %d", i, partitions, want, n, maxStatements)
				}
				t.Logf("fetch %d (%d partitions, %d jobs): %d statements", i, partitions, want, n)
			}
		})
	}
}
