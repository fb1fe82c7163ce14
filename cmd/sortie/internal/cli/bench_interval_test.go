package cli

import (
	"context"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
)

// buildSortie builds cmd/sortie into a temporary directory and returns the
// binary's path: interval's helper processes are copies of the binary, so
// the test binary cannot stand in for it.
func buildSortie(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build cmd/sortie: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "sortie")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gobin, "build", "-o", exe, "github.com/sortiehq/sortie/cmd/sortie").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cmd/sortie: %v\n%s", err, out)
	}
	return exe
}

func TestBenchIntervalTwoProcesses(t *testing.T) {
	t.Parallel()
	exe := buildSortie(t)
	for _, tt := range []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "bench.db") }},
		// A fresh schema per run, which the helper process must join.
		{"postgres", func(t *testing.T) string { return pgtest.URL(t) }},
		// A fresh key prefix per run, which the helper process must join.
		{"redis", func(t *testing.T) string { return redistest.URL(t) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			storeArg := tt.store(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe, "bench", "--workload", "interval", "--store", storeArg,
				"--rate", "50", "--duration", "3s", "--json")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("sortie bench --workload interval: %v; stderr:\n%s", err, stderr.String())
			}
			var r bench.Result
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("output %q is not a JSON result: %v", out, err)
			}
			if r.Workload != bench.Interval || r.Store != tt.name || r.Processes != 2 || r.RateLimit != 50 || r.RatePeriodSec != 1 {
				t.Errorf("result %+v, want interval on %s, 2 processes, 50 per 1 s", r, tt.name)
			}
			// The rate is a figure (a loaded machine loses slots); what
			// holds is the limit, and the error reported for the rate.
			if r.MaxInWindow < 1 || r.MaxInWindow > 50 {
				t.Errorf("max_in_window = %d, want 1 to 50", r.MaxInWindow)
			}
			if r.RateErrorPct == nil || math.Abs(*r.RateErrorPct-100*math.Abs(r.JobsPerSec-50)/50) > 1e-9 {
				t.Errorf("rate_error_pct = %v with jobs_per_sec %g, want |jobs_per_sec - 50| / 50 in percent", r.RateErrorPct, r.JobsPerSec)
			}
		})
	}
}

func TestBenchIntervalOneProcessTable(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, "bench", "--workload", "interval", "--store", "memory", "--processes", "1",
		"--rate", "20", "--period", "250ms", "--duration", "500ms")
	if code != 0 {
		t.Fatalf("exit status %d, want 0; stderr:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("table has %d lines, want a comment, a header and a row:\n%s", len(lines), stdout)
	}
	row := lines[2]
	for _, want := range []string{"memory", "interval", "rate error 0.", "max 20 per 250ms (limit 20), 1 process"} {
		if !strings.Contains(row, want) {
			t.Errorf("row %q, want it to contain %q", row, want)
		}
	}
}

func TestBenchIntervalBadFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"memory", []string{"--store", "memory"}, "the memory store cannot be shared across processes"},
		{"fractional rate", []string{"--store", "sqlite", "--rate", "2.5"}, "--rate must be a whole number for interval"},
		{"short duration", []string{"--store", "sqlite", "--duration", "1s", "--period", "2s"}, "--duration (1s) must be at least --period (2s)"},
		{"zero processes", []string{"--store", "sqlite", "--processes", "0"}, "--processes must be positive, got 0"},
		{"zero period", []string{"--store", "sqlite", "--period", "0s"}, "--period must be positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := run(t, append([]string{"bench", "--workload", "interval"}, tt.args...)...)
			if code != 2 || stdout != "" {
				t.Errorf("exit status %d, stdout %q; want 2 and nothing", code, stdout)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q, want it to contain %q", stderr, tt.want)
			}
		})
	}
}

func TestBenchIntervalInTestBinary(t *testing.T) {
	t.Parallel()
	// Helpers are copies of the running binary: a test binary must refuse
	// rather than run its tests again.
	code, _, stderr := run(t, "bench", "--workload", "interval", "--store", "sqlite", "--rate", "10", "--duration", "1s")
	if code != 1 || !strings.Contains(stderr, "a test binary cannot start client processes") {
		t.Errorf("exit status %d, stderr %q; want 1 and the test binary refused", code, stderr)
	}
}

func TestBenchWorker(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"memory", []string{"--store", "memory", "--queue", "q", "--workers", "1", "--duration", "1s", "--id", "x"}, "--store must name a SQLite file"},
		{"no queue", []string{"--store", "sqlite:" + filepath.Join(t.TempDir(), "w.db"), "--workers", "1", "--duration", "1s", "--id", "x"}, "helper needs a queue"},
		{"schema on sqlite", []string{"--store", "sqlite:" + filepath.Join(t.TempDir(), "w.db"), "--schema", "s", "--queue", "q", "--workers", "1", "--duration", "1s", "--id", "x"}, "--schema applies to postgres stores only"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := run(t, append([]string{"bench-worker"}, tt.args...)...)
			if code == 0 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit status %d, stderr %q; want a failure containing %q", code, stderr, tt.want)
			}
		})
	}
	// bench-worker is not listed by help.
	_, stdout, _ := run(t, "help")
	if strings.Contains(stdout, "bench-worker") {
		t.Errorf("help lists bench-worker:\n%s", stdout)
	}
}
