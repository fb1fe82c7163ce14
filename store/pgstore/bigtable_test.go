package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// bigRowsEnv sets how many finished jobs TestBigTable loads. The default
// keeps it a few seconds inside `make test`; `make pg-bigtable` loads 10M
// (docs/scaling.md has the figures).
const bigRowsEnv = "SORTIE_PG_BIGTABLE_ROWS"

const (
	bigDefaultRows = 200_000
	bigChunk       = 1_000_000 // rows per INSERT statement of the load
	bigAvailable   = 10_000    // available jobs the fetch loop drains
	bigFetchLimit  = 10
	bigQueue       = "default" // the queue of the available jobs and of most finished ones
	bigWeek        = 7 * 24 * time.Hour
)

// bigClaimSQL is the claim of pgstore's claim_jobs (schemaV2 in
// schema.go) as a statement with parameters, to EXPLAIN from outside the
// function. Keep it in step with schema.go.
const bigClaimSQL = `UPDATE {s}.jobs j SET state = 'running', attempt = j.attempt + 1, attempted_at = $3,
		attempted_by = $4, lease_until = $5, claim_token = (SELECT nextval('{s}.claim_token_seq'))
	WHERE j.id = ANY(ARRAY(
		SELECT id FROM {s}.jobs
		WHERE state = 'available' AND queue = $1 AND ($6::text[] IS NULL OR kind = ANY($6::text[]))
		ORDER BY priority, run_at, id
		LIMIT $2
		FOR UPDATE SKIP LOCKED))
	RETURNING j.*`

// bigPinSQL sets, for the rest of a transaction, the settings claim_jobs
// runs under (its SET clauses, read from the catalog), except
// plan_cache_mode: the explains choose custom or generic plans themselves.
const bigPinSQL = `SELECT set_config(split_part(c, '=', 1), split_part(c, '=', 2), true)
	FROM pg_catalog.pg_proc p
	JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
	CROSS JOIN LATERAL unnest(p.proconfig) AS c
	WHERE n.nspname = $1 AND p.proname = 'claim_jobs' AND c NOT LIKE 'plan_cache_mode=%'`

// bigLoadSQL inserts the finished jobs $1 to $2 of $3 in one statement, and
// appends them to the count deltas as pgstore's own inserts do. Job i is dead when i%100 < 2,
// cancelled when i%100 < 5, completed otherwise; its queue is reports when
// i%7 == 6, mail when i%7 == 5, default otherwise (bigExpected repeats
// this); it finished at $4 - (1 - i/$3) weeks.
const bigLoadSQL = `WITH ins AS (INSERT INTO {s}.jobs (id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
		attempted_at, attempted_by, finalized_at, errors)
	SELECT nextval('{s}.job_id_seq'),
		CASE g.queue WHEN 'default' THEN 'email.send' WHEN 'mail' THEN 'email.digest' ELSE 'report.render' END,
		g.queue,
		convert_to(format('{"user_id":%s,"email":"user%s@example.com","template":"welcome","locale":"en-GB","token":"%s"}',
			g.i, g.i, md5(g.i::text)), 'UTF8'),
		g.state, 2, g.attempt, 25, g.fin - interval '4 seconds', g.fin - interval '5 seconds',
		g.fin - interval '1 second', 'worker-' || (g.i % 8), g.fin,
		CASE WHEN g.state <> 'completed' THEN jsonb_build_array(jsonb_build_object(
			'attempt', g.attempt, 'at', g.fin, 'message', 'smtp: 550 mailbox unavailable')) END
	FROM (
		SELECT i,
			CASE WHEN i % 100 < 2 THEN 'dead' WHEN i % 100 < 5 THEN 'cancelled' ELSE 'completed' END AS state,
			CASE WHEN i % 100 < 2 THEN 25 ELSE 1 END AS attempt,
			CASE i % 7 WHEN 6 THEN 'reports' WHEN 5 THEN 'mail' ELSE 'default' END AS queue,
			$4::timestamptz - make_interval(secs => 604800.0 * ($3::bigint - i) / $3::bigint) AS fin
		FROM generate_series($1::bigint, $2::bigint) AS i
	) g
	RETURNING queue, state)
	INSERT INTO {s}.job_count_deltas (queue, state, n) SELECT queue, state, count(*) FROM ins GROUP BY queue, state`

// bigExpected returns the counts bigLoadSQL makes for n jobs.
func bigExpected(n int) map[string]int64 {
	want := map[string]int64{}
	for i := 1; i <= n; i++ {
		state := "completed"
		switch {
		case i%100 < 2:
			state = "dead"
		case i%100 < 5:
			state = "cancelled"
		}
		queue := "default"
		switch i % 7 {
		case 6:
			queue = "reports"
		case 5:
			queue = "mail"
		}
		want[queue+"/"+state]++
	}
	return want
}

// bigPruned takes from want the oldest m completed jobs: loaded ones in
// load order (the fetch loop's finished last), as JobPrune deletes them.
func bigPruned(want map[string]int64, n, m int) {
	for i := 1; i <= n && m > 0; i++ {
		if i%100 < 5 {
			continue
		}
		queue := "default"
		switch i % 7 {
		case 6:
			queue = "reports"
		case 5:
			queue = "mail"
		}
		want[queue+"/completed"]--
		m--
	}
	want[bigQueue+"/completed"] -= int64(m)
}

// TestBigTable shows that fetch, counts, rescue and prune do not read the
// finished jobs of the table: on a schema holding SORTIE_PG_BIGTABLE_ROWS
// finished jobs (200,000 unless set) and on one holding none, the plans of
// their statements read the jobs table through its partial indexes, a
// bounded number of rows (EXPLAIN ANALYZE row counts), never by a
// sequential scan. The latencies of every operation are logged beside, as
// figures: the test asserts no speed.
func TestBigTable(t *testing.T) {
	t.Parallel()
	n := bigDefaultRows
	if v := os.Getenv(bigRowsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 10_000 {
			t.Fatalf("%s=%q: want at least 10000 rows", bigRowsEnv, v)
		}
	}
	url := pgtest.URL(t)
	now := time.Now().UTC().Truncate(time.Second)

	var version string
	conn := bigConn(t, url)
	if err := conn.QueryRow(t.Context(), `SHOW server_version`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL %s; %d finished rows (%s=%d to change)", version, n, bigRowsEnv, n)

	empty := bigRun(t, url, 0, now)
	full := bigRun(t, url, n, now)

	var b strings.Builder
	fmt.Fprintf(&b, "\n%-44s %14s %14s %7s\n", "figure", "0 finished", fmt.Sprintf("%d finished", n), "ratio")
	for _, f := range full {
		e := bigFind(empty, f.name)
		ratio := "-"
		if e > 0 {
			ratio = fmt.Sprintf("%.2fx", float64(f.d)/float64(e))
		}
		fmt.Fprintf(&b, "%-44s %14s %14s %7s\n", f.name, bigMS(e), bigMS(f.d), ratio)
	}
	t.Logf("latencies (ms):%s", b.String())

}

// bigFigure is one measured latency.
type bigFigure struct {
	name string
	d    time.Duration
}

func bigFind(figs []bigFigure, name string) time.Duration {
	for _, f := range figs {
		if f.name == name {
			return f.d
		}
	}
	return 0
}

// bigRun loads n finished jobs into a fresh schema, measures it and
// returns the figures.
func bigRun(t *testing.T, url string, n int, now time.Time) []bigFigure {
	t.Helper()
	ctx := t.Context()
	schema := pgtest.Schema(t)
	st, err := pgstore.Open(ctx, url, &pgstore.Options{Schema: schema, Migrate: true, MaxConns: 4})
	if err != nil {
		t.Fatalf("Open(schema %s) error: %v", schema, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	conn := bigConn(t, url)
	q := func(sql string) string { return strings.ReplaceAll(sql, "{s}", pgx.Identifier{schema}.Sanitize()) }
	tag := fmt.Sprintf("[%d finished]", n)

	// Load, in statements of bigChunk rows.
	start := time.Now()
	for lo := 1; lo <= n; lo += bigChunk {
		hi := min(lo+bigChunk-1, n)
		c := time.Now()
		if _, err := conn.Exec(ctx, q(bigLoadSQL), lo, hi, n, now); err != nil {
			t.Fatalf("load jobs %d to %d: %v", lo, hi, err)
		}
		if n > bigChunk {
			t.Logf("%s loaded jobs %d to %d in %v", tag, lo, hi, time.Since(c).Round(time.Millisecond))
		}
	}
	load := time.Since(start)
	start = time.Now()
	if _, err := conn.Exec(ctx, q(`VACUUM ANALYZE {s}.jobs`)); err != nil {
		t.Fatalf("VACUUM ANALYZE: %v", err)
	}
	vacuum := time.Since(start)
	// Start measuring without a checkpoint of the load in progress; it needs
	// superuser or pg_checkpoint, so go on without it.
	if _, err := conn.Exec(ctx, `CHECKPOINT`); err != nil {
		t.Logf("%s CHECKPOINT: %v (measuring anyway)", tag, err)
	}
	if n > 0 {
		t.Logf("%s load %v (%.0f rows/s), VACUUM ANALYZE %v", tag, load.Round(time.Millisecond),
			float64(n)/load.Seconds(), vacuum.Round(time.Millisecond))
	}
	bigSizes(t, conn, schema, tag)

	want := bigExpected(n)
	bigCheckCounts(t, st, want)
	var figs []bigFigure
	add := func(name string, d time.Duration) { figs = append(figs, bigFigure{name, d}) }

	// (a) JobCounts.
	add("JobCounts median (after load)", bigMedian(t, 20, func() error {
		_, err := st.JobCounts(ctx, &store.JobCountsParams{})
		return err
	}))

	// (b) Fetch and finish, with bigAvailable jobs enqueued.
	args := []byte(`{"user_id":123456789,"email":"user123456789@example.com","template":"welcome","locale":"en-GB"}`)
	for i := 0; i < bigAvailable; i += 1000 {
		jobs := make([]*store.NewJob, 1000)
		for k := range jobs {
			jobs[k] = &store.NewJob{Kind: "email.send", Queue: bigQueue, Args: args, Priority: 2, MaxAttempts: 25}
		}
		if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now}); err != nil {
			t.Fatalf("JobEnqueueMany() error: %v", err)
		}
	}
	want[bigQueue+"/available"] += bigAvailable
	bigExplain(t, conn, schema, tag, now, n > 0)
	lit := func(at time.Time) string { return "'" + at.Format(time.RFC3339Nano) + "'" }
	bigCheckPlans(t, conn, schema, tag, []bigPlanCheck{
		{name: "JobCounts", sql: pgstore.SQLCounts, args: []string{"NULL"}, maxRows: 0},
		{name: "JobFetch(10) claim", sql: bigClaimSQL, args: []string{"'" + bigQueue + "'", strconv.Itoa(bigFetchLimit),
			lit(now), "'explain'", lit(now.Add(time.Minute)), "NULL"}, maxRows: 4 * bigFetchLimit},
	})

	fetchParams := &store.JobFetchParams{Queue: bigQueue, Limit: bigFetchLimit, Now: now, Lease: time.Minute, Worker: "bigtable"}
	var fetches, finishes []time.Duration
	for range bigAvailable / bigFetchLimit {
		s := time.Now()
		jobs, err := store.FetchedJobs(st.JobFetch(ctx, fetchParams))
		fetches = append(fetches, time.Since(s))
		if err != nil {
			t.Fatalf("JobFetch() error: %v", err)
		}
		if len(jobs) != bigFetchLimit {
			t.Fatalf("JobFetch() returned %d jobs, want %d", len(jobs), bigFetchLimit)
		}
		outs := make([]*store.Report, len(jobs))
		for k, j := range jobs {
			outs[k] = &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted}
		}
		s = time.Now()
		res, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: outs, Now: now})
		finishes = append(finishes, time.Since(s))
		if err != nil {
			t.Fatalf("JobFinish() error: %v", err)
		}
		for k, r := range res {
			if !r.Applied {
				t.Fatalf("JobFinish() outcome of job %d not applied", jobs[k].ID)
			}
		}
	}
	want[bigQueue+"/available"] -= bigAvailable
	want[bigQueue+"/completed"] += bigAvailable
	add("JobFetch(10) p50", bigPercentile(fetches, 50))
	add("JobFetch(10) p99", bigPercentile(fetches, 99))
	add("JobFinish(10 completed) p50", bigPercentile(finishes, 50))
	add("JobFinish(10 completed) p99", bigPercentile(finishes, 99))
	counts := func() error {
		_, err := st.JobCounts(ctx, &store.JobCountsParams{})
		return err
	}
	// The loop's 2,000 statements left as many count deltas; the first
	// JobCounts folds them.
	add("JobCounts first after the loop (folds)", bigMedian(t, 1, counts))
	add("JobCounts median after the loop", bigMedian(t, 20, counts))

	// (c) The dead letters, among all the completed jobs.
	wantDead := min(50, int(want[bigQueue+"/dead"]+want["mail/dead"]+want["reports/dead"]))
	add("JobList(dead, 50) median", bigMedian(t, 20, func() error {
		jobs, err := st.JobList(ctx, &store.JobListParams{State: store.JobStateDead, Limit: 50})
		if err == nil && len(jobs) != wantDead {
			err = fmt.Errorf("JobList() returned %d jobs, want %d", len(jobs), wantDead)
		}
		return err
	}))

	// (d) Maintenance: rescue and prune.
	add("JobRescue (none expired) median", bigMedian(t, 20, func() error {
		n, err := st.JobRescue(ctx, &store.JobRescueParams{Now: now, Limit: 1000})
		if err == nil && n != 0 {
			err = fmt.Errorf("JobRescue() rescued %d jobs, want 0", n)
		}
		return err
	}))
	jobs := make([]*store.NewJob, bigFetchLimit)
	for k := range jobs {
		jobs[k] = &store.NewJob{Kind: "email.send", Queue: bigQueue, Args: args, Priority: 2, MaxAttempts: 25}
	}
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now}); err != nil {
		t.Fatalf("JobEnqueueMany() error: %v", err)
	}
	want[bigQueue+"/available"] += bigFetchLimit // rescued: available again
	// Each round claims the same bigFetchLimit jobs (the only ones
	// available in the queue) and rescues them once their leases ended.
	// The clock moves three minutes a round, so each rescue finds exactly
	// the leases of its own round. One rescue alone is one sample of a
	// loaded machine; the median of five is the figure.
	round := 0
	add("JobRescue (10 expired) median", bigMedianPrepared(t, 5, func() error {
		at := now.Add(time.Duration(round) * 3 * time.Minute)
		round++
		claim := *fetchParams
		claim.Now = at
		if got, err := store.FetchedJobs(st.JobFetch(ctx, &claim)); err != nil || len(got) != bigFetchLimit {
			return fmt.Errorf("JobFetch() = %d jobs, %v; want %d jobs", len(got), err, bigFetchLimit)
		}
		return nil
	}, func() error {
		at := now.Add(time.Duration(round-1)*3*time.Minute + 2*time.Minute)
		n, err := st.JobRescue(ctx, &store.JobRescueParams{Now: at, Limit: 1000})
		if err == nil && n != bigFetchLimit {
			err = fmt.Errorf("JobRescue() rescued %d jobs, want %d", n, bigFetchLimit)
		}
		return err
	}))
	old := now.Add(-bigWeek - time.Hour)
	bigCheckPlans(t, conn, schema, tag, []bigPlanCheck{
		{name: "JobRescue (none expired)", sql: pgstore.SQLExpired, args: []string{lit(now), "1000"}, maxRows: bigFetchLimit},
		{name: "JobPrune (prunes none)", sql: strings.Replace(pgstore.SQLPrune, "{state}", "completed", 1),
			args: []string{lit(old), "1000"}, maxRows: bigFetchLimit},
	})
	add("JobPrune (prunes none) median", bigMedian(t, 5, func() error {
		n, err := st.JobPrune(ctx, &store.JobPruneParams{CompletedBefore: old, CancelledBefore: old, DeadBefore: old, Limit: 1000})
		if err == nil && n != 0 {
			err = fmt.Errorf("JobPrune() deleted %d jobs, want 0", n)
		}
		return err
	}))
	add("JobPrune (prunes 1,000) median", bigMedian(t, 3, func() error {
		n, err := st.JobPrune(ctx, &store.JobPruneParams{CompletedBefore: now.Add(time.Second), Limit: 1000})
		if err == nil && n != 1000 {
			err = fmt.Errorf("JobPrune() deleted %d jobs, want 1000", n)
		}
		return err
	}))
	bigPruned(want, n, 3000)
	bigCheckCounts(t, st, want)
	return figs
}

// bigConn opens a connection for the test's own SQL.
func bigConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// bigCheckCounts checks that JobCounts returns exactly want.
func bigCheckCounts(t *testing.T, st store.Store, want map[string]int64) {
	t.Helper()
	counts, err := st.JobCounts(t.Context(), &store.JobCountsParams{})
	if err != nil {
		t.Fatalf("JobCounts() error: %v", err)
	}
	got := map[string]int64{}
	for _, c := range counts {
		got[c.Queue+"/"+string(c.State)] = c.Count
	}
	for k, v := range want {
		if v == 0 {
			delete(want, k)
		}
	}
	for k := range got {
		if got[k] != want[k] {
			t.Errorf("JobCounts() %s = %d, want %d", k, got[k], want[k])
		}
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("JobCounts() has no %s, want %d", k, want[k])
		}
	}
}

// bigSizes logs the size of the jobs table and of each of its indexes.
func bigSizes(t *testing.T, conn *pgx.Conn, schema, tag string) {
	t.Helper()
	ctx := t.Context()
	table := pgx.Identifier{schema, "jobs"}.Sanitize()
	var total, heap int64
	if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size($1::text::regclass), pg_relation_size($1::text::regclass)`,
		table).Scan(&total, &heap); err != nil {
		t.Fatalf("table size: %v", err)
	}
	rows, err := conn.Query(ctx, `SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = $1::text::regclass ORDER BY c.relname`, table)
	if err != nil {
		t.Fatalf("index sizes: %v", err)
	}
	var idx []string
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			t.Fatalf("index sizes: %v", err)
		}
		idx = append(idx, fmt.Sprintf("%s %s", name, bigMB(size)))
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("index sizes: %v", err)
	}
	t.Logf("%s jobs: total %s, heap %s; indexes: %s", tag, bigMB(total), bigMB(heap), strings.Join(idx, ", "))
}

// bigExplain logs the plans of the claim, custom (with the values) and
// generic (what claim_jobs plans once per connection), both under
// claim_jobs' planner settings and rolled back, and when check is set
// fails unless both read the jobs_fetch index.
func bigExplain(t *testing.T, conn *pgx.Conn, schema, tag string, now time.Time, check bool) {
	t.Helper()
	ctx := t.Context()
	claim := strings.ReplaceAll(bigClaimSQL, "{s}", pgx.Identifier{schema}.Sanitize())
	plans := map[string]string{}
	explain := func(name string, run func(tx pgx.Tx) (pgx.Rows, error)) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if tag, err := tx.Exec(ctx, bigPinSQL, schema); err != nil || tag.RowsAffected() < 5 {
			t.Fatalf("set claim_jobs' planner settings: %v (%d set, want at least 5)", err, tag.RowsAffected())
		}
		rows, err := run(tx)
		if err != nil {
			t.Fatalf("EXPLAIN claim (%s): %v", name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("EXPLAIN claim (%s): %v", name, err)
		}
		plans[name] = strings.Join(lines, "\n")
		t.Logf("%s EXPLAIN (ANALYZE, BUFFERS) claim, %s plan:\n%s", tag, name, plans[name])
	}
	explain("custom", func(tx pgx.Tx) (pgx.Rows, error) {
		return tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+claim,
			bigQueue, bigFetchLimit, now, "explain", now.Add(time.Minute), []string(nil))
	})
	explain("generic", func(tx pgx.Tx) (pgx.Rows, error) {
		for _, s := range []string{
			`DEALLOCATE ALL`,
			`PREPARE bigtable_claim AS ` + claim,
			`SET LOCAL plan_cache_mode = force_generic_plan`,
		} {
			if _, err := tx.Exec(ctx, s); err != nil {
				return nil, err
			}
		}
		// EXPLAIN EXECUTE takes no bind parameters: the values are literals.
		return tx.Query(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, BUFFERS) EXECUTE bigtable_claim('%s', %d, '%s', 'explain', '%s', NULL)`,
			bigQueue, bigFetchLimit, now.Format(time.RFC3339Nano), now.Add(time.Minute).Format(time.RFC3339Nano)))
	})
	if !check {
		return
	}
	for name, plan := range plans {
		if !strings.Contains(plan, "using jobs_fetch on jobs") {
			t.Errorf("%s plan of the claim does not read the jobs_fetch index:\n%s", name, plan)
		}
		if strings.Contains(plan, "Seq Scan on jobs") {
			t.Errorf("%s plan of the claim scans the whole jobs table:\n%s", name, plan)
		}
	}
}

// bigMedian runs op n times and returns the median latency.
func bigMedian(t *testing.T, n int, op func() error) time.Duration {
	t.Helper()
	return bigMedianPrepared(t, n, func() error { return nil }, op)
}

// bigMedianPrepared runs prepare (untimed) then op, n times, and returns
// op's median latency.
func bigMedianPrepared(t *testing.T, n int, prepare, op func() error) time.Duration {
	t.Helper()
	ds := make([]time.Duration, n)
	for i := range ds {
		if err := prepare(); err != nil {
			t.Fatal(err)
		}
		s := time.Now()
		err := op()
		ds[i] = time.Since(s)
		if err != nil {
			t.Fatal(err)
		}
	}
	return bigPercentile(ds, 50)
}

// bigPercentile returns the p-th percentile of ds (nearest rank).
func bigPercentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func bigMS(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func bigMB(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }

// bigPlanCheck is a statement whose plan must read few rows of the jobs
// table: its generic plan (what a connection keeps), under claim_jobs'
// planner settings, reads at most maxRows rows of jobs, and never by a
// sequential scan. Args are SQL literals for EXPLAIN EXECUTE.
type bigPlanCheck struct {
	name    string
	sql     string
	args    []string
	maxRows float64
}

// bigCheckPlans runs EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) of each check,
// rolled back, logs the plan and fails unless it reads jobs only through
// indexes and at most the check's rows.
func bigCheckPlans(t *testing.T, conn *pgx.Conn, schema, tag string, checks []bigPlanCheck) {
	t.Helper()
	ctx := t.Context()
	for _, c := range checks {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var plan []byte
		err = func() error {
			// The simple protocol: an earlier DEALLOCATE ALL emptied the
			// connection's statement cache behind pgx's back.
			simple := pgx.QueryExecModeSimpleProtocol
			for _, s := range []string{`PREPARE bigtable_check AS ` + strings.ReplaceAll(c.sql, "{s}", pgx.Identifier{schema}.Sanitize()),
				`SET LOCAL plan_cache_mode = force_generic_plan`} {
				if _, err := tx.Exec(ctx, s, simple); err != nil {
					return err
				}
			}
			defer func() { _, _ = conn.Exec(ctx, `DEALLOCATE bigtable_check`, simple) }()
			if _, err := tx.Exec(ctx, bigPinSQL, simple, schema); err != nil {
				return err
			}
			return tx.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE bigtable_check(%s)`,
				strings.Join(c.args, ", ")), simple).Scan(&plan)
		}()
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatalf("%s EXPLAIN %s: %v", tag, c.name, err)
		}
		var root []struct{ Plan bigPlanNode }
		if err := json.Unmarshal(plan, &root); err != nil || len(root) != 1 {
			t.Fatalf("%s EXPLAIN %s: %v (%d plans)", tag, c.name, err, len(root))
		}
		rows, seq := root[0].Plan.jobsRead()
		t.Logf("%s %s reads %.0f rows of jobs:\n%s", tag, c.name, rows, plan)
		if seq {
			t.Errorf("%s %s: the plan scans the whole jobs table", tag, c.name)
		}
		if rows > c.maxRows {
			t.Errorf("%s %s: the plan reads %.0f rows of jobs, want at most %.0f", tag, c.name, rows, c.maxRows)
		}
	}
}

// bigPlanNode is a node of an EXPLAIN (ANALYZE, FORMAT JSON) plan.
type bigPlanNode struct {
	NodeType       string        `json:"Node Type"`
	Relation       string        `json:"Relation Name"`
	ActualRows     float64       `json:"Actual Rows"`
	ActualLoops    float64       `json:"Actual Loops"`
	RemovedFilter  float64       `json:"Rows Removed by Filter"`
	RemovedRecheck float64       `json:"Rows Removed by Index Recheck"`
	Plans          []bigPlanNode `json:"Plans"`
}

// jobsRead returns the rows the scans of the jobs table under n read (the
// rows they returned and those their filters removed, over all loops), and
// whether one of them is a sequential scan.
func (n *bigPlanNode) jobsRead() (rows float64, seq bool) {
	if n.Relation == "jobs" && strings.HasSuffix(n.NodeType, "Scan") {
		rows = (n.ActualRows + n.RemovedFilter + n.RemovedRecheck) * max(n.ActualLoops, 1)
		seq = n.NodeType == "Seq Scan"
	}
	for i := range n.Plans {
		r, s := n.Plans[i].jobsRead()
		rows, seq = rows+r, seq || s
	}
	return rows, seq
}

// A short fetch reads its queue's next due time from the first entry of
// jobs_due: one row, however many jobs are scheduled. Read as min(), the
// planner aggregated every scheduled job of the queue instead, and every
// index entry the last vacuum had not removed yet.
func TestQueueStateReadsOneDueJob(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := t.Context()
	schema := pgtest.Schema(t)
	st, err := pgstore.Open(ctx, url, &pgstore.Options{Schema: schema, Migrate: true, MaxConns: 2})
	if err != nil {
		t.Fatalf("Open(schema %s) error: %v", schema, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	now := time.Now().UTC()
	jobs := make([]*store.NewJob, 2000)
	for i := range jobs {
		jobs[i] = &store.NewJob{Kind: "later", Queue: bigQueue, Priority: 2, MaxAttempts: 1,
			RunAt: now.Add(time.Hour + time.Duration(i)*time.Second)}
	}
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now}); err != nil {
		t.Fatalf("JobEnqueueMany() error: %v", err)
	}
	bigCheckPlans(t, bigConn(t, url), schema, "[2,000 scheduled]", []bigPlanCheck{
		{name: "JobFetch (short) queue state", sql: pgstore.SQLQueueState, args: []string{"'" + bigQueue + "'"}, maxRows: 1},
	})
}
