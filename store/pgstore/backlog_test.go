package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

const (
	backlogJobs  = 300_000
	backlogFetch = 100
	// backlogMaxRows is the most rows of the jobs table a claim of
	// backlogFetch jobs, or their finish, may read: an index read of the
	// backlog's head and a primary-key lookup per job. A plan that sorts
	// or hashes the whole backlog reads all of it.
	backlogMaxRows = 4 * backlogFetch
)

// A fetch from a large backlog reads the head of the queue, and a finish
// touches only its own jobs, whatever the planner's statistics said when
// the connection first planned them: here the statements are first planned
// on an almost empty table (statistics say
// nothing; a sort of every available job looks free), and planned again
// after ANALYZE of a 200,000-job backlog (a generic LIMIT looks like a
// tenth of the table, and a hash join over it looks cheap). Either plan,
// kept for the connection's life, made every fetch cost as much as the
// backlog, and a drain of N jobs cost N². The rows read are counted
// (pg_stat_xact_user_tables) on a connection of the test's own that
// planned claim_jobs and finish_jobs on the empty table too; the store's
// latencies are logged as figures, never asserted.
func TestFetchFromLargeBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	// Two connections, both used before the load, so the fetches after
	// it run on connections that planned the claim on an empty table.
	st := openStore(t, pgtest.URL(t), &pgstore.Options{Schema: schema, Migrate: true, MaxConns: 2, DisableListen: true})
	fetch := func() ([]*store.JobRow, error) {
		now := time.Now()
		return store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: backlogFetch, Worker: "w", Now: now, Lease: time.Minute}))
	}
	warm := make(chan error, 2)
	for range 2 {
		go func() {
			for range 10 {
				warm1 := &store.JobEnqueueManyParams{Jobs: []*store.NewJob{{Kind: "k", Queue: "default", Priority: 2, MaxAttempts: 25}}, Now: time.Now()}
				if _, err := st.JobEnqueueMany(ctx, warm1); err != nil {
					warm <- err
					return
				}
				got, err := fetch()
				if err != nil {
					warm <- err
					return
				}
				for _, j := range got {
					o := &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted}
					if _, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: []*store.Report{o}, Now: time.Now()}); err != nil {
						warm <- err
						return
					}
				}
			}
			warm <- nil
		}()
	}
	for range 2 {
		if err := <-warm; err != nil {
			t.Fatal(err)
		}
	}

	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	backlogReads(t, conn, schema) // plans the functions on the empty table
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, kind, queue, state, priority, max_attempts, run_at, created_at)
		SELECT nextval($1::regclass), 'k', 'default', 'available', 2, 25, now() - g * interval '1 microsecond', now()
		FROM generate_series(1, %d) AS g`, jobs, backlogJobs), pgx.Identifier{schema, "job_id_seq"}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	claimed := map[int64]bool{}
	measure := func(when string) {
		t.Helper()
		ds, fs := make([]time.Duration, 20), make([]time.Duration, 20)
		for i := range ds {
			start := time.Now()
			got, err := fetch()
			ds[i] = time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			outcomes := make([]*store.Report, len(got))
			for k, j := range got {
				outcomes[k] = &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted}
			}
			start = time.Now()
			applied, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: outcomes, Now: time.Now()})
			fs[i] = time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			for k, r := range applied {
				if !r.Applied {
					t.Fatalf("%s: outcome of job %d not applied", when, outcomes[k].ID)
				}
			}
			if len(got) != backlogFetch {
				t.Fatalf("%s: fetch %d claimed %d jobs, want %d", when, i, len(got), backlogFetch)
			}
			for _, j := range got {
				if claimed[j.ID] {
					t.Fatalf("%s: job %d claimed twice", when, j.ID)
				}
				claimed[j.ID] = true
			}
		}
		best, fbest := slices.Min(ds), slices.Min(fs)
		t.Logf("%s: fetch of %d from %d available jobs: median %v, fastest %v; finish of %d: median %v, fastest %v", when,
			backlogFetch, backlogJobs, bigPercentile(ds, 50), best, backlogFetch, bigPercentile(fs, 50), fbest)
		claim, finish := backlogReads(t, conn, schema)
		t.Logf("%s: a claim of %d read %d rows of jobs, their finish %d", when, backlogFetch, claim, finish)
		if claim > backlogMaxRows {
			t.Errorf("%s: a claim of %d from %d available jobs read %d rows of jobs, want at most %d (a plan that reads the whole backlog?)",
				when, backlogFetch, backlogJobs, claim, backlogMaxRows)
		}
		if finish > backlogMaxRows {
			t.Errorf("%s: a finish of %d jobs read %d rows of jobs, want at most %d (a plan that reads the whole table?)",
				when, backlogFetch, finish, backlogMaxRows)
		}
	}
	measure("planned on an empty table")
	if _, err := conn.Exec(ctx, "ANALYZE "+jobs); err != nil {
		t.Fatal(err)
	}
	measure("after ANALYZE")
}

// backlogReads claims up to backlogFetch jobs of the default queue with
// claim_jobs on conn, then completes them with finish_jobs, in a
// transaction it rolls back, and returns how many rows of the jobs table
// each read: heap rows fetched through an index, and rows read by a
// sequential scan (pg_stat_xact_user_tables, before and after each).
func backlogReads(t *testing.T, conn *pgx.Conn, schema string) (claim, finish int64) {
	t.Helper()
	ctx := t.Context()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	q := func(sql string) string { return strings.ReplaceAll(sql, "{s}", pgx.Identifier{schema}.Sanitize()) }
	read := func() int64 {
		t.Helper()
		var n int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
			FROM pg_stat_xact_user_tables WHERE schemaname = $1 AND relname = 'jobs'`, schema).Scan(&n); err != nil {
			t.Fatalf("read table statistics: %v", err)
		}
		return n
	}
	start := read()
	rows, err := tx.Query(ctx, q(`SELECT id, claim_token FROM {s}.claim_jobs('default', $1, now(), 'backlog',
		now() + interval '1 minute', NULL, 'backlog')`), backlogFetch)
	if err != nil {
		t.Fatalf("claim_jobs: %v", err)
	}
	var ids, tokens []int64
	for rows.Next() {
		var id, token int64
		if err := rows.Scan(&id, &token); err != nil {
			t.Fatalf("claim_jobs: %v", err)
		}
		ids, tokens = append(ids, id), append(tokens, token)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("claim_jobs: %v", err)
	}
	claimed := read()
	kinds := make([]int16, len(ids))
	for i := range kinds {
		kinds[i] = int16(store.ReportCompleted)
	}
	if _, err := tx.Exec(ctx, q(`SELECT count(*) FROM {s}.finish_jobs($1, $2, $3, $4, $5, $6, now(), false, 'backlog')`),
		ids, tokens, kinds, make([]*time.Time, len(ids)), make([]*string, len(ids)), make([][]byte, len(ids))); err != nil {
		t.Fatalf("finish_jobs: %v", err)
	}
	return claimed - start, read() - claimed
}
