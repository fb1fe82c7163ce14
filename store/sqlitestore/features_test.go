package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// schemaV1 is a frozen copy of the version 1 schema (sortie before the
// queue features), to create files the migration must bring up to date.
var schemaV1 = []string{
	`CREATE TABLE sortie_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID`,
	`CREATE TABLE jobs ` + jobTableV1,
	`CREATE TABLE finished_jobs ` + jobTableV1,
	`CREATE TABLE job_counts (queue TEXT NOT NULL, state TEXT NOT NULL, n INTEGER NOT NULL,
		PRIMARY KEY (queue, state)) WITHOUT ROWID`,
	`CREATE INDEX jobs_fetch ON jobs (queue, priority, run_at, id) WHERE state = 'available'`,
	`CREATE INDEX jobs_due ON jobs (queue, run_at) WHERE state IN ('scheduled', 'retrying')`,
	`CREATE INDEX jobs_lease ON jobs (lease_until) WHERE state = 'running'`,
	`CREATE UNIQUE INDEX jobs_unique_key ON jobs (unique_key) WHERE unique_key IS NOT NULL`,
	`CREATE INDEX finished_jobs_prune ON finished_jobs (state, finalized_at)`,
	`CREATE INDEX finished_jobs_list ON finished_jobs (state, id)`,
	`INSERT INTO sortie_meta (key, value) VALUES ('schema_version', 1), ('next_job_id', 1), ('next_claim_token', 1)`,
}

const jobTableV1 = `(
	id INTEGER PRIMARY KEY, kind TEXT NOT NULL, queue TEXT NOT NULL, args BLOB, state TEXT NOT NULL,
	priority INTEGER NOT NULL, attempt INTEGER NOT NULL, max_attempts INTEGER NOT NULL,
	run_at INTEGER NOT NULL, created_at INTEGER NOT NULL, attempted_at INTEGER, attempted_by TEXT,
	finalized_at INTEGER, lease_until INTEGER, claim_token INTEGER NOT NULL, unique_key TEXT,
	errors TEXT, tags TEXT, meta BLOB, timeout INTEGER NOT NULL)`

// createV1 writes a version 1 database at path holding two available jobs
// (one with a unique key) and a completed one, as sortie 1 would have.
func createV1(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	at := t0.UnixMicro()
	stmts := append(schemaV1,
		fmt.Sprintf(`INSERT INTO jobs (id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at, claim_token, unique_key, timeout)
			VALUES (1, 'mail', 'default', '{"to":"a"}', 'available', 2, 0, 25, %d, %d, 0, NULL, 0),
			       (2, 'mail', 'default', '{"to":"b"}', 'available', 2, 0, 25, %d, %d, 0, 'k', 0)`, at, at, at, at),
		fmt.Sprintf(`INSERT INTO finished_jobs (id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at, finalized_at, claim_token, errors, timeout)
			VALUES (3, 'mail', 'default', '{"to":"c"}', 'completed', 2, 1, 25, %d, %d, %d, 1, '[]', 0)`, at, at, at),
		`INSERT INTO job_counts VALUES ('default', 'available', 2), ('default', 'completed', 1)`,
		`UPDATE sortie_meta SET value = 4 WHERE key = 'next_job_id'`,
		`UPDATE sortie_meta SET value = 2 WHERE key = 'next_claim_token'`,
	)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// A version 1 file opens, migrates to the current version (through 2 and
// 3), and keeps its jobs,
// counts, unique keys and sequences.
func TestMigrateFromV1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v1.db")
	createV1(t, path)
	st := openAt(t, path, nil)

	var version int
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`SELECT value FROM sortie_meta WHERE key = 'schema_version'`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != sqlitestore.SchemaVersion {
		t.Errorf("schema version after open = %d, want %d", version, sqlitestore.SchemaVersion)
	}
	done, err := st.JobGet(ctx, &store.JobGetParams{ID: 3})
	if err != nil || done.State != store.JobStateCompleted || string(done.Args) != `{"to":"c"}` {
		t.Fatalf("JobGet(3) = %+v, %v; want the completed job", done, err)
	}
	if got := countOf(t, st, "default", store.JobStateAvailable); got != 2 {
		t.Errorf("JobCounts(available) = %d, want 2", got)
	}
	res := enqueue(t, st, &store.NewJob{Kind: "mail", Queue: "default", UniqueKey: "k"}, newJob("new"))
	if !res[0].Duplicate || res[0].ID != 2 {
		t.Errorf("enqueue with the v1 job's unique key = %+v, want a duplicate of job 2", res[0])
	}
	if res[1].ID != 4 {
		t.Errorf("first new ID after migration = %d, want 4", res[1].ID)
	}
	jobs, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 10, Now: t0, Lease: time.Minute}))
	if err != nil || len(jobs) != 3 {
		t.Fatalf("JobFetch() = %d jobs, %v; want 3", len(jobs), err)
	}
	ids := map[int64]bool{}
	for _, j := range jobs {
		ids[j.ID] = true
		if j.ClaimToken != 2 {
			t.Errorf("job %d claimed with token %d, want 2 (the v1 sequence)", j.ID, j.ClaimToken)
		}
	}
	if !ids[1] || !ids[2] || !ids[4] {
		t.Errorf("JobFetch() claimed %v, want jobs 1, 2 and 4", ids)
	}
	out, err := st.JobFinish(ctx, &store.JobFinishParams{Now: t0, Reports: []*store.Report{
		{ID: 1, ClaimToken: 2, Kind: store.ReportCompleted, Result: []byte(`{"ok":true}`)},
	}})
	if err != nil || !out[0].Applied {
		t.Fatalf("JobFinish() = %+v, %v", out, err)
	}
	j, err := st.JobGet(ctx, &store.JobGetParams{ID: 1})
	if err != nil || string(j.Result) != `{"ok":true}` {
		t.Errorf("JobGet(1).Result = %q, %v; want the recorded result", j.Result, err)
	}
}

// A version 2 file (where jobs_fetch_partition held every available job)
// migrates to version 3 and fetches its keyed and unkeyed jobs in one
// (priority, RunAt, ID) order.
func TestMigrateFromV2(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v2.db")
	createV1(t, path)
	at := t0.UnixMicro()
	stmts := append(sqlitestore.Migration(1),
		`UPDATE sortie_meta SET value = 2 WHERE key = 'schema_version'`,
		fmt.Sprintf(`INSERT INTO jobs (id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at, claim_token, timeout, partition_key)
			VALUES (4, 'mail', 'default', '{}', 'available', 1, 0, 25, %d, %d, 0, 0, 'tenant'),
			       (5, 'mail', 'default', '{}', 'available', 3, 0, 25, %d, %d, 0, 0, NULL)`, at, at, at, at),
		`UPDATE job_counts SET n = 4 WHERE queue = 'default' AND state = 'available'`,
		`UPDATE sortie_meta SET value = 6 WHERE key = 'next_job_id'`,
	)
	for _, q := range stmts {
		rawExec(t, path, q)
	}
	st := openAt(t, path, nil)

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version, keyed int
	if err := db.QueryRow(`SELECT value FROM sortie_meta WHERE key = 'schema_version'`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != sqlitestore.SchemaVersion {
		t.Errorf("schema version after open = %d, want %d", version, sqlitestore.SchemaVersion)
	}
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'jobs_fetch_keyed'`).Scan(&keyed); err != nil || keyed != 1 {
		t.Errorf("index jobs_fetch_keyed: %d, %v; want it created", keyed, err)
	}
	var got []int64
	for _, limit := range []int{1, 2, 5} {
		jobs, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: limit, Now: t0, Lease: time.Minute}))
		if err != nil {
			t.Fatalf("JobFetch() error: %v", err)
		}
		for _, j := range jobs {
			got = append(got, j.ID)
		}
	}
	if fmt.Sprint(got) != "[4 1 2 5]" {
		t.Errorf("JobFetch() order after migration = %v, want [4 1 2 5]", got)
	}
}

// A queue without partition limits fetches its jobs with and without a
// partition key in one (priority, RunAt, ID) order, whatever the limit and
// with a kind filter, though they sit in different indexes.
func TestFetchKeyedAndUnkeyed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, kinds := range [][]string{nil, {"a"}} {
		st := openTemp(t, nil)
		var batch []*store.NewJob
		for i := range 40 {
			j := &store.NewJob{Kind: "a", Queue: "q", Priority: 1 + i%3, MaxAttempts: 5}
			if i%4 == 0 {
				j.Kind = "b"
			}
			if i%2 == 0 {
				j.PartitionKey = fmt.Sprintf("t%d", i%5)
			}
			batch = append(batch, j)
		}
		res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: batch, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		var want []int64
		for p := 1; p <= 3; p++ {
			for i, j := range batch {
				if j.Priority == p && (kinds == nil || j.Kind == "a") {
					want = append(want, res[i].ID)
				}
			}
		}
		var got []int64
		for limit := 1; ; limit = limit%4 + 1 {
			jobs, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "q", Kinds: kinds, Limit: limit, Now: t0, Lease: time.Minute}))
			if err != nil {
				t.Fatalf("JobFetch() error: %v", err)
			}
			if len(jobs) == 0 {
				break
			}
			for _, j := range jobs {
				got = append(got, j.ID)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("JobFetch(kinds %v) order = %v, want %v", kinds, got, want)
		}
	}
}

// enqueueMany enqueues n jobs made by mk in batches of 1,000.
func enqueueMany(t testing.TB, st store.Store, n int, mk func(i int) *store.NewJob) {
	t.Helper()
	for i := 0; i < n; i += 1000 {
		batch := make([]*store.NewJob, 0, 1000)
		for k := i; k < min(n, i+1000); k++ {
			batch = append(batch, mk(k))
		}
		if _, err := st.JobEnqueueMany(context.Background(), &store.JobEnqueueManyParams{Jobs: batch, Now: t0}); err != nil {
			t.Fatalf("JobEnqueueMany() error: %v", err)
		}
	}
}

func fetchQ(t testing.TB, st store.Store, queue string, limit int, now time.Time) []*store.JobRow {
	t.Helper()
	jobs, err := store.FetchedJobs(st.JobFetch(context.Background(), &store.JobFetchParams{Queue: queue, Limit: limit, Now: now, Lease: time.Hour}))
	if err != nil {
		t.Fatalf("JobFetch(%s) error: %v", queue, err)
	}
	return jobs
}

func byPartition(jobs []*store.JobRow) map[string]int {
	m := map[string]int{}
	for _, j := range jobs {
		m[j.PartitionKey]++
	}
	return m
}

// One tenant with a huge backlog cannot starve another: with 100,000 jobs
// of the saturated tenant ahead of the small one, each fetch claims the
// small tenant's jobs. (How long it takes is measured by the benchmarks'
// FetchPartitionBacklog, never asserted.)
func TestPartitionFairnessBigBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTemp(t, &sqlitestore.Options{Synchronous: sqlitestore.SynchronousNormal})
	if _, err := st.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: "q", Now: t0,
		Settings: store.QueueSettings{PartitionMaxRunning: 2}}); err != nil {
		t.Fatal(err)
	}
	big := 100_000
	if raceEnabled {
		big = 20_000
	}
	enqueueMany(t, st, big, func(int) *store.NewJob {
		return &store.NewJob{Kind: "k", Queue: "q", PartitionKey: "A", Priority: 1}
	})
	enqueueMany(t, st, 10, func(int) *store.NewJob {
		return &store.NewJob{Kind: "k", Queue: "q", PartitionKey: "B", Priority: 2}
	})
	got := fetchQ(t, st, "q", 10, t0)
	if m := byPartition(got); m["A"] != 2 || m["B"] != 2 || len(got) != 4 {
		t.Fatalf("first fetch of 10 took %v, want A:2 B:2", m)
	}
	var took []time.Duration
	for round := range 4 {
		// Finish B's two; B's next two start while A stays saturated.
		var outs []*store.Report
		for _, j := range got {
			if j.PartitionKey == "B" {
				outs = append(outs, &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted})
			}
		}
		if _, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: outs, Now: t0}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got = fetchQ(t, st, "q", 10, t0)
		took = append(took, time.Since(start))
		if m := byPartition(got); m["A"] != 0 || m["B"] != 2 {
			t.Fatalf("round %d: fetch with A saturated took %v, want B:2 only", round, m)
		}
	}
	best := took[0]
	for _, d := range took {
		best = min(best, d)
	}
	t.Logf("fetch with %d jobs of a saturated partition queued: %v (best of %v)", big, best, took)
}

// Two Store instances on one file (two processes) share one exact sliding
// window: the rate holds across them, and JobNextRunAt says when the window
// next allows a start.
func TestRateWindowTwoStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sortie.db")
	a, b := openAt(t, path, nil), openAt(t, path, nil)
	enqueueMany(t, a, 20, func(int) *store.NewJob { return &store.NewJob{Kind: "k", Queue: "q"} })
	// b reads the settings a writes: b's writer cached the queue's absence.
	if got := fetchQ(t, b, "q", 1, t0); len(got) != 1 {
		t.Fatalf("fetch before any limit = %d jobs, want 1", len(got))
	}
	if _, err := a.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: "q", Now: t0,
		Settings: store.QueueSettings{RateLimit: 3, RatePeriod: 10 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		st   store.Store
		at   time.Duration
		want int
	}{
		{a, 0, 3}, // the window holds starts after the limit was set only
		{b, time.Second, 0},
		{a, 9999 * time.Millisecond, 0},
		{b, 10 * time.Second, 3}, // the window is (now-10s, now]: t0's starts left it
		{a, 15 * time.Second, 0},
		{b, 20 * time.Second, 3},
	}
	for i, s := range steps {
		if got := fetchQ(t, s.st, "q", 5, t0.Add(s.at)); len(got) != s.want {
			t.Errorf("step %d at +%v: fetch = %d jobs, want %d", i, s.at, len(got), s.want)
		}
	}
	res, err := b.JobFetch(ctx, &store.JobFetchParams{Queue: "q", Limit: 5, Now: t0.Add(21 * time.Second), Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(30 * time.Second); len(res.Jobs) != 0 || !res.NextAt.Equal(want) {
		t.Errorf("JobFetch while rate limited = %d jobs, NextAt %v; want none, %v", len(res.Jobs), res.NextAt, want)
	}
}

// A failure cascades down a dependency graph (naming each dependency), stops
// at IgnoreDepFailure, and a completion releases its dependents and wakes
// the queue.
func TestDependencyCascade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTemp(t, nil)
	w, err := st.QueueWatch(ctx, &store.QueueWatchParams{Queue: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: t0, Workflow: true, Jobs: []*store.NewJob{
		{Kind: "a", Queue: "default", MaxAttempts: 1},
		{Kind: "b", Queue: "default", DependsOnIndex: []int{0}},
		{Kind: "c", Queue: "default", DependsOnIndex: []int{1}},
		{Kind: "d", Queue: "default", DependsOnIndex: []int{0}, IgnoreDepFailure: true},
		{Kind: "e", Queue: "default", DependsOnIndex: []int{2, 3}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []store.JobState{store.JobStateAvailable, store.JobStateWaiting, store.JobStateWaiting, store.JobStateWaiting, store.JobStateWaiting} {
		if res[i].State != want {
			t.Errorf("job %d enqueued %s, want %s", i, res[i].State, want)
		}
	}
	if got := countOf(t, st, "default", store.JobStateWaiting); got != 4 {
		t.Errorf("JobCounts(waiting) = %d, want 4", got)
	}
	<-w.C
	jobs := fetchQ(t, st, "default", 10, t0)
	if len(jobs) != 1 || jobs[0].ID != res[0].ID {
		t.Fatalf("fetch = %d jobs, want only job a", len(jobs))
	}
	if _, err := st.JobFinish(ctx, &store.JobFinishParams{Now: t0, Reports: []*store.Report{{ID: jobs[0].ID,
		ClaimToken: jobs[0].ClaimToken, Kind: store.ReportFailed, Error: &store.AttemptError{Message: "boom"}}}}); err != nil {
		t.Fatal(err)
	}
	get := func(i int) *store.JobRow {
		j, err := st.JobGet(ctx, &store.JobGetParams{ID: res[i].ID})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	for _, c := range []struct {
		i       int
		state   store.JobState
		mention int64
	}{{1, store.JobStateCancelled, res[0].ID}, {2, store.JobStateCancelled, res[1].ID}, {3, store.JobStateAvailable, 0}, {4, store.JobStateCancelled, res[2].ID}} {
		j := get(c.i)
		if j.State != c.state {
			t.Errorf("job %s after a died = %s, want %s", j.Kind, j.State, c.state)
		}
		if j.WorkflowID != res[0].ID {
			t.Errorf("job %s WorkflowID = %d, want %d", j.Kind, j.WorkflowID, res[0].ID)
		}
		if c.mention != 0 {
			want := fmt.Sprintf("dependency job %d ended", c.mention)
			if len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Message, want) || j.FinalizedAt.IsZero() {
				t.Errorf("job %s errors = %+v, want one naming %q", j.Kind, j.Errors, want)
			}
		}
	}
	select {
	case <-w.C:
	case <-time.After(5 * time.Second):
		t.Fatal("no QueueWatch signal after a dependent was released")
	}
	// A completion releases a dependent (scheduled when its RunAt is later).
	later := t0.Add(time.Hour)
	res2, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: t0, Jobs: []*store.NewJob{
		{Kind: "f", Queue: "default", DependsOn: []int64{res[3].ID}, RunAt: later},
	}})
	if err != nil || res2[0].State != store.JobStateWaiting {
		t.Fatalf("enqueue f = %+v, %v; want waiting", res2, err)
	}
	d := fetchQ(t, st, "default", 10, t0)
	if len(d) != 1 {
		t.Fatalf("fetch = %d jobs, want d", len(d))
	}
	if _, err := st.JobFinish(ctx, &store.JobFinishParams{Now: t0, Reports: []*store.Report{{ID: d[0].ID,
		ClaimToken: d[0].ClaimToken, Kind: store.ReportCompleted}}}); err != nil {
		t.Fatal(err)
	}
	f, err := st.JobGet(ctx, &store.JobGetParams{ID: res2[0].ID})
	if err != nil || f.State != store.JobStateScheduled || len(f.DependsOn) != 1 {
		t.Errorf("f after d completed = %+v, %v; want scheduled with DependsOn [d]", f, err)
	}
	if got := countOf(t, st, "default", store.JobStateWaiting); got != 0 {
		t.Errorf("JobCounts(waiting) = %d, want 0", got)
	}
	// An unknown dependency fails the whole batch.
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: t0, Jobs: []*store.NewJob{
		newJob("ok"), {Kind: "g", Queue: "default", DependsOn: []int64{999999}},
	}}); err == nil {
		t.Error("enqueue with an unknown dependency succeeded, want an error")
	}
	if n := len(listAll(t, st)); n != 6 {
		t.Errorf("%d jobs after the failed batch, want 6", n)
	}
}

// JobCounts answers from counters with a million rows (issue 3, item 11):
// its statements read the job_counts table alone, never the jobs, and the
// counts are right. The rows are written with one INSERT ... SELECT, the
// way a long-running store accumulates finished jobs, then counted; the
// time it takes is logged as a figure, never asserted.
func TestCountsMillionRows(t *testing.T) {
	t.Parallel()
	n := 1_000_000
	if raceEnabled {
		n = 100_000
	}
	path := filepath.Join(t.TempDir(), "sortie.db")
	st := openAt(t, path, nil)
	enqueue(t, st, newJob("seed")) // a job through the store, so counters exist
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	at := t0.UnixMicro()
	rawExec(t, path, fmt.Sprintf(`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < %d)
		INSERT INTO finished_jobs (id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at, finalized_at, claim_token, timeout)
		SELECT 1000 + x, 'k', CASE x %% 4 WHEN 0 THEN 'mail' ELSE 'default' END, '{}', CASE x %% 10 WHEN 0 THEN 'dead' ELSE 'completed' END,
			2, 1, 1, %d, %d, %d, x, 0 FROM c`, n, at, at, at))
	rawExec(t, path, `INSERT INTO job_counts (queue, state, n) SELECT queue, state, count(*) FROM finished_jobs GROUP BY queue, state
		ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n`)
	st = openAt(t, path, nil)
	ctx := context.Background()
	best := time.Hour
	var total int64
	for range 20 {
		start := time.Now()
		cs, err := st.JobCounts(ctx, &store.JobCountsParams{})
		best = min(best, time.Since(start))
		if err != nil {
			t.Fatal(err)
		}
		total = 0
		for _, c := range cs {
			total += c.Count
		}
	}
	if total != int64(n)+1 {
		t.Errorf("JobCounts total = %d, want %d", total, n+1)
	}
	t.Logf("JobCounts with %d rows: %v", n+1, best)
	for _, c := range []struct {
		q    string
		args []any
	}{{sqlitestore.SQLCounts, nil}, {sqlitestore.SQLCountsQueue, []any{"default"}}} {
		q := c.q
		for _, step := range rawPlan(t, path, q, c.args...) {
			if !strings.HasSuffix(step, " job_counts") && !strings.Contains(step, " job_counts ") {
				t.Errorf("JobCounts statement %q reads more than the counters: plan step %q", q, step)
			}
		}
	}
}

// rawPlan returns the steps of SQLite's EXPLAIN QUERY PLAN of q with args
// on the database at path.
func rawPlan(t *testing.T, path, q string, args ...any) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN %s: %v", q, err)
	}
	defer rows.Close()
	var steps []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(steps) == 0 {
		t.Fatalf("EXPLAIN QUERY PLAN %s: no steps", q)
	}
	return steps
}
