package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// adminStore is a database the admin commands are tested on: the flags that
// name it, and a handle of the test's own on it, to set jobs up and check
// what the commands did.
type adminStore struct {
	flags []string
	st    store.Store
}

// sqliteAdminStore is a SQLite file made by sortie migrate.
func sqliteAdminStore(t *testing.T) adminStore {
	t.Helper()
	db := filepath.Join(t.TempDir(), "jobs.db")
	if code, _, stderr := run(t, "migrate", "--store", db); code != exitOK {
		t.Fatalf("migrate: exit status %d: %s", code, stderr)
	}
	st, err := sqlitestore.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return adminStore{flags: []string{"--store", db}, st: st}
}

// postgresAdminStore is a schema on the test server made by sortie migrate.
func postgresAdminStore(t *testing.T) adminStore {
	t.Helper()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	if code, _, stderr := run(t, "migrate", "--store", url, "--schema", schema); code != exitOK {
		t.Fatalf("migrate: exit status %d: %s", code, stderr)
	}
	st, err := pgstore.Open(context.Background(), url, &pgstore.Options{Schema: schema, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return adminStore{flags: []string{"--store", url, "--schema", schema}, st: st}
}

// cmd runs an admin command on a's database; the store flags go after the
// command's own arguments, as people often type them.
func (a adminStore) cmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return run(t, append(args, a.flags...)...)
}

// ok runs a command that must succeed and say nothing on stderr.
func (a adminStore) ok(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := a.cmd(t, args...)
	if code != exitOK || stderr != "" {
		t.Fatalf("sortie %q: exit status %d, stderr %q; want 0 and nothing", args, code, stderr)
	}
	return stdout
}

func (a adminStore) get(t *testing.T, id int64) *store.JobRow {
	t.Helper()
	row, err := a.st.JobGet(context.Background(), &store.JobGetParams{ID: id})
	if err != nil {
		t.Fatalf("JobGet(%d): %v", id, err)
	}
	return row
}

// enqueued returns the ID that enqueue printed.
func enqueued(t *testing.T, stdout string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^enqueued job (\d+)\n$`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("enqueue printed %q, want \"enqueued job ID\"", stdout)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	return id
}

// claim fetches the one available job of queue, which must be id.
func (a adminStore) claim(t *testing.T, queue string, id int64) *store.JobRow {
	t.Helper()
	jobs, err := store.FetchedJobs(a.st.JobFetch(context.Background(), &store.JobFetchParams{Queue: queue, Limit: 1, Worker: "test-worker",
		Now: time.Now(), Lease: time.Hour}))
	if err != nil || len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("JobFetch(%s) = %v, %v; want job %d", queue, jobs, err, id)
	}
	return jobs[0]
}

// onAdminStores runs test on a SQLite file, a PostgreSQL schema and a
// Redis key prefix, as parallel subtests.
func onAdminStores(t *testing.T, test func(*testing.T, adminStore)) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) adminStore{"sqlite": sqliteAdminStore, "postgres": postgresAdminStore,
		"redis": redisAdminStore} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, open(t))
		})
	}
}

func TestAdminCommands(t *testing.T) { onAdminStores(t, testAdminCommands) }

// testAdminCommands walks an operator's session: enqueue, find the dead
// job and its error, retry it, cancel a running job, delete, pause and
// resume, page through everything.
func testAdminCommands(t *testing.T, a adminStore) {
	ctx := context.Background()

	// enqueue sets every option it is given.
	welcome := enqueued(t, a.ok(t, "enqueue", "--kind", "email.send", "--args", `{"to": "ada@example.com"}`, "--queue", "mail",
		"--priority", "1", "--max-attempts", "1", "--tag", "welcome", "--tag", "signup", "--meta", `{"by":"ops"}`, "--timeout", "30s"))
	row := a.get(t, welcome)
	if row.Kind != "email.send" || row.Queue != "mail" || row.Priority != 1 || row.MaxAttempts != 1 || row.State != store.JobStateAvailable ||
		!slices.Equal(row.Tags, []string{"welcome", "signup"}) || row.Timeout != 30*time.Second || !jsonEqual(row.Args, `{"to":"ada@example.com"}`) ||
		!jsonEqual(row.Meta, `{"by":"ops"}`) {
		t.Errorf("enqueued job = %+v, want the options given", row)
	}
	report := enqueued(t, a.ok(t, "enqueue", "--kind", "report.daily", "--run-in", "1h", "--unique-key", "daily-2026-11-22"))
	if row := a.get(t, report); row.State != store.JobStateScheduled || row.Queue != "default" || row.Priority != 2 || row.MaxAttempts != 25 {
		t.Errorf("job enqueued with defaults and --run-in = %+v, want scheduled in default, priority 2, 25 attempts", row)
	}
	if out := a.ok(t, "enqueue", "--kind", "report.daily", "--unique-key", "daily-2026-11-22"); out != fmt.Sprintf("not enqueued: job %d holds unique key \"daily-2026-11-22\"\n", report) {
		t.Errorf("duplicate enqueue printed %q, want the holder's ID", out)
	}
	long := enqueued(t, a.ok(t, "enqueue", "--kind", "video.encode", "--queue", "media"))

	// The welcome email dies on its one attempt; the encode is running.
	claimed := a.claim(t, "mail", welcome)
	_, err := a.st.JobFinish(ctx, &store.JobFinishParams{Now: time.Now(), Reports: []*store.Report{{ID: welcome, ClaimToken: claimed.ClaimToken,
		Kind: store.ReportFailed, Error: &store.AttemptError{Message: "smtp: 550 mailbox unavailable\nsecond line"}}}})
	if err != nil {
		t.Fatal(err)
	}
	a.claim(t, "media", long)

	// The dead letter, found by state, with its error.
	var dead jobjson.Page
	decode(t, a.ok(t, "jobs", "--state", "dead", "--json"), &dead)
	if len(dead.Jobs) != 1 || dead.Jobs[0].ID != welcome || len(dead.Jobs[0].Errors) != 1 ||
		dead.Jobs[0].Errors[0].Message != "smtp: 550 mailbox unavailable\nsecond line" || dead.NextAfter != 0 {
		t.Fatalf("jobs --state dead --json = %+v, want job %d alone with its error", dead, welcome)
	}
	table := a.ok(t, "jobs", "--state", "dead")
	if !strings.Contains(table, "smtp: 550 mailbox unavailable …") || !strings.Contains(table, "1/1") {
		t.Errorf("jobs --state dead:\n%s\nwant the job's last error on one line and its attempts 1/1", table)
	}
	shown := a.ok(t, "jobs", strconv.FormatInt(welcome, 10))
	for _, want := range []string{`(?m)^state: +dead$`, `(?m)^args: +\{"to":"ada@example.com"\}$`, `(?m)^tags: +welcome, signup$`,
		`(?m)^error, attempt 1 at [0-9-]+ [0-9:.]+Z: smtp: 550 mailbox unavailable\n  second line$`} {
		if !regexp.MustCompile(want).MatchString(shown) {
			t.Errorf("jobs %d:\n%s\nwant it to match %s", welcome, shown, want)
		}
	}

	// Retry gives the dead job one more attempt.
	if out := a.ok(t, "retry", strconv.FormatInt(welcome, 10)); out != fmt.Sprintf("job %d: now available\n", welcome) {
		t.Errorf("retry printed %q", out)
	}
	if row := a.get(t, welcome); row.State != store.JobStateAvailable || row.MaxAttempts != 2 || len(row.Errors) != 1 {
		t.Errorf("after retry: %s, max attempts %d, %d errors; want available, 2, the error kept", row.State, row.MaxAttempts, len(row.Errors))
	}

	// Cancel asks the running job to stop; an unknown ID fails alone.
	code, stdout, stderr := a.cmd(t, "cancel", strconv.FormatInt(long, 10), "999999")
	if code != exitError || stdout != fmt.Sprintf("job %d: cancel requested: its worker stops it at its next heartbeat\n", long) ||
		!strings.Contains(stderr, "999999") || !strings.Contains(stderr, "not found") {
		t.Errorf("cancel running and unknown: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if row := a.get(t, long); row.State != store.JobStateRunning || !row.CancelRequested {
		t.Errorf("cancelled running job: %s, cancel requested %v; want running, true", row.State, row.CancelRequested)
	}
	if code, _, stderr := a.cmd(t, "delete", strconv.FormatInt(long, 10)); code != exitError || !strings.Contains(stderr, store.ErrJobRunning.Error()) {
		t.Errorf("delete running job: exit status %d, stderr %q; want 1 and %q", code, stderr, store.ErrJobRunning)
	}
	if out := a.ok(t, "delete", strconv.FormatInt(report, 10)); out != fmt.Sprintf("job %d: deleted (it was scheduled)\n", report) {
		t.Errorf("delete printed %q", out)
	}
	if _, err := a.st.JobGet(ctx, &store.JobGetParams{ID: report}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted job: JobGet error %v, want ErrNotFound", err)
	}

	// Pause and resume, seen in queues.
	if out := a.ok(t, "pause", "mail", "media"); out != "queue mail: paused\nqueue media: paused\n" {
		t.Errorf("pause printed %q", out)
	}
	var listing struct{ Queues []jobjson.Queue }
	decode(t, a.ok(t, "queues", "--json"), &listing)
	queues := listing.Queues
	want := []jobjson.Queue{
		{Name: "mail", Paused: true, Counts: map[string]int64{"available": 1}},
		{Name: "media", Paused: true, Counts: map[string]int64{"running": 1}},
	}
	if len(queues) != len(want) {
		t.Fatalf("queues --json = %+v, want %+v", queues, want)
	}
	for i := range want {
		if queues[i].Name != want[i].Name || queues[i].Paused != want[i].Paused || !maps.Equal(queues[i].Counts, want[i].Counts) {
			t.Errorf("queue %d = %+v, want %+v", i, queues[i], want[i])
		}
	}
	a.ok(t, "resume", "mail")
	if out := a.ok(t, "queues"); !regexp.MustCompile(`(?m)^mail +no +0 +0 +1 `).MatchString(out) ||
		!regexp.MustCompile(`(?m)^media +yes +0 +0 +0 +1 `).MatchString(out) {
		t.Errorf("queues:\n%s\nwant mail running with 1 available, media paused with 1 running", out)
	}

	// Paging: two pages of one cover both jobs, newest first as on the
	// dashboard, the first says where the second starts.
	var first, second jobjson.Page
	decode(t, a.ok(t, "jobs", "--limit", "1", "--json"), &first)
	if len(first.Jobs) != 1 || first.NextAfter != first.Jobs[0].ID {
		t.Fatalf("jobs --limit 1 = %+v, want one job and next_after its ID", first)
	}
	decode(t, a.ok(t, "jobs", "--limit", "1", "--after", strconv.FormatInt(first.NextAfter, 10), "--json"), &second)
	if len(second.Jobs) != 1 || second.Jobs[0].ID >= first.Jobs[0].ID {
		t.Fatalf("second page = %+v after %+v, want the next job", second, first)
	}
	if got := []int64{first.Jobs[0].ID, second.Jobs[0].ID}; !slices.Equal(got, []int64{long, welcome}) {
		t.Errorf("pages hold jobs %v, want %v", got, []int64{long, welcome})
	}
	if out := a.ok(t, "jobs", "--limit", "1"); !strings.HasSuffix(out, fmt.Sprintf("more: --after %d\n", long)) {
		t.Errorf("jobs --limit 1:\n%s\nwant it to end with the next page's --after", out)
	}
}

func TestAdminBulk(t *testing.T) { onAdminStores(t, testAdminBulk) }

// testAdminBulk acts on thousands of jobs with --all, over several pages:
// every matching job and no other, a running job's refusal reported
// without stopping the rest.
func testAdminBulk(t *testing.T, a adminStore) {
	ctx := context.Background()
	const n = 2100 // more than four of Client.JobsBulk's pages of 500
	jobs := make([]*store.NewJob, n)
	for i := range jobs {
		jobs[i] = &store.NewJob{Kind: "bulk.k", Queue: "bulk", Args: []byte(`{}`), Priority: 2, MaxAttempts: 25}
	}
	jobs = append(jobs, &store.NewJob{Kind: "bulk.k", Queue: "other", Args: []byte(`{}`), Priority: 2, MaxAttempts: 25})
	res, err := a.st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	running := a.claim(t, "bulk", res[0].ID).ID
	counts := func() map[string]int64 {
		t.Helper()
		got := map[string]int64{}
		cs, err := a.st.JobCounts(ctx, &store.JobCountsParams{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			got[c.Queue+"/"+string(c.State)] = c.Count
		}
		return got
	}
	type result struct {
		Done   int           `json:"done"`
		Failed []bulkFailure `json:"failed"`
	}

	var r result
	decode(t, a.ok(t, "cancel", "--all", "--queue", "bulk", "--state", "available", "--json"), &r)
	if r.Done != n-1 || len(r.Failed) != 0 {
		t.Errorf("cancel --all = %+v, want %d done and no failures", r, n-1)
	}
	if got, want := counts(), map[string]int64{"bulk/cancelled": n - 1, "bulk/running": 1, "other/available": 1}; !maps.Equal(got, want) {
		t.Errorf("after cancel --all: counts %v, want %v", got, want)
	}
	if out := a.ok(t, "retry", "--all", "--state", "cancelled", "--kind", "bulk.k"); out != fmt.Sprintf("%d jobs retried\n", n-1) {
		t.Errorf("retry --all printed %q", out)
	}
	if got, want := counts(), map[string]int64{"bulk/available": n - 1, "bulk/running": 1, "other/available": 1}; !maps.Equal(got, want) {
		t.Errorf("after retry --all: counts %v, want %v", got, want)
	}
	code, stdout, stderr := a.cmd(t, "delete", "--all", "--queue", "bulk", "--json")
	decode(t, stdout, &r)
	if code != exitError || r.Done != n-1 || len(r.Failed) != 1 || r.Failed[0].ID != running ||
		!strings.Contains(r.Failed[0].Error, store.ErrJobRunning.Error()) || !strings.Contains(stderr, fmt.Sprintf("delete job %d", running)) {
		t.Errorf("delete --all with a running job: exit status %d, %+v, stderr %q; want 1, %d done, job %d failed as running",
			code, r, stderr, n-1, running)
	}
	if got, want := counts(), map[string]int64{"bulk/running": 1, "other/available": 1}; !maps.Equal(got, want) {
		t.Errorf("after delete --all: counts %v, want %v", got, want)
	}
}

// Mistakes get an exit status that says whose they are (2: the command
// line, 1: the store or the job) and a message that names the problem.
func TestAdminCommandErrors(t *testing.T) {
	t.Parallel()
	a := sqliteAdminStore(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	other := filepath.Join(dir, "other.db")
	db, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE invoices (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	for _, tt := range []struct {
		args       []string
		wantCode   int
		wantStderr string
	}{
		{[]string{"jobs", "--store", missing}, exitError, "no sortie database at " + missing + ": give --store (or $SORTIE_STORE), or create it with sortie migrate"},
		{[]string{"queues", "--store", other}, exitError, "not a sortie database"},
		{[]string{"jobs", "--store", "memory"}, exitUsage, "holds no jobs between runs"},
		{[]string{"jobs", "--store", a.flags[1], "--schema", "x"}, exitUsage, "--schema applies to postgres stores only"},
		{append([]string{"jobs", "abc"}, a.flags...), exitUsage, `"abc" is not a job ID`},
		{append([]string{"jobs", "1", "2"}, a.flags...), exitUsage, "at most one job ID"},
		{append([]string{"jobs", "--state", "failed"}, a.flags...), exitUsage, `--state "failed" is not a job state: want one of waiting,`},
		{append([]string{"jobs", "--limit", "0"}, a.flags...), exitUsage, "--limit must be 1 to 1000"},
		{append([]string{"jobs", "424242"}, a.flags...), exitError, "job 424242 not found"},
		{append([]string{"retry"}, a.flags...), exitUsage, "give the IDs of the jobs to retry, or --all with filters"},
		{append([]string{"retry", "--all"}, a.flags...), exitUsage, "--all needs --queue, --state or --kind"},
		{append([]string{"retry", "--all", "--state", "dead", "7"}, a.flags...), exitUsage, "give job IDs or --all, not both"},
		{append([]string{"retry", "--state", "dead"}, a.flags...), exitUsage, "--queue, --state and --kind choose the jobs of --all"},
		{append([]string{"cancel", "--all", "--state", "done"}, a.flags...), exitUsage, `--state "done" is not a job state`},
		{append([]string{"delete", "-3"}, a.flags...), exitUsage, "flag provided but not defined: -3"},
		{append([]string{"pause"}, a.flags...), exitUsage, "give the queues to pause"},
		{append([]string{"pause", "bad queue!"}, a.flags...), exitError, `queue "bad queue!"`},
		{append([]string{"enqueue", "--args", "{}"}, a.flags...), exitUsage, "--kind is required"},
		{append([]string{"enqueue", "--kind", "k", "--args", "{bad"}, a.flags...), exitUsage, "--args is not valid JSON: invalid character 'b'"},
		{append([]string{"enqueue", "--kind", "k", "--meta", "[1]"}, a.flags...), exitUsage, "--meta must be a JSON object"},
		{append([]string{"enqueue", "--kind", "k", "--run-at", "tomorrow"}, a.flags...), exitUsage, `--run-at "tomorrow" is not an RFC 3339 time`},
		{append([]string{"enqueue", "--kind", "k", "--priority", "9"}, a.flags...), exitUsage, "sortie enqueue: --priority must be between 1 and 4, got 9\n"},
		{append([]string{"enqueue", "--kind", "k", "--max-attempts", "2147483648"}, a.flags...), exitUsage, "sortie enqueue: --max-attempts must be between 1 and 1000000, got 2147483648\n"},
		{append([]string{"enqueue", "--kind", "k", "--run-in", "1h", "--run-at", "2030-01-01T00:00:00Z"}, a.flags...), exitUsage, "sortie enqueue: --run-in and --run-at together: give one of them\n"},
		{append([]string{"enqueue", "--kind", "k", "--args", "5"}, a.flags...), exitUsage, "sortie enqueue: --args must be a JSON object or array, got the number 5\n"},
		{append([]string{"enqueue", "--kind", "k", "stray"}, a.flags...), exitUsage, `unexpected arguments ["stray"]`},
	} {
		code, stdout, stderr := run(t, tt.args...)
		if code != tt.wantCode || stdout != "" || !strings.Contains(stderr, tt.wantStderr) {
			t.Errorf("sortie %q: exit status %d, stdout %q, stderr %q; want %d, nothing, and %q", tt.args, code, stdout, stderr, tt.wantCode, tt.wantStderr)
		}
	}
	// Nothing above reached the database.
	if counts, err := a.st.JobCounts(context.Background(), &store.JobCountsParams{}); err != nil || len(counts) != 0 {
		t.Errorf("JobCounts after the failed commands = %v, %v; want none", counts, err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("jobs --store %s created the file (%v), want it left missing", missing, err)
	}
}

// Without --store, the admin commands use $SORTIE_STORE, else sortie.db in
// the working directory. (Not parallel: it sets the environment and the
// working directory.)
func TestAdminStoreDefaults(t *testing.T) {
	a := sqliteAdminStore(t)
	t.Setenv(storeEnv, a.flags[1])
	id := enqueued(t, a.ok(t, "enqueue", "--kind", "k"))
	code, stdout, stderr := run(t, "jobs", "--json")
	var page jobjson.Page
	if code != exitOK || json.Unmarshal([]byte(stdout), &page) != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != id {
		t.Errorf("jobs with $%s set: exit status %d, stdout %q, stderr %q; want job %d", storeEnv, code, stdout, stderr, id)
	}

	t.Setenv(storeEnv, "")
	dir := t.TempDir()
	t.Chdir(dir)
	if code, _, stderr := run(t, "queues"); code != exitError || !strings.Contains(stderr, "no sortie database at sortie.db") {
		t.Errorf("queues in an empty directory: exit status %d, stderr %q; want 1 and no sortie database at sortie.db", code, stderr)
	}
	t.Setenv(storeEnv, "sortie.db")
	if code, stdout, stderr := run(t, "migrate"); code != exitOK || !strings.Contains(stdout, "sqlite database sortie.db: migrated") {
		t.Fatalf("migrate with $%s: exit status %d, stdout %q, stderr %q", storeEnv, code, stdout, stderr)
	}
	t.Setenv(storeEnv, "")
	if code, stdout, stderr := run(t, "enqueue", "--kind", "k"); code != exitOK || stdout != "enqueued job 1\n" {
		t.Errorf("enqueue into ./sortie.db: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}

func jsonEqual(got []byte, want string) bool {
	var g, w any
	return json.Unmarshal(got, &g) == nil && json.Unmarshal([]byte(want), &w) == nil && fmt.Sprint(g) == fmt.Sprint(w)
}
