package cli

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// storeCommands are the commands that open a --store, with the arguments
// each needs besides it.
var storeCommands = [][]string{
	{"jobs"}, {"queues"}, {"enqueue", "--kind", "k"}, {"retry", "1"}, {"cancel", "1"}, {"delete", "1"},
	{"pause", "q"}, {"resume", "q"}, {"serve", "--addr", "127.0.0.1:0"}, {"migrate"}, {"bench"},
}

// Every command says a bad store URL the same way: one line naming it, the
// usage line and how to get help, never the whole help; exit status 2.
func TestBadStoreURL(t *testing.T) {
	t.Parallel()
	for _, args := range storeCommands {
		for _, bad := range []string{"foo://x", "postgres://u@h:notaport/db"} {
			code, stdout, stderr := run(t, append(args, "--store", bad)...)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			name := "sortie " + args[0]
			if code != exitUsage || stdout != "" || len(lines) != 3 || !strings.HasPrefix(lines[0], name+": --store: ") ||
				!strings.HasPrefix(lines[1], "usage: "+name+" ") || lines[2] != fmt.Sprintf("Run '%s --help' for its flags.", name) {
				t.Errorf("%s --store %s: exit %d, stdout %q, stderr %q; want 2 and the error, usage and help lines", name, bad, code, stdout, stderr)
			}
		}
	}
	_, _, a := run(t, "jobs", "--store", "foo://x")
	_, _, b := run(t, "serve", "--store", "foo://x")
	if strings.TrimPrefix(strings.SplitN(a, "\n", 2)[0], "sortie jobs") != strings.TrimPrefix(strings.SplitN(b, "\n", 2)[0], "sortie serve") {
		t.Errorf("jobs and serve word a bad URL differently: %q, %q", a, b)
	}
}

// A missing file or a database of a newer schema is one line naming the
// file and the problem, exit status 1, for every command that opens it.
func TestMissingOrNewerDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	newer := filepath.Join(dir, "newer.db")
	if code, _, stderr := run(t, "migrate", "--store", newer); code != exitOK {
		t.Fatalf("migrate: %d %s", code, stderr)
	}
	db, err := sql.Open("sqlite", newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE sortie_meta SET value = 999 WHERE key = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	for _, args := range storeCommands {
		if args[0] == "bench" {
			continue // runs on a store of its own
		}
		name := "sortie " + args[0]
		cases := map[string]string{newer: "newer.db: sortie: database schema is newer than this version of sortie: it has version 999"}
		if args[0] != "serve" && args[0] != "migrate" { // those create a missing file
			cases[missing] = "no sortie database at " + missing
		}
		for path, want := range cases {
			code, stdout, stderr := run(t, append(args, "--store", path)...)
			if code != exitError || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, name+": ") || !strings.Contains(stderr, want) {
				t.Errorf("%s --store %s: exit %d, stdout %q, stderr %q; want 1 and one line saying %q", name, path, code, stdout, stderr, want)
			}
		}
	}
}
