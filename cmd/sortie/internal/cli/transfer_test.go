package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestExportImport(t *testing.T) { onAdminStores(t, testExportImport) }

// export writes a store's jobs and queue states; import puts them into
// another store (here a SQLite file) as they were, adds nothing when run
// again, refuses conflicts and bad streams with what and where, and leaves
// conflicts out when asked.
func testExportImport(t *testing.T, a adminStore) {
	var ids []int64
	for i, args := range []string{`{"to":"a@example.com"}`, `{"to":"b@example.com"}`} {
		ids = append(ids, enqueued(t, a.ok(t, "enqueue", "--kind", "email", "--queue", "mail", "--args", args,
			"--unique-key", "digest-"+strconv.Itoa(i))))
	}
	a.ok(t, "pause", "mail")
	file := filepath.Join(t.TempDir(), "export.jsonl")
	code, _, stderr := a.cmd(t, "export", "--out", file)
	if code != exitOK || !strings.Contains(stderr, "export: 2 jobs, 1 queue settings, 0 periodic slots") {
		t.Fatalf("export: exit %d, stderr %q", code, stderr)
	}

	b := sqliteAdminStore(t)
	if out := b.ok(t, "import", file, "--dry-run"); !strings.HasPrefix(out, "dry run, nothing written; would import 2 of 2 jobs (0 already there, 0 skipped), 1 queue settings") {
		t.Errorf("import --dry-run printed %q", out)
	}
	if out := b.ok(t, "import", file); !strings.HasPrefix(out, "imported 2 of 2 jobs (0 already there, 0 skipped), 1 queue settings") {
		t.Errorf("import printed %q", out)
	}
	for _, id := range ids {
		want, got := a.get(t, id), b.get(t, id)
		if got.Kind != want.Kind || string(got.Args) != string(want.Args) || got.State != want.State || !got.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("imported job %d = %+v, want %+v", id, got, want)
		}
	}
	if out := b.ok(t, "queues"); !strings.Contains(out, "yes") {
		t.Errorf("queues after the import does not show mail paused:\n%s", out)
	}
	if out := b.ok(t, "import", file); !strings.HasPrefix(out, "imported 0 of 2 jobs (2 already there, 0 skipped)") {
		t.Errorf("second import printed %q", out)
	}

	// The target holds a pending job with the first job's unique key
	// (the offset keeps the IDs apart).
	c := sqliteAdminStore(t)
	holder := enqueued(t, c.ok(t, "enqueue", "--kind", "other", "--queue", "mail", "--unique-key", "digest-0"))
	conflict := fmt.Sprintf("line 3: job %d: its unique key is held by pending job %d", ids[0]+1000, holder)
	code, _, stderr = c.cmd(t, "import", file, "--id-offset", "1000")
	if code != exitError || !strings.Contains(stderr, conflict) || !strings.Contains(stderr, "nothing was imported") {
		t.Errorf("import over a held unique key: exit %d, stderr %q; want it to say %q", code, stderr, conflict)
	}
	code, stdout, stderr := c.cmd(t, "import", file, "--skip-conflicts", "--id-offset", "1000")
	if code != exitOK || !strings.Contains(stderr, "skipped "+conflict) || !strings.HasPrefix(stdout, "imported 1 of 2 jobs (0 already there, 1 skipped)") {
		t.Errorf("import --skip-conflicts: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.jsonl")
	if err := os.WriteFile(cut, data[:len(data)-20], 0o600); err != nil {
		t.Fatal(err)
	}
	d := sqliteAdminStore(t)
	if code, _, stderr := d.cmd(t, "import", cut); code != exitError || !strings.Contains(stderr, "import: line 5:") {
		t.Errorf("import of a cut stream: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := d.cmd(t, "import", file, "--id-offset", "-1"); code != exitUsage || !strings.Contains(stderr, "--id-offset must not be negative") {
		t.Errorf("import --id-offset -1: exit %d, stderr %q", code, stderr)
	}
	if out := d.ok(t, "jobs"); strings.Contains(out, "email") {
		t.Errorf("jobs after refused imports:\n%s", out)
	}
}

// The documented move to a new SQLite file works as written: import makes
// the missing file; --dry-run checks against an empty store and makes
// nothing. A PostgreSQL schema must still be migrated first.
func TestImportIntoNewSQLiteFile(t *testing.T) {
	t.Parallel()
	a := sqliteAdminStore(t)
	a.ok(t, "enqueue", "--kind", "email", "--queue", "mail")
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	if code, _, stderr := a.cmd(t, "export", "--out", file); code != exitOK {
		t.Fatalf("export: exit %d, stderr %q", code, stderr)
	}
	newDB := filepath.Join(t.TempDir(), "new.db")
	if code, stdout, stderr := run(t, "import", "--store", "sqlite:"+newDB, "--dry-run", file); code != exitOK || !strings.HasPrefix(stdout, "dry run, nothing written; would import 1 of 1 jobs") {
		t.Fatalf("import --dry-run into a missing file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := os.Stat(newDB); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("import --dry-run made %s (stat: %v)", newDB, err)
	}
	// The docs read the stream from standard input; the file argument is
	// the same import.
	if code, stdout, stderr := run(t, "import", "--store", "sqlite:"+newDB, "--skip-conflicts", file); code != exitOK || !strings.HasPrefix(stdout, "imported 1 of 1 jobs") {
		t.Fatalf("sortie import --store sqlite:new.db --skip-conflicts jobs.jsonl: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, stderr := run(t, "jobs", "--store", newDB); code != exitOK || !strings.Contains(stdout, "email") {
		t.Errorf("jobs in the new file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
