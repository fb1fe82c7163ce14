package peers

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
)

// small keeps the runs short; each still passes the exactly-once check.
var small = Options{Jobs: 300, BatchSize: 100, Rate: 200, Duration: 300 * time.Millisecond}

func runAll(t *testing.T, p Peer, workloads []bench.Workload) {
	t.Helper()
	for _, w := range workloads {
		res, err := p.Run(t.Context(), w, small)
		if err != nil {
			t.Fatalf("Run(%s) = %v", w, err)
		}
		if res.Jobs == 0 || !(res.JobsPerSec > 0) {
			t.Errorf("Run(%s) = %d jobs at %g jobs/s, want some jobs", w, res.Jobs, res.JobsPerSec)
		}
		if s := p.Settings(w, small); s == "" {
			t.Errorf("Settings(%s) is empty", w)
		}
	}
}

func TestBacklite(t *testing.T) {
	t.Parallel()
	p, err := OpenBacklite("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	runAll(t, p, bench.Workloads())
}

func postgresURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("SORTIE_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("SORTIE_TEST_POSTGRES_URL is not set")
		}
		t.Skip("SORTIE_TEST_POSTGRES_URL is not set")
	}
	return url
}

func TestRiver(t *testing.T) {
	t.Parallel()
	url := postgresURL(t)
	for _, c := range []RiverConfig{RiverDefaults, RiverBench} {
		t.Run(string(c), func(t *testing.T) {
			t.Parallel()
			p, err := OpenRiver(context.Background(), url, c, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			runAll(t, p, bench.Workloads())
		})
	}
}

func TestRiverRaw(t *testing.T) {
	t.Parallel()
	p, err := OpenRiverRaw(context.Background(), postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	runAll(t, p, []bench.Workload{bench.EnqueueSingle, bench.EnqueueBatch, bench.Drain})
	if _, err := p.Run(t.Context(), bench.Latency, small); err == nil {
		t.Error("Run(latency) on river-raw succeeded, want an error")
	}
}

// testRedisURL returns $SORTIE_TEST_REDIS_URL, or skips the test (fails it
// on CI) when it is not set.
func testRedisURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("SORTIE_TEST_REDIS_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("SORTIE_TEST_REDIS_URL is not set")
		}
		t.Skip("SORTIE_TEST_REDIS_URL is not set: the asynq and bullmq peers need a Redis server (a redis:// URL) they may write to")
	}
	return url
}

func TestAsynq(t *testing.T) {
	t.Parallel()
	url := testRedisURL(t)
	for _, c := range []AsynqConfig{AsynqDefaults, AsynqTuned} {
		t.Run(string(c), func(t *testing.T) {
			t.Parallel()
			p, err := OpenAsynq(context.Background(), url, c, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			runAll(t, p, bench.Workloads())
		})
	}
}

// openBullMQ opens the bullmq peer, or skips the test when node or the
// pinned BullMQ is not installed.
func openBullMQ(t *testing.T, url string) *BullMQ {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the bullmq peer runs BullMQ with node 20 or later")
	}
	p, err := OpenBullMQ(context.Background(), url, DefaultBullMQDir(), slog.New(slog.DiscardHandler))
	var notInstalled *BullMQNotInstalledError
	if errors.As(err, &notInstalled) {
		t.Skipf("%v (it installs BullMQ with npm)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBullMQ(t *testing.T) {
	t.Parallel()
	p := openBullMQ(t, testRedisURL(t))
	defer p.Close()
	runAll(t, p, bench.Workloads())
}

// TestRedisMemory runs the memory workload briefly on each Redis peer. It
// is not parallel: the other tests' keys would move used_memory.
func TestRedisMemory(t *testing.T) {
	url := testRedisURL(t)
	asynqPeer, err := OpenAsynq(context.Background(), url, AsynqTuned, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer asynqPeer.Close()
	peers := []MemoryPeer{asynqPeer}
	t.Run("bullmq", func(t *testing.T) {
		p := openBullMQ(t, url)
		peers = append(peers, p)
	})
	const jobs, payload = 2000, 200
	for _, p := range peers {
		defer p.Close()
		res, m, err := p.RunMemory(t.Context(), MemoryOptions{Jobs: jobs, PayloadBytes: payload})
		if err != nil {
			t.Fatalf("%s: RunMemory = %v", p.Name(), err)
		}
		if res.Jobs != jobs || !(res.JobsPerSec > 0) {
			t.Errorf("%s: RunMemory = %d jobs at %g jobs/s, want %d", p.Name(), res.Jobs, res.JobsPerSec, jobs)
		}
		// Each job holds its padding at least once.
		if m.BytesPerJob < payload {
			t.Errorf("%s: RunMemory measured %.1f bytes per job, want at least the %d bytes of padding", p.Name(), m.BytesPerJob, payload)
		}
		t.Logf("%s: %.1f bytes per job", p.Name(), m.BytesPerJob)
	}
}

// TestBullMQCheck feeds the check what peerbench.js might report.
func TestBullMQCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		out  bullmqResult
		want string // a problem's start; empty for none
	}{
		{"ok", bullmqResult{Runs: []int32{1, 1, 1}, Completed: 3, Counts: map[string]int64{"waiting": 0, "completed": 0}}, ""},
		{"twice", bullmqResult{Runs: []int32{1, 2, 1}, Completed: 3}, "1 of 3 jobs ran more than once"},
		{"never", bullmqResult{Runs: []int32{1, 0, 1}, Completed: 2, Counts: map[string]int64{"waiting": 1}}, "1 of 3 jobs never ran"},
		{"active", bullmqResult{Runs: []int32{1, 1, 1}, Completed: 2, Counts: map[string]int64{"active": 1}}, "the store counts 2 completed jobs, want 3"},
		{"kept", bullmqResult{Runs: []int32{1}, Completed: 1, Counts: map[string]int64{"completed": 1}}, "the store still holds jobs that are not completed: 1 completed (kept)"},
		{"stall", bullmqResult{Runs: []int32{1}, Completed: 1, Problems: []string{"no progress"}}, "no progress"},
	} {
		err := bench.Check(bench.Tally{Runs: tc.out.Runs, Counts: tc.out.counts("q"), Problems: tc.out.Problems})
		var ce *bench.CheckError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Check = %v, want nil", tc.name, err)
		case tc.want != "" && !errors.As(err, &ce):
			t.Errorf("%s: Check = %v, want a *bench.CheckError", tc.name, err)
		case tc.want != "" && !slices.ContainsFunc(ce.Problems, func(p string) bool { return strings.HasPrefix(p, tc.want) }):
			t.Errorf("%s: Check problems = %q, want one starting %q", tc.name, ce.Problems, tc.want)
		}
	}
}
