package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// The common failures' first line, exactly: the job or the flag named
// once, in the command line's words.
func TestErrorTexts(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "jobs.db")
	if code, _, stderr := run(t, "migrate", "--store", path); code != exitOK {
		t.Fatalf("migrate: %s", stderr)
	}
	st, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.QueueConfigure(context.Background(), &store.QueueConfigureParams{Queue: "small", Settings: store.QueueSettings{MaxDepth: 1}})
	_ = st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "enqueue", "--store", path, "--kind", "k", "--queue", "small"); code != exitOK {
		t.Fatalf("enqueue: %s", stderr)
	}
	for _, tt := range []struct {
		args []string
		code int
		line string
	}{
		{[]string{"jobs", "42"}, exitError, "sortie jobs: job 42 not found"},
		{[]string{"retry", "42"}, exitError, "sortie retry: job 42 not found"},
		{[]string{"cancel", "42"}, exitError, "sortie cancel: job 42 not found"},
		{[]string{"delete", "42"}, exitError, "sortie delete: job 42 not found"},
		{[]string{"enqueue", "--kind", "k", "--priority", "9"}, exitUsage, "sortie enqueue: --priority must be between 1 and 4, got 9"},
		{[]string{"enqueue", "--kind", "k", "--max-attempts", "-1"}, exitUsage, "sortie enqueue: --max-attempts must be between 1 and 1000000, got -1"},
		{[]string{"enqueue", "--kind", "k", "--queue", "a b"}, exitUsage, `sortie enqueue: --queue "a b" may only contain letters, digits, '_', '-', '.' and ':'`},
		{[]string{"enqueue", "--kind", "k", "--args", "5"}, exitUsage, "sortie enqueue: --args must be a JSON object or array, got the number 5"},
		{[]string{"enqueue", "--kind", "k", "--args", ` "s"`}, exitUsage, `sortie enqueue: --args must be a JSON object or array, got the string "s"`},
		{[]string{"enqueue", "--kind", "k", "--run-in", "-5m"}, exitUsage, "sortie enqueue: --run-in must not be negative, got -5m0s"},
		{[]string{"enqueue", "--kind", "k", "--run-in", "1m", "--run-at", "2030-01-01T00:00:00Z"}, exitUsage, "sortie enqueue: --run-in and --run-at together: give one of them"},
		{[]string{"enqueue", "--kind", "k", "--meta", "[1]"}, exitUsage, "sortie enqueue: --meta must be a JSON object, got an array"},
		{[]string{"enqueue", "--kind", "k", "--meta", "{"}, exitUsage, "sortie enqueue: --meta is not valid JSON: unexpected end of JSON input"},
		{[]string{"enqueue", "--kind", "k", "--run-at", "tomorrow"}, exitUsage, `sortie enqueue: --run-at "tomorrow" is not an RFC 3339 time like 2026-01-02T15:04:05Z`},
		{[]string{"enqueue", "--kind", "k", "--args", "{"}, exitUsage, "sortie enqueue: --args is not valid JSON: unexpected end of JSON input"},
		{[]string{"jobs", "--limit", "0"}, exitUsage, "sortie jobs: --limit must be 1 to 1000, got 0"},
		{[]string{"jobs", "--frob"}, exitUsage, "sortie jobs: flag provided but not defined: -frob"},
	} {
		code, _, stderr := run(t, append(tt.args, "--store", path)...)
		if first, _, _ := strings.Cut(stderr, "\n"); code != tt.code || first != tt.line {
			t.Errorf("sortie %q: exit %d, stderr %q; want %d, first line %q", tt.args, code, stderr, tt.code, tt.line)
		}
	}
	code, _, stderr := run(t, "enqueue", "--store", path, "--kind", "k", "--queue", "small")
	if want := "sortie enqueue: queue \"small\" is full: it holds at most 1 queued jobs, has 1 and was given 1 more\n"; code != exitError || stderr != want {
		t.Errorf("enqueue into a full queue: exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
}
