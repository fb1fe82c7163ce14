package sortie_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/redisstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// migrateT0 is the time of the source store's history: a whole number of
// microseconds, as every store keeps.
var migrateT0 = time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)

// fillSource gives st jobs in every state and the links between them, a
// configured and a paused queue, and a periodic slot:
//
//   - default: 20 jobs; 4 completed (2 with a result), 3 retrying, 2
//     running, 1 dead, 1 cancelled by an operator, the rest available,
//     with tags, meta and a partition key here and there;
//   - flow: a dead parent whose child and grandchild it cancelled, a
//     workflow whose second job waits for the first, a unique job
//     scheduled for later.
func fillSource(t *testing.T, st store.Store) {
	ctx := t.Context()
	now := migrateT0
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := st.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: "mail", Now: now, Settings: store.QueueSettings{
		MaxRunning: 5, RateLimit: 10, RatePeriod: time.Minute, MaxDepth: 1000, Overflow: store.OverflowDropOldest}})
	must(err)
	_, err = st.QueuePause(ctx, &store.QueuePauseParams{Queue: "reports", Paused: true, Now: now})
	must(err)
	_, err = st.PeriodicAdvance(ctx, &store.PeriodicAdvanceParams{Name: "nightly", To: now.Add(-6 * time.Hour), Now: now})
	must(err)

	var jobs []*store.NewJob
	for i := range 20 {
		j := &store.NewJob{Kind: "email", Queue: "default", Args: []byte(`{"to":"user` + string(rune('a'+i)) + `@example.com","n":` + strconv.Itoa(i) + `}`),
			Priority: 1 + i%4, MaxAttempts: 3}
		if i%3 == 0 {
			j.Tags, j.Meta = []string{"vip"}, []byte(`{"source":"signup"}`)
		}
		if i%5 == 0 {
			j.PartitionKey, j.Timeout = "acct-"+strconv.Itoa(i), 30*time.Second
		}
		jobs = append(jobs, j)
	}
	_, err = st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now})
	must(err)
	now = now.Add(time.Minute)
	res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 11, Now: now, Lease: time.Hour, Worker: "host-1/w"})
	must(err)
	rows := res.Jobs
	if len(rows) != 11 {
		t.Fatalf("claimed %d jobs, want 11", len(rows))
	}
	var reports []*store.Report
	for i, r := range rows[:8] {
		rep := &store.Report{ID: r.ID, ClaimToken: r.ClaimToken}
		switch {
		case i < 4:
			rep.Kind = store.ReportCompleted
			if i%2 == 0 {
				rep.Result = []byte(`{"sent":true,"id":"m-` + strconv.Itoa(i) + `"}`)
			}
		case i < 7:
			rep.Kind, rep.RunAt = store.ReportFailed, now.Add(time.Duration(i)*time.Minute)
			rep.Error = &store.AttemptError{Attempt: 1, At: now, Message: "smtp: 451 try again", Stack: "goroutine 7 [running]"}
		default:
			rep.Kind = store.ReportCancelled
			rep.Error = &store.AttemptError{Attempt: 1, At: now, Message: "address unknown"}
		}
		reports = append(reports, rep)
	}
	_, err = st.JobFinish(ctx, &store.JobFinishParams{Reports: reports, Now: now})
	must(err)
	avail, err := st.JobList(ctx, &store.JobListParams{Queue: "default", State: store.JobStateAvailable, Limit: 1})
	must(err)
	_, err = st.JobCancel(ctx, &store.JobCancelParams{ID: avail[0].ID, Now: now})
	must(err)
	// A flaky job that ends dead after its second attempt.
	flaky, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{
		{Kind: "flaky", Queue: "flaky", Args: []byte(`[1,2,3]`), Priority: 2, MaxAttempts: 2}}})
	must(err)
	for attempt := 1; attempt <= 2; attempt++ {
		now = now.Add(time.Minute)
		r := claim(t, st, "flaky", flaky[0].ID, now)
		_, err = st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: []*store.Report{{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportFailed,
			RunAt: now, Error: &store.AttemptError{Attempt: attempt, At: now, Message: "again"}}}})
		must(err)
	}

	now = now.Add(time.Minute)
	flow, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{
		{Kind: "parent", Queue: "flow", Args: []byte(`{}`), Priority: 2, MaxAttempts: 1},
		{Kind: "child", Queue: "flow", Args: []byte(`{"step":2}`), Priority: 2, MaxAttempts: 3, DependsOnIndex: []int{0}},
		{Kind: "child", Queue: "flow", Args: []byte(`{"step":3}`), Priority: 2, MaxAttempts: 3, DependsOnIndex: []int{1}},
	}})
	must(err)
	_, err = st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Workflow: true, Jobs: []*store.NewJob{
		{Kind: "step", Queue: "flow", Args: []byte(`{"w":1}`), Priority: 2, MaxAttempts: 3, RunAt: now.Add(time.Hour)},
		{Kind: "step", Queue: "flow", Args: []byte(`{"w":2}`), Priority: 2, MaxAttempts: 3, DependsOnIndex: []int{0}, IgnoreDepFailure: true},
		{Kind: "later", Queue: "mail", Args: []byte(`{"u":1}`), Priority: 3, MaxAttempts: 5, RunAt: now.Add(24 * time.Hour), UniqueKey: "digest:2026-11-02"},
	}})
	must(err)
	p := claim(t, st, "flow", flow[0].ID, now)
	_, err = st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: []*store.Report{{ID: p.ID, ClaimToken: p.ClaimToken, Kind: store.ReportFailed,
		RunAt: now, Error: &store.AttemptError{Attempt: 1, At: now, Message: "parent broke"}}}})
	must(err)
}

// claim claims job id of queue at now.
func claim(t *testing.T, st store.Store, queue string, id int64, now time.Time) *store.JobRow {
	t.Helper()
	res, err := st.JobFetch(t.Context(), &store.JobFetchParams{Queue: queue, Limit: 1, Now: now, Lease: time.Hour, Worker: "host-1/w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 1 || res.Jobs[0].ID != id {
		t.Fatalf("claimed %v from %s, want job %d", res.Jobs, queue, id)
	}
	return res.Jobs[0]
}

// export returns what Client.Export writes for st.
func export(t *testing.T, st store.Store) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := newClient(t, st, &sortie.Config{}).Export(t.Context(), &buf, nil); err != nil {
		t.Fatalf("Export: %v", err)
	}
	return buf.Bytes()
}

// importInto imports data into st.
func importInto(t *testing.T, st store.Store, data []byte, opts *sortie.ImportOpts) *sortie.ImportReport {
	t.Helper()
	rep, err := newClient(t, st, &sortie.Config{}).Import(t.Context(), bytes.NewReader(data), opts)
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	return rep
}

// exportedLines decodes an export after its header, each line to a
// generic value with its JSON texts (args, meta, result) normalized, so
// exports of two stores compare field by field.
func exportedLines(t *testing.T, data []byte) []any {
	t.Helper()
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	var out []any
	for _, l := range lines[1:] {
		var v any
		if err := json.Unmarshal(l, &v); err != nil {
			t.Fatalf("export line %q: %v", l, err)
		}
		out = append(out, v)
	}
	return out
}

// migrateStores are the stores of the round trip, in its order.
func migrateStores() []struct {
	name string
	open func(t *testing.T) store.Store
} {
	return []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"memory", func(t *testing.T) store.Store { return memstore.New() }},
		{"sqlite", func(t *testing.T) store.Store {
			st, err := sqlitestore.Open(filepath.Join(t.TempDir(), "sortie.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}},
		{"postgres", func(t *testing.T) store.Store {
			st, err := pgstore.Open(context.Background(), pgtest.URL(t), &pgstore.Options{Schema: pgtest.Schema(t), Migrate: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}},
		{"redis", func(t *testing.T) store.Store {
			st, err := redisstore.Open(context.Background(), redistest.StoreURL(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}},
	}
}

// A store exported and imported through every store kind, and back into
// memory, exports the same lines: every job in every state with every
// field, the queue settings and pause states, the periodic slot. The
// imported jobs go on working: a retry of the dead parent revives the
// jobs it cancelled.
func TestExportImportRoundTrip(t *testing.T) {
	t.Parallel()
	src := memstore.New()
	fillSource(t, src)
	first := export(t, src)
	data := first
	var last store.Store
	for _, s := range append(migrateStores()[1:], migrateStores()[0]) {
		st := s.open(t)
		rep := importInto(t, st, data, nil)
		if rep.Added != rep.Jobs || rep.Present != 0 || rep.Queues != 2 || rep.Periodic != 1 {
			t.Fatalf("import into %s: %+v, want every job added, 2 queues and 1 periodic slot", s.name, rep)
		}
		data = export(t, st)
		if d := cmp.Diff(exportedLines(t, first), exportedLines(t, data)); d != "" {
			t.Fatalf("export of %s after the import differs from the source's (-source +%s):\n%s", s.name, s.name, d)
		}
		last = st
	}
	c := newClient(t, last, &sortie.Config{})
	dead := findJob(t, c, "parent")
	if _, err := c.JobRetry(t.Context(), dead.ID); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, c, dead.ID+1); got.State != sortie.JobStateWaiting {
		t.Errorf("job %d, cancelled by the retried parent, is %s, want waiting again", dead.ID+1, got.State)
	}
}

// findJob returns the one job of kind.
func findJob(t *testing.T, c *sortie.Client, kind string) *sortie.JobRow {
	t.Helper()
	list, err := c.JobList(t.Context(), &sortie.JobListParams{Kind: kind, Limit: 10})
	if err != nil || len(list.Jobs) != 1 {
		t.Fatalf("JobList(kind %s) = %v, %v; want one job", kind, list, err)
	}
	return list.Jobs[0]
}

// Running an import again adds nothing, even after the imported jobs
// moved on; an import cut short resumes when run again.
func TestImportAgainAndResume(t *testing.T) {
	t.Parallel()
	src := memstore.New()
	fillSource(t, src)
	data := export(t, src)
	st := memstore.New()
	rep := importInto(t, st, data, nil)
	c := newClient(t, st, &sortie.Config{})
	if _, err := c.JobRetry(t.Context(), findJob(t, c, "parent").ID); err != nil {
		t.Fatal(err)
	}
	again := importInto(t, st, data, nil)
	if again.Added != 0 || again.Present != rep.Jobs {
		t.Errorf("second import: %+v, want nothing added and all %d present", again, rep.Jobs)
	}
	if got := findJob(t, c, "parent"); got.State != sortie.JobStateAvailable {
		t.Errorf("the retried parent is %s after the second import, want it left available", got.State)
	}

	// Cut short after the first batch of 5 jobs: run again, it completes.
	resumed := memstore.New()
	ctx, cancel := context.WithCancel(t.Context())
	_, err := newClient(t, resumed, &sortie.Config{}).Import(ctx, bytes.NewReader(data), &sortie.ImportOpts{Batch: 5, Progress: func(phase string, n int) {
		if phase == "write" {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("import cancelled after its first batch: error %v, want context.Canceled", err)
	}
	rep = importInto(t, resumed, data, &sortie.ImportOpts{Batch: 5})
	if rep.Present != 5 || rep.Added != rep.Jobs-5 {
		t.Errorf("resumed import: %+v, want 5 present and the rest added", rep)
	}
	if d := cmp.Diff(exportedLines(t, data), exportedLines(t, export(t, resumed))); d != "" {
		t.Errorf("store after a resumed import (-source +imported):\n%s", d)
	}
}

// A stream cut short, or with a bad line anywhere, is refused with the
// line number, and nothing is imported.
func TestImportRefusesBadStreams(t *testing.T) {
	t.Parallel()
	src := memstore.New()
	fillSource(t, src)
	data := export(t, src)
	lines := strings.SplitAfter(string(data), "\n")
	n := len(lines) - 1 // the last element is empty
	for _, c := range []struct {
		name, stream, want string
	}{
		{"truncated", strings.Join(lines[:n-1], ""), "line " + strconv.Itoa(n-1) + ": the stream ends without its end line"},
		{"cut mid-line", strings.Join(lines[:n-1], "")[:len(strings.Join(lines[:n-1], ""))-10], "line " + strconv.Itoa(n-1) + ":"},
		{"bad job", strings.Replace(string(data), `"kind":"child"`, `"kind":""`, 1), "kind is empty"},
		{"unknown field", strings.Replace(string(data), `"kind":"parent"`, `"kind":"parent","colour":"red"`, 1), "colour"},
		{"not an export", "hello\n", "line 1: not a sortie export"},
		{"newer version", strings.Replace(string(data), `"version":2`, `"version":3`, 1), "line 1: export version 3"},
		{"wrong count", strings.Replace(string(data), `"periodic":1`, `"periodic":2`, 1), "the end line counts"},
	} {
		st := memstore.New()
		_, err := newClient(t, st, &sortie.Config{}).Import(t.Context(), strings.NewReader(c.stream), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Import error %v, want one saying %q", c.name, err, c.want)
		}
		if rows, _ := st.JobList(t.Context(), &store.JobListParams{Limit: 10}); len(rows) != 0 {
			t.Errorf("%s: %d jobs imported from a refused stream, want none", c.name, len(rows))
		}
		if qs, _ := st.QueueList(t.Context(), &store.QueueListParams{}); len(qs) != 0 {
			t.Errorf("%s: %d queues configured from a refused stream, want none", c.name, len(qs))
		}
	}
}

// Jobs that collide with the store's own are reported, and nothing is
// imported; Skip leaves them (and their dependents) out; an ID offset
// imports everything next to the store's jobs, links followed.
func TestImportConflicts(t *testing.T) {
	t.Parallel()
	src := memstore.New()
	fillSource(t, src)
	data := export(t, src)
	total := bytes.Count(data, []byte(`{"job":`))

	target := func(t *testing.T) store.Store {
		st := memstore.New()
		// Job 1 becomes a different job, and the unique job's key is held.
		_, err := st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Now: migrateT0, Jobs: []*store.NewJob{
			{Kind: "mine", Queue: "default", Args: []byte(`{}`), Priority: 2, MaxAttempts: 3},
			{Kind: "mine", Queue: "mail", Args: []byte(`{}`), Priority: 2, MaxAttempts: 3, UniqueKey: "digest:2026-11-02"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	st := target(t)
	_, err := newClient(t, st, &sortie.Config{}).Import(t.Context(), bytes.NewReader(data), nil)
	var ce *sortie.ImportConflictError
	if !errors.As(err, &ce) || ce.Count != 3 {
		t.Fatalf("import into a store holding jobs 1 and 2: error %v, want an ImportConflictError of 3 jobs", err)
	}
	for _, want := range []string{"job 1: a different job has this ID", "job 2: a different job has this ID", "its unique key is held by pending job 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("conflict error %q does not say %q", err, want)
		}
	}
	if rows, _ := st.JobList(t.Context(), &store.JobListParams{Limit: 100}); len(rows) != 2 {
		t.Errorf("store holds %d jobs after a refused import, want its own 2", len(rows))
	}

	st = target(t)
	rep := importInto(t, st, data, &sortie.ImportOpts{Skip: true})
	if len(rep.Skipped) != 3 || rep.Added != total-3 {
		t.Errorf("import with Skip: %+v, want 3 skipped and %d added", rep, total-3)
	}

	st = target(t)
	rep = importInto(t, st, data, &sortie.ImportOpts{IDOffset: 1000, Skip: true})
	if rep.Added != total-1 || len(rep.Skipped) != 1 {
		t.Errorf("import with an offset: %+v, want %d added and the unique job skipped (its key stays held)", rep, total-1)
	}
	c := newClient(t, st, &sortie.Config{})
	parent := findJob(t, c, "parent")
	list, err := c.JobList(t.Context(), &sortie.JobListParams{Kind: "child", Limit: 10})
	if err != nil || len(list.Jobs) != 2 {
		t.Fatalf("JobList(child) = %v, %v", list, err)
	}
	child := list.Jobs[0]
	if parent.ID < 1000 || child.CancelledBy != parent.ID || !slices.Equal(child.DependsOn, []int64{parent.ID}) {
		t.Errorf("with offset 1000: parent %d, child %d depends on %v and was cancelled by %d; want the links moved with the IDs",
			parent.ID, child.ID, child.DependsOn, child.CancelledBy)
	}
}

// migrateJobsEnv sets how many jobs TestExportImportScale moves (make
// migrate-1m sets a million).
const migrateJobsEnv = "SORTIE_MIGRATE_JOBS"

// writeStream writes an export of n jobs as a store a week into
// production holds them: 90% completed with a result, 4% dead after three
// attempts, 2% cancelled, the rest available or scheduled, a tenth tagged,
// pending jobs with a unique key.
func writeStream(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintf(w, `{"format":"sortie-export","version":1,"exported_at":"%s"}`+"\n", migrateT0.Format(time.RFC3339Nano))
	ts := func(d time.Duration) string { return migrateT0.Add(d).Format(time.RFC3339Nano) }
	for i := 1; i <= n; i++ {
		at := time.Duration(i) * time.Millisecond
		fmt.Fprintf(w, `{"job":{"id":%d,"kind":"email.send","queue":"%s","args":{"user_id":%d,"template":"welcome"},`, i, []string{"default", "mail", "reports"}[i%3], i%10000)
		switch r := i % 100; {
		case r < 90:
			fmt.Fprintf(w, `"state":"completed","priority":2,"attempt":1,"max_attempts":25,"run_at":"%s","created_at":"%s","attempted_at":"%s","attempted_by":"host-1/%d","finalized_at":"%s","claim_token":%d,"result":{"ok":true}`,
				ts(at), ts(at), ts(at+time.Second), i%8, ts(at+2*time.Second), i)
		case r < 94:
			fmt.Fprintf(w, `"state":"dead","priority":2,"attempt":3,"max_attempts":3,"run_at":"%s","created_at":"%s","attempted_at":"%s","finalized_at":"%s","claim_token":%d,"errors":[{"attempt":1,"at":"%s","message":"smtp: 451"},{"attempt":2,"at":"%s","message":"smtp: 451"},{"attempt":3,"at":"%s","message":"smtp: 550 mailbox unavailable"}]`,
				ts(at), ts(at), ts(at+3*time.Second), ts(at+3*time.Second), i, ts(at+time.Second), ts(at+2*time.Second), ts(at+3*time.Second))
		case r < 96:
			fmt.Fprintf(w, `"state":"cancelled","priority":2,"attempt":0,"max_attempts":25,"run_at":"%s","created_at":"%s","finalized_at":"%s"`, ts(at), ts(at), ts(at+time.Second))
		case r < 98:
			fmt.Fprintf(w, `"state":"available","priority":2,"attempt":0,"max_attempts":25,"run_at":"%s","created_at":"%s","unique_key":"u-%d"`, ts(at), ts(at), i)
		default:
			fmt.Fprintf(w, `"state":"scheduled","priority":3,"attempt":0,"max_attempts":25,"run_at":"%s","created_at":"%s"`, ts(at+48*time.Hour), ts(at))
		}
		if i%10 == 0 {
			w.WriteString(`,"tags":["vip"]`)
		}
		w.WriteString("}}\n")
	}
	fmt.Fprintf(w, `{"end":{"queues":0,"periodic":0,"jobs":%d}}`+"\n", n)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

// Moving a store of many jobs: the stream is imported into SQLite,
// exported from it, imported into PostgreSQL and exported again, each
// step timed; every job arrives, counted by state. make migrate-1m runs
// it with a million jobs.
func TestExportImportScale(t *testing.T) {
	n := 5_000
	if s := os.Getenv(migrateJobsEnv); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of jobs", migrateJobsEnv, s)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "source.jsonl")
	writeStream(t, src, n)
	stores := migrateStores()
	sqlite, pg := stores[1].open(t), stores[2].open(t)
	step := func(name string, fn func() error) {
		t.Helper()
		start := time.Now()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d := time.Since(start)
		t.Logf("%-28s %8.1f s  %9.0f jobs/s", name, d.Seconds(), float64(n)/d.Seconds())
	}
	importFile := func(st store.Store, path string) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		rep, err := newClient(t, st, &sortie.Config{}).Import(t.Context(), f, &sortie.ImportOpts{Batch: 5000})
		if err == nil && rep.Added != n {
			err = fmt.Errorf("added %d jobs, want %d", rep.Added, n)
		}
		return err
	}
	exportFile := func(st store.Store, path string) error {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		res, err := newClient(t, st, &sortie.Config{}).Export(t.Context(), f, nil)
		if err == nil && res.Jobs != n {
			err = fmt.Errorf("exported %d jobs, want %d", res.Jobs, n)
		}
		return err
	}
	fromSQLite, fromPG := filepath.Join(dir, "sqlite.jsonl"), filepath.Join(dir, "pg.jsonl")
	step("import into SQLite", func() error { return importFile(sqlite, src) })
	step("export from SQLite", func() error { return exportFile(sqlite, fromSQLite) })
	step("import into PostgreSQL", func() error { return importFile(pg, fromSQLite) })
	step("export from PostgreSQL", func() error { return exportFile(pg, fromPG) })
	c1, err := sqlite.JobCounts(t.Context(), &store.JobCountsParams{})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := pg.JobCounts(t.Context(), &store.JobCountsParams{})
	if err != nil {
		t.Fatal(err)
	}
	sortCounts := func(c []store.QueueStateCount) {
		slices.SortFunc(c, func(a, b store.QueueStateCount) int {
			return strings.Compare(a.Queue+"/"+string(a.State), b.Queue+"/"+string(b.State))
		})
	}
	sortCounts(c1)
	sortCounts(c2)
	if d := cmp.Diff(c1, c2); d != "" {
		t.Errorf("job counts of PostgreSQL after the move (-SQLite +PostgreSQL):\n%s", d)
	}
}

// fillSteps gives st a job in each of the places durable steps leave one:
// a sleeping job with a recorded step, and a parent awaiting the
// children of its spawn step, one completed, one pending, one deleted
// before the export when deleteOne. It returns the parent's ID and its
// children's.
func fillSteps(t *testing.T, st store.Store, deleteOne bool) (parent int64, kids []int64) {
	ctx := t.Context()
	now := migrateT0
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{
		{Kind: "order", Queue: "orders", Args: []byte(`{"id":"o-1"}`), Priority: 2, MaxAttempts: 5},
		{Kind: "order", Queue: "orders", Args: []byte(`{"id":"o-2"}`), Priority: 2, MaxAttempts: 5},
	}})
	must(err)
	sleeper := claim(t, st, "orders", res[0].ID, now)
	_, err = st.StepRecord(ctx, &store.StepRecordParams{Now: now, Steps: []*store.StepRecord{
		{ID: sleeper.ID, ClaimToken: sleeper.ClaimToken, Name: "charge", Result: []byte(`{"charge":"ch_1"}`)}}})
	must(err)
	_, err = st.StepSleep(ctx, &store.StepSleepParams{ID: sleeper.ID, ClaimToken: sleeper.ClaimToken, Name: "cool-off",
		Until: now.Add(24 * time.Hour), Now: now})
	must(err)
	p := claim(t, st, "orders", res[1].ID, now)
	sp, err := st.StepSpawn(ctx, &store.StepSpawnParams{ID: p.ID, ClaimToken: p.ClaimToken, Name: "thumbs", CancelWithParent: true, Now: now,
		Jobs: []*store.NewJob{
			{Kind: "thumb", Queue: "thumbs", Args: []byte(`{"n":0}`), Priority: 2, MaxAttempts: 3},
			{Kind: "thumb", Queue: "thumbs", Args: []byte(`{"n":1}`), Priority: 2, MaxAttempts: 3},
			{Kind: "thumb", Queue: "thumbs", Args: []byte(`{"n":2}`), Priority: 2, MaxAttempts: 3},
		}})
	must(err)
	kids = sp.Children
	k := claim(t, st, "thumbs", kids[0], now)
	_, err = st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: []*store.Report{{ID: k.ID, ClaimToken: k.ClaimToken,
		Kind: store.ReportCompleted, Result: []byte(`"t-0"`)}}})
	must(err)
	_, err = st.StepAwait(ctx, &store.StepAwaitParams{ID: p.ID, ClaimToken: p.ClaimToken, Name: "thumbs", Now: now})
	must(err)
	if deleteOne {
		_, err = st.JobDelete(ctx, &store.JobDeleteParams{ID: kids[2], Now: now})
		must(err)
	}
	return p.ID, kids
}

// Steps travel with their jobs: exported and imported through the stores
// that keep them, in batches of one job (a parent and its children in
// different store calls), and back into memory, the export is the same;
// the awaiting parent still waits, and the last child's end releases it.
func TestExportImportStepsRoundTrip(t *testing.T) {
	t.Parallel()
	src := memstore.New()
	parent, kids := fillSteps(t, src, false)
	first := export(t, src)
	data := first
	var last store.Store
	for _, s := range append(migrateStores()[1:], migrateStores()[0]) {
		st := s.open(t)
		importInto(t, st, data, &sortie.ImportOpts{Batch: 1})
		data = export(t, st)
		if d := cmp.Diff(exportedLines(t, first), exportedLines(t, data)); d != "" {
			t.Fatalf("export of %s after the import differs from the source's (-source +%s):\n%s", s.name, s.name, d)
		}
		if row, err := st.JobGet(t.Context(), &store.JobGetParams{ID: parent}); err != nil || row.State != store.JobStateWaiting {
			t.Fatalf("parent in %s = %+v, %v; want waiting", s.name, row, err)
		}
		last = st
	}
	now := migrateT0.Add(time.Hour)
	for _, id := range kids[1:] {
		k := claim(t, last, "thumbs", id, now)
		if _, err := last.JobFinish(t.Context(), &store.JobFinishParams{Now: now, Reports: []*store.Report{{ID: k.ID, ClaimToken: k.ClaimToken,
			Kind: store.ReportCompleted}}}); err != nil {
			t.Fatal(err)
		}
	}
	if row, err := last.JobGet(t.Context(), &store.JobGetParams{ID: parent}); err != nil || row.State != store.JobStateAvailable {
		t.Errorf("parent after its last child completed = %+v, %v; want available", row, err)
	}
}

// A child deleted before the export is left out of its parent's spawn
// step, so the parent waits only for the children the new store holds;
// under ImportOpts.Skip, a child whose parent is skipped comes in as a job
// of its own.
func TestImportStepsWithoutDeletedChild(t *testing.T) {
	t.Parallel()
	src := memstore.New()
	parent, kids := fillSteps(t, src, true)
	st := memstore.New()
	importInto(t, st, export(t, src), &sortie.ImportOpts{Batch: 2})
	list, err := st.StepList(t.Context(), &store.StepListParams{ID: parent})
	if err != nil || len(list) != 1 || !slices.Equal(list[0].Children, kids[:2]) {
		t.Fatalf("imported spawn step = %+v, %v; want children %v", list, err, kids[:2])
	}
	now := migrateT0.Add(time.Hour)
	k := claim(t, st, "thumbs", kids[1], now)
	if _, err := st.JobFinish(t.Context(), &store.JobFinishParams{Now: now, Reports: []*store.Report{{ID: k.ID, ClaimToken: k.ClaimToken,
		Kind: store.ReportCompleted}}}); err != nil {
		t.Fatal(err)
	}
	if row, _ := st.JobGet(t.Context(), &store.JobGetParams{ID: parent}); row.State != store.JobStateAvailable {
		t.Errorf("parent after its last imported child completed is %s, want available", row.State)
	}

	// The parent's ID is taken in another store: skipped, its children
	// come in without it.
	other := memstore.New()
	if _, err := other.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Now: migrateT0, Jobs: []*store.NewJob{
		{Kind: "x", Queue: "x", Args: []byte(`1`)}, {Kind: "x", Queue: "x", Args: []byte(`2`)}}}); err != nil {
		t.Fatal(err)
	}
	rep := importInto(t, other, export(t, src), &sortie.ImportOpts{Skip: true})
	if len(rep.Skipped) != 2 {
		t.Fatalf("skipped %v, want the two jobs whose IDs are taken", rep.Skipped)
	}
	if c, err := other.JobGet(t.Context(), &store.JobGetParams{ID: kids[1]}); err != nil || c.ParentID != 0 {
		t.Errorf("child of the skipped parent = %+v, %v; want it with no parent", c, err)
	}
}
