package peers

import (
	"context"
	"log/slog"
	"os"
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
