package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

func TestMigrateBadCommandLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no store", nil, "--store is required"},
		{"memory", []string{"--store", "memory"}, "nothing to migrate"},
		{"temporary sqlite", []string{"--store", "sqlite"}, "names a temporary database"},
		{"unknown store", []string{"--store", "mysql://x"}, `unknown store "mysql://x"`},
		{"bad redis url", []string{"--store", "redis://localhost/x"}, `--store: redisstore: parse URL: redis: invalid database number: "x"`},
		{"schema on redis", []string{"--store", "redis://localhost", "--schema", "s"}, "a Redis store's key prefix goes in the URL, redis://HOST:PORT/DB?prefix=NAME"},
		{"schema on sqlite", []string{"--store", "x.db", "--schema", "s"}, "--schema applies to postgres stores only"},
		{"bad url", []string{"--store", "postgres://u:pw@host:notaport/db"}, "--store:"},
		{"extra argument", []string{"--store", "x.db", "now"}, `unexpected argument "now"`},
		{"bad flag", []string{"--frobnicate"}, "flag provided but not defined"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := run(t, append([]string{"migrate"}, tt.args...)...)
			if code != exitUsage || stdout != "" {
				t.Errorf("exit status %d, stdout %q; want %d and nothing", code, stdout, exitUsage)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q, want it to contain %q", stderr, tt.want)
			}
			if !strings.Contains(stderr, "\nusage: sortie ") {
				t.Errorf("stderr %q, want the usage", stderr)
			}
		})
	}
}

func TestMigrateHelp(t *testing.T) {
	t.Parallel()
	code, stdout, _ := run(t, "help")
	if code != exitOK || !strings.Contains(stdout, "migrate    create or upgrade") {
		t.Errorf("help: exit status %d, stdout %q; want 0 and migrate listed", code, stdout)
	}
	code, stdout, _ = run(t, "migrate", "-h")
	for _, want := range []string{"sortie migrate --store", "--check", "--schema"} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Errorf("migrate -h: exit status %d, stdout %q; want 0 and %q", code, stdout, want)
		}
	}
}

// migrateStep is one run of sortie migrate and what it must print.
type migrateStep struct {
	args       []string
	wantCode   int
	wantStdout string // exactly, when wantCode is 0
	wantStderr string // a part of it, when wantCode is not 0
}

func runSteps(t *testing.T, steps []migrateStep) {
	t.Helper()
	for _, s := range steps {
		code, stdout, stderr := run(t, append([]string{"migrate"}, s.args...)...)
		if code != s.wantCode {
			t.Fatalf("migrate %q: exit status %d, want %d; stdout %q, stderr %q", s.args, code, s.wantCode, stdout, stderr)
		}
		if s.wantCode == exitOK && (stdout != s.wantStdout || stderr != "") {
			t.Errorf("migrate %q: stdout %q, stderr %q; want %q and nothing", s.args, stdout, stderr, s.wantStdout)
		}
		if s.wantCode != exitOK && (stdout != "" || !strings.Contains(stderr, s.wantStderr)) {
			t.Errorf("migrate %q: stdout %q, stderr %q; want nothing and %q", s.args, stdout, stderr, s.wantStderr)
		}
	}
}

func TestMigrateSQLite(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "jobs.db")
	what := "sqlite database " + db
	v := sqlitestore.SchemaVersion
	runSteps(t, []migrateStep{
		{args: []string{"--store", db, "--check"}, wantCode: exitError, wantStderr: what + " has no sortie tables yet"},
		{args: []string{"--store", "sqlite:" + db}, wantStdout: what + ": migrated from version 0 to " + strconv.Itoa(v) + "\n"},
		{args: []string{"--store", db}, wantStdout: what + ": already at version " + strconv.Itoa(v) + "\n"},
		{args: []string{"--store", db, "--check"}, wantStdout: what + ": up to date at version " + strconv.Itoa(v) + "\n"},
	})
}

func TestMigrateSQLiteNotSortie(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "other.db")
	if err := os.WriteFile(db, []byte("not a database at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	runSteps(t, []migrateStep{
		{args: []string{"--store", db}, wantCode: exitError, wantStderr: "not a sortie database"},
		{args: []string{"--store", db, "--check"}, wantCode: exitError, wantStderr: "not a sortie database"},
	})
}

func TestMigratePostgres(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	what := "schema " + schema
	v := pgstore.SchemaVersion
	runSteps(t, []migrateStep{
		{args: []string{"--store", url, "--schema", schema, "--check"}, wantCode: exitError,
			wantStderr: fmt.Sprintf("%s has no sortie tables yet, this sortie needs version %d: run sortie migrate without --check", what, v)},
		{args: []string{"--store", url, "--schema", schema}, wantStdout: fmt.Sprintf("%s: migrated from version 0 to %d\n", what, v)},
		{args: []string{"--store", url, "--schema", schema}, wantStdout: fmt.Sprintf("%s: already at version %d\n", what, v)},
		{args: []string{"--store", url, "--schema", schema, "--check"}, wantStdout: fmt.Sprintf("%s: up to date at version %d\n", what, v)},
	})
}

// A version 1 schema (before the hot-path functions of version 2 and the
// one running-jobs index of version 3) is upgraded in place: --check names
// the gap, migrate brings it to the current version, and a store on it
// enqueues, fetches and finishes.
func TestMigratePostgresFromVersion1(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	what := "schema " + schema
	v := pgstore.SchemaVersion
	runSteps(t, []migrateStep{{args: []string{"--store", url, "--schema", schema}, wantStdout: fmt.Sprintf("%s: migrated from version 0 to %d\n", what, v)}})
	// What version 1 was: the same tables, without the functions, with two
	// indexes of running jobs.
	for _, f := range []string{"claim_jobs", "finish_jobs", "extend_leases"} {
		pgtest.Exec(t, "DROP FUNCTION "+schema+"."+f)
	}
	upgradeFromBeforeV3(t, url, schema, 1)
	running := pgtest.Strings(t, "SELECT indexname || ': ' || indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname IN ('jobs_running', 'jobs_lease')", schema)
	if len(running) != 1 || !strings.Contains(running[0], "jobs_running: ") || !strings.Contains(running[0], "(queue, lease_until) WHERE (state = 'running'::text)") {
		t.Fatalf("indexes of running jobs after the upgrade: %q, want jobs_running (queue, lease_until) alone", running)
	}
	ctx := context.Background()
	st, err := pgstore.Open(ctx, url, &pgstore.Options{Schema: schema, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{{Kind: "k", Queue: "q", Priority: 2, MaxAttempts: 3}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	jobs, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "q", Limit: 10, Worker: "w", Now: now, Lease: time.Minute}))
	if err != nil || len(jobs) != 1 {
		t.Fatalf("JobFetch after the upgrade = %d jobs, %v; want 1", len(jobs), err)
	}
	res, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: []*store.Report{{ID: jobs[0].ID, ClaimToken: jobs[0].ClaimToken, Kind: store.ReportCompleted}}, Now: now})
	if err != nil || !res[0].Applied {
		t.Fatalf("JobFinish after the upgrade = %+v, %v; want applied", res, err)
	}
}

// A version 2 schema as version 2's sortie created it (two indexes of
// running jobs; functions without jit = off, so a rescue-sized plan paid
// 50 ms of JIT compiling) is upgraded in place to one index and functions
// that never compile.
func TestMigratePostgresFromVersion2(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	what := "schema " + schema
	v := pgstore.SchemaVersion
	runSteps(t, []migrateStep{{args: []string{"--store", url, "--schema", schema}, wantStdout: fmt.Sprintf("%s: migrated from version 0 to %d\n", what, v)}})
	functions := []string{"claim_jobs", "finish_jobs", "extend_leases"}
	for _, f := range functions[:2] {
		pgtest.Exec(t, "ALTER FUNCTION "+schema+"."+f+" RESET jit")
	}
	// Version 5 replaced these two with a four-argument extend_leases;
	// stand-ins with their signatures do for the upgrade.
	pgtest.Exec(t, "DROP FUNCTION "+schema+".extend_leases")
	for _, f := range []string{"extend_leases(bigint[], bigint[], timestamptz)", "record_progress(bigint[], bigint[], double precision[])"} {
		pgtest.Exec(t, "CREATE FUNCTION "+schema+"."+f+" RETURNS void LANGUAGE sql AS ''")
	}
	upgradeFromBeforeV3(t, url, schema, 2)
	running := pgtest.Strings(t, "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND indexname IN ('jobs_running', 'jobs_lease')", schema)
	if !slices.Equal(running, []string{"jobs_running"}) {
		t.Errorf("indexes of running jobs after the upgrade: %q, want jobs_running alone", running)
	}
	for _, f := range functions {
		config := pgtest.Strings(t, `SELECT unnest(p.proconfig) FROM pg_catalog.pg_proc p
			JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = $2`, schema, f)
		if !slices.Contains(config, "jit=off") {
			t.Errorf("%s runs with %q after the upgrade, want jit=off among them", f, config)
		}
	}
}

// upgradeFromBeforeV3 gives schema the two indexes of running jobs of
// versions 1 and 2, marks it as version from, and checks that --check names
// the gap and migrate closes it.
func upgradeFromBeforeV3(t *testing.T, url, schema string, from int) {
	t.Helper()
	pgtest.Exec(t, "DROP INDEX "+schema+".jobs_running")
	pgtest.Exec(t, "CREATE INDEX jobs_running ON "+schema+".jobs (queue, partition_key) WHERE state = 'running'")
	pgtest.Exec(t, "CREATE INDEX jobs_lease ON "+schema+".jobs (lease_until) WHERE state = 'running'")
	pgtest.Exec(t, fmt.Sprintf("UPDATE %s.sortie_meta SET value = %d WHERE key = 'schema_version'", schema, from))
	runSteps(t, []migrateStep{
		{args: []string{"--store", url, "--schema", schema, "--check"}, wantCode: exitError, wantStderr: fmt.Sprintf("version %d", from)},
		{args: []string{"--store", url, "--schema", schema},
			wantStdout: fmt.Sprintf("schema %s: migrated from version %d to %d\n", schema, from, pgstore.SchemaVersion)},
	})
}

func TestMigratePostgresNewerSchema(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	v := pgstore.SchemaVersion
	runSteps(t, []migrateStep{{args: []string{"--store", url, "--schema", schema}, wantStdout: fmt.Sprintf("schema %s: migrated from version 0 to %d\n", schema, v)}})
	pgtest.Exec(t, "UPDATE "+schema+".sortie_meta SET value = 999 WHERE key = 'schema_version'")
	newer := fmt.Sprintf("has version 999, this sortie knows up to %d; upgrade sortie", v)
	runSteps(t, []migrateStep{
		{args: []string{"--store", url, "--schema", schema}, wantCode: exitError, wantStderr: newer},
		{args: []string{"--store", url, "--schema", schema, "--check"}, wantCode: exitError, wantStderr: newer},
	})
}

func TestMigratePostgresNotSortie(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	pgtest.Exec(t, "CREATE TABLE "+schema+".users (id int)")
	runSteps(t, []migrateStep{
		{args: []string{"--store", url, "--schema", schema}, wantCode: exitError, wantStderr: `has tables ["users"]`},
		{args: []string{"--store", url, "--schema", schema, "--check"}, wantCode: exitError, wantStderr: `has tables ["users"]`},
	})
}

func TestMigratePostgresUnreachable(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: this needs no server.
	url := "postgres://someone:s3cret@127.0.0.1:1/jobs?connect_timeout=2&sslmode=disable"
	for _, check := range []bool{false, true} {
		args := []string{"migrate", "--store", url}
		if check {
			args = append(args, "--check")
		}
		start := time.Now()
		code, stdout, stderr := run(t, args...)
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("migrate %q took %s, want a quick failure", args, took)
		}
		if code != exitError || stdout != "" {
			t.Errorf("migrate %q: exit status %d, stdout %q; want 1 and nothing", args, code, stdout)
		}
		if !strings.Contains(stderr, "cannot reach the PostgreSQL server at 127.0.0.1:1") {
			t.Errorf("migrate %q: stderr %q, want it to name the server", args, stderr)
		}
		if strings.Contains(stderr, "s3cret") {
			t.Errorf("migrate %q: stderr %q shows the password", args, stderr)
		}
	}
}
