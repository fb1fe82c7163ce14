package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sortiehq/sortie/store"
)

// FuzzEnqueueFlags runs `sortie enqueue` with arbitrary flag values on one
// database: the command never panics, answers 0 (enqueued), 1 (refused by
// the store or the client) or 2 (a bad command line) with one message on
// stderr and nothing on stdout when it fails, and its output is valid
// UTF-8.
func FuzzEnqueueFlags(f *testing.F) {
	db := filepath.Join(f.TempDir(), "jobs.db")
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"migrate", "--store", db}, &out, &errOut); code != exitOK {
		f.Fatalf("migrate: %d %s", code, errOut.String())
	}
	f.Add("email.send", `{"to": "ada"}`, "mail", "1", "3", "90s", "", "key", "tag", `{"m": 1}`)
	f.Add("k", "{}", "", "9", "2147483648", "", "2030-01-02T15:04:05Z", "", "", "")
	f.Add("k\xff", `{"a": 1, "a": 2}`, "q q", "-1", "0", "-5s", "tomorrow", strings.Repeat("u", 300), "", "[1]")
	f.Add("", "[", "default", "x", "1e3", "1h", "9999-12-31T23:59:59Z", "", "\xfe", `{"b": "\ud800"}`)
	f.Fuzz(func(t *testing.T, kind, args, queue, priority, attempts, runIn, runAt, key, tag, meta string) {
		cmd := []string{"enqueue", "--store", db, "--json", "--kind", kind, "--args", args, "--queue", queue,
			"--priority", priority, "--max-attempts", attempts, "--unique-key", key, "--tag", tag}
		for _, f := range []struct{ name, value string }{{"--run-in", runIn}, {"--run-at", runAt}, {"--meta", meta}} {
			if f.value != "" {
				cmd = append(cmd, f.name, f.value)
			}
		}
		var out, errOut bytes.Buffer
		code := Run(context.Background(), cmd, &out, &errOut)
		switch code {
		case exitOK:
			if !utf8.Valid(out.Bytes()) {
				t.Fatalf("enqueue printed invalid UTF-8: %q", out.String())
			}
		case exitError, exitUsage:
			if out.Len() != 0 || strings.TrimSpace(errOut.String()) == "" {
				t.Fatalf("enqueue failed with status %d, stdout %q, stderr %q; want only a message on stderr", code, out.String(), errOut.String())
			}
		default:
			t.Fatalf("enqueue exited %d: %s", code, errOut.String())
		}
	})
}

// TestEnqueueFlagsFuzzStoresValidJobs reads back a job enqueued at the top
// of the flags' ranges: stored exactly as given.
func TestEnqueueFlagsFuzzStoresValidJobs(t *testing.T) {
	t.Parallel()
	a := sqliteAdminStore(t)
	code, _, stderr := run(t, append([]string{"enqueue", "--kind", "email.send", "--args", `{"to": "ada"}`, "--priority", "1", "--max-attempts", "1000000"}, a.flags...)...)
	if code != exitOK {
		t.Fatalf("enqueue: %d %s", code, stderr)
	}
	rows, err := a.st.JobList(context.Background(), &store.JobListParams{Limit: 10})
	if err != nil || len(rows) != 1 {
		t.Fatalf("JobList = %d rows, %v", len(rows), err)
	}
	if r := rows[0]; r.Priority != 1 || r.MaxAttempts != 1000000 || !utf8.Valid(r.Args) {
		t.Errorf("stored priority %d, max attempts %d, args %q; want 1, 1000000 and the args", r.Priority, r.MaxAttempts, r.Args)
	}
}
