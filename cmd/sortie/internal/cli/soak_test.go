package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// soak runs a short stream on a SQLite file, prints a line per window and
// the verdict, and refuses a missing store or a bad rate.
func TestSoak(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "soak.db")
	if code, _, stderr := run(t, "migrate", "--store", db); code != exitOK {
		t.Fatalf("migrate: %s", stderr)
	}
	code, stdout, stderr := run(t, "soak", "--store", db, "--rate", "100", "--duration", "3s", "--window", "1s", "--retention", "1s", "--workers", "10")
	if code != exitOK || stderr != "" {
		t.Fatalf("soak: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"jobs/s", "p99 ms", "store MiB", "enqueued 297 jobs (3 unique conflicts refused)", "every job finished once"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("soak output lacks %q:\n%s", want, stdout)
		}
	}
	if lines := strings.Count(stdout, "\n"); lines < 6 {
		t.Errorf("soak printed %d lines, want a header, a line per window and the verdict:\n%s", lines, stdout)
	}
	if code, _, stderr := run(t, "soak"); code != exitUsage || !strings.Contains(stderr, "--store is required") {
		t.Errorf("soak without --store: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := run(t, "soak", "--store", db, "--rate", "0"); code != exitUsage || !strings.Contains(stderr, "must be positive") {
		t.Errorf("soak --rate 0: exit %d, stderr %q", code, stderr)
	}
}
