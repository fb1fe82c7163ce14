package bench_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
)

// intervalOpts runs interval at 20 starts per 250 ms for 750 ms: three
// periods.
func intervalOpts(processes int, helper func(store.Store) ([]string, error)) *bench.Options {
	return &bench.Options{
		Rate: 20, Period: 250 * time.Millisecond, Duration: 750 * time.Millisecond,
		Processes: processes, HelperCommand: helper, StallTimeout: 5 * time.Second,
	}
}

func TestIntervalOneProcess(t *testing.T) {
	t.Parallel()
	for _, target := range targets(t) {
		t.Run(target.Name, func(t *testing.T) {
			t.Parallel()
			res, err := bench.Run(context.Background(), target, bench.Interval, intervalOpts(1, nil))
			if err != nil {
				t.Fatalf("Run(%s, interval) = %v, want success", target.Name, err)
			}
			// The rate is a figure (a loaded machine loses slots); what
			// holds is the limit, and the error reported for the rate.
			if res.RateErrorPct == nil || abs(*res.RateErrorPct-100*abs(res.JobsPerSec-80)/80) > 1e-9 {
				t.Errorf("RateErrorPct = %v with JobsPerSec %g, want |JobsPerSec - 80| / 80 in percent", res.RateErrorPct, res.JobsPerSec)
			}
			if res.MaxInWindow < 1 || res.MaxInWindow > 20 {
				t.Errorf("MaxInWindow = %d, want 1 to 20", res.MaxInWindow)
			}
			if res.Rate != 80 || res.RateLimit != 20 || res.RatePeriodSec != 0.25 || res.Processes != 1 || res.Workers != 20 {
				t.Errorf("result %+v: want rate 80/s (20 per 0.25 s), 1 process of 20 workers", res)
			}
			if res.Seconds != 0.75 || abs(float64(res.Jobs)/res.Seconds-res.JobsPerSec) > 1e-9 {
				t.Errorf("Seconds = %g, Jobs = %d, JobsPerSec = %g: want 0.75 and JobsPerSec = Jobs/Seconds", res.Seconds, res.Jobs, res.JobsPerSec)
			}
		})
	}
}

// sh returns a HelperCommand running script with sh; the helper flags
// become its $0, $1 and so on.
func sh(script string) func(store.Store) ([]string, error) {
	return func(store.Store) ([]string, error) { return []string{"/bin/sh", "-c", script}, nil }
}

func TestIntervalHelperFails(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		helper func(store.Store) ([]string, error)
		want   []string
	}{
		{"command error", func(store.Store) ([]string, error) { return nil, errors.New("no way") },
			[]string{"interval with 2 processes: no way"}},
		{"empty command", func(store.Store) ([]string, error) { return nil, nil },
			[]string{"HelperCommand returned an empty command line"}},
		{"no such program", func(store.Store) ([]string, error) { return []string{"/nonexistent/sortie"}, nil },
			[]string{"start client process", "/p1"}},
		{"exits early", sh("echo 'cannot open the store' >&2; exit 3"),
			[]string{"/p1: exited before it was ready", "cannot open the store"}},
		{"never ready", sh("exec sleep 60"),
			[]string{"/p1: not ready after 300ms"}},
		{"fails after ready", sh("echo sortie-bench-helper ready; echo 'stop failed' >&2; exit 1"),
			[]string{"/p1: exit status 1", "stop failed"}},
		{"no report", sh("echo sortie-bench-helper ready; echo garbage"),
			[]string{`/p1: wrote no report (last line "garbage")`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := intervalOpts(2, tt.helper)
			opts.StallTimeout = 300 * time.Millisecond
			start := time.Now()
			_, err := bench.Run(context.Background(), bench.Memory(), bench.Interval, opts)
			if err == nil {
				t.Fatal("Run = nil, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run = %q, want it to contain %q", err, w)
				}
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("Run took %s to fail, want it prompt", took)
			}
		})
	}
}

func TestIntervalIdleHelper(t *testing.T) {
	t.Parallel()
	// A helper that runs no job: the check names it. It reports when told
	// to stop (SIGTERM), as RunHelper does.
	helper := sh(`trap 'echo "{\"id\":\"x\",\"ran\":[]}"; exit 0' TERM; echo sortie-bench-helper ready; while :; do sleep 0.05; done`)
	_, err := bench.Run(context.Background(), bench.Memory(), bench.Interval, intervalOpts(2, helper))
	var ce *bench.CheckError
	if !errors.As(err, &ce) {
		t.Fatalf("Run = %v, want a *CheckError", err)
	}
	if want := "1 of 2 client processes started no job: bench-"; !strings.Contains(err.Error(), want) {
		t.Errorf("Run = %q, want it to contain %q", err, want)
	}
}

func TestIntervalCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	opts := intervalOpts(2, sh("echo sortie-bench-helper ready; exec sleep 60"))
	opts.Duration = time.Minute
	start := time.Now()
	_, err := bench.Run(ctx, bench.Memory(), bench.Interval, opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Run took %s after cancel, want the helper killed at once", took)
	}
}

func TestIntervalBadOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		opts *bench.Options
		want string
	}{
		{"fractional rate", &bench.Options{Rate: 2.5, Processes: 1}, "interval needs a whole Options.Rate"},
		{"short duration", &bench.Options{Duration: time.Second, Period: 2 * time.Second, Processes: 1}, "at least Options.Period"},
		{"no helper", &bench.Options{Processes: 2}, "interval with 2 processes needs Options.HelperCommand"},
		{"negative processes", &bench.Options{Processes: -1}, "Options.Processes must not be negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := bench.Run(context.Background(), bench.Memory(), bench.Interval, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
