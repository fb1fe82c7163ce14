package bench_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// targets returns the stores the tests run every workload on.
func targets(t *testing.T) []bench.Target {
	t.Helper()
	return []bench.Target{
		bench.Memory(),
		bench.SQLite("", t.TempDir(), &sqlitestore.Options{Synchronous: sqlitestore.SynchronousNormal}),
	}
}

func TestWorkloads(t *testing.T) {
	t.Parallel()
	testWorkloads(t, targets(t))
}

// testWorkloads runs every workload on each of targets, checking the
// results.
func testWorkloads(t *testing.T, targets []bench.Target) {
	const jobs = 2000
	for _, target := range targets {
		for _, w := range bench.Workloads() {
			t.Run(target.Name+"/"+string(w), func(t *testing.T) {
				t.Parallel()
				opts := &bench.Options{Jobs: jobs, Workers: 20, Rate: 400, Duration: 500 * time.Millisecond, StallTimeout: 20 * time.Second}
				res, err := bench.Run(context.Background(), target, w, opts)
				if err != nil {
					t.Fatalf("Run(%s, %s) = %v, want success", target.Name, w, err)
				}
				wantJobs := jobs
				if w == bench.Latency {
					wantJobs = 200 // 400 jobs/s for 0.5 s
				}
				if res.Jobs != wantJobs {
					t.Errorf("Jobs = %d, want %d", res.Jobs, wantJobs)
				}
				if res.Store != target.Name || res.Workload != w || res.Runs != 1 || res.CPUs < 1 || res.GoVersion == "" {
					t.Errorf("result %+v: want store %s, workload %s, 1 run, the machine described", res, target.Name, w)
				}
				if res.Seconds <= 0 || res.JobsPerSec <= 0 {
					t.Errorf("Seconds = %g, JobsPerSec = %g, want both positive", res.Seconds, res.JobsPerSec)
				}
				if got := float64(res.Jobs) / res.Seconds; abs(got-res.JobsPerSec) > 1e-6*got {
					t.Errorf("JobsPerSec = %g, want Jobs/Seconds = %g", res.JobsPerSec, got)
				}
				switch w {
				case bench.Drain:
					if res.P50ms != 0 || res.LatencyOf != "" {
						t.Errorf("drain reports latency %q p50 %g, want none", res.LatencyOf, res.P50ms)
					}
				default:
					if !(0 < res.P50ms && res.P50ms <= res.P95ms && res.P95ms <= res.P99ms && res.P99ms <= res.MaxMs) {
						t.Errorf("percentiles p50 %g p95 %g p99 %g max %g, want positive and ordered", res.P50ms, res.P95ms, res.P99ms, res.MaxMs)
					}
				}
				if w == bench.Latency {
					// The enqueues are paced at the rate asked: 200 jobs at
					// 400 a second take at least the time between the first
					// and the last (a loaded machine only takes longer, so
					// the rate achieved is reported, not asserted).
					if res.JobsPerSec > 400*1.05 {
						t.Errorf("latency achieved %g jobs/s, want at most about 400: the enqueues were not paced", res.JobsPerSec)
					}
					if res.Rate != 400 || res.Workers != 20 {
						t.Errorf("Rate = %g, Workers = %d, want 400 and 20", res.Rate, res.Workers)
					}
				}
			})
		}
	}
}

func TestRunSQLiteFileKeepsRunsApart(t *testing.T) {
	t.Parallel()
	// Runs on one database file use a queue each, so the second run's check
	// is not confused by the first run's jobs.
	target := bench.SQLite(t.TempDir()+"/bench.db", "", nil)
	if target.Synchronous != "FULL" {
		t.Errorf("Synchronous = %q, want FULL by default", target.Synchronous)
	}
	res, err := bench.RunRepeated(context.Background(), target, bench.EnqueueBatch, &bench.Options{Jobs: 500, BatchSize: 100}, 2)
	if err != nil {
		t.Fatalf("RunRepeated = %v, want success", err)
	}
	if res.Runs != 2 || res.Jobs != 500 || res.BatchSize != 100 {
		t.Errorf("result %+v, want 2 runs of 500 jobs in batches of 100", res)
	}
}

func TestRunCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := bench.Run(ctx, bench.Memory(), bench.Latency, &bench.Options{Rate: 100, Duration: time.Minute})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %v, want context.Canceled", err)
	}
}

func TestRunBadOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		w    bench.Workload
		opts *bench.Options
		want string
	}{
		{"negative jobs", bench.Drain, &bench.Options{Jobs: -1}, "Options.Jobs must not be negative"},
		{"unknown workload", "nope", nil, `unknown workload "nope"`},
		{"latency without jobs", bench.Latency, &bench.Options{Rate: 1, Duration: time.Millisecond}, "makes no job"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := bench.Run(context.Background(), bench.Memory(), tt.w, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestOptionsWithDefaults(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		w    bench.Workload
		opts *bench.Options
		want bench.Options // Logger aside
	}{
		{"nil", bench.EnqueueSingle, nil, bench.Options{
			Jobs: bench.DefaultJobs, Workers: bench.DefaultWorkers, Producers: bench.DefaultProducers,
			BatchSize: bench.DefaultBatchSize, Rate: bench.DefaultRate, Period: bench.DefaultPeriod,
			Duration: bench.DefaultDuration, Processes: bench.DefaultProcesses, StallTimeout: bench.DefaultStallTimeout,
		}},
		{"batch: one producer", bench.EnqueueBatch, &bench.Options{Jobs: 10, BatchSize: 5}, bench.Options{
			Jobs: 10, Workers: bench.DefaultWorkers, Producers: 1,
			BatchSize: 5, Rate: bench.DefaultRate, Period: bench.DefaultPeriod,
			Duration: bench.DefaultDuration, Processes: bench.DefaultProcesses, StallTimeout: bench.DefaultStallTimeout,
		}},
		{"steps: its own defaults", bench.Steps, nil, bench.Options{
			Jobs: bench.DefaultStepJobs, Workers: bench.DefaultWorkers, Producers: bench.DefaultProducers,
			BatchSize: bench.DefaultBatchSize, Rate: bench.DefaultRate, Period: bench.DefaultPeriod,
			Duration: bench.DefaultDuration, Processes: bench.DefaultProcesses, StallTimeout: bench.DefaultStallTimeout,
			Children: bench.DefaultChildren, Rounds: bench.DefaultRounds, StepCalls: bench.DefaultStepCalls,
		}},
		{"latency: rate × duration jobs", bench.Latency, &bench.Options{Jobs: 7, Rate: 100, Duration: 2 * time.Second}, bench.Options{
			Jobs: 200, Workers: bench.DefaultWorkers, Producers: bench.DefaultProducers,
			BatchSize: bench.DefaultBatchSize, Rate: 100, Period: bench.DefaultPeriod,
			Duration: 2 * time.Second, Processes: bench.DefaultProcesses, StallTimeout: bench.DefaultStallTimeout,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var before bench.Options
			if tt.opts != nil {
				before = *tt.opts
			}
			got, err := tt.opts.WithDefaults(tt.w)
			if err != nil {
				t.Fatalf("WithDefaults(%s) = %v, want success", tt.w, err)
			}
			if got.Logger == nil {
				t.Error("WithDefaults left Logger nil, want one that discards")
			}
			got.Logger = nil
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("WithDefaults(%s) mismatch (-want +got):\n%s", tt.w, diff)
			}
			if tt.opts != nil {
				if diff := cmp.Diff(before, *tt.opts); diff != "" {
					t.Errorf("WithDefaults changed its receiver (-before +after):\n%s", diff)
				}
			}
		})
	}
	if _, err := (&bench.Options{Rate: -1}).WithDefaults(bench.Drain); err == nil {
		t.Error("WithDefaults with a negative Rate succeeded, want an error")
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	completed := func(n int64) []store.QueueStateCount {
		return []store.QueueStateCount{{Queue: "q", State: store.JobStateCompleted, Count: n}}
	}
	for _, tt := range []struct {
		name  string
		tally bench.Tally
		want  []string // substrings of the error; none means success
	}{
		{"all once", bench.Tally{Runs: []int32{1, 1, 1}, Counts: completed(3)}, nil},
		{"ran twice", bench.Tally{Runs: []int32{1, 2, 1}, Counts: completed(3)},
			[]string{"1 of 3 jobs ran more than once: seq 1 (2 times)"}},
		{"never ran", bench.Tally{Runs: []int32{1, 0, 1}, Counts: completed(2)},
			[]string{"1 of 3 jobs never ran: seq 1", "the store counts 2 completed jobs, want 3"}},
		{"left pending", bench.Tally{Runs: []int32{1, 1}, Counts: append(completed(2),
			store.QueueStateCount{Queue: "q", State: store.JobStateAvailable, Count: 1})},
			[]string{"still holds jobs that are not completed: 1 available"}},
		{"stray", bench.Tally{Runs: []int32{1}, Stray: 2, Counts: completed(1)},
			[]string{"ran 2 jobs the run never made"}},
		{"earlier problem", bench.Tally{Runs: []int32{1}, Counts: completed(1), Problems: []string{"enqueue went wrong"}},
			[]string{"enqueue went wrong"}},
		{"many listed", bench.Tally{Runs: make([]int32, 20), Counts: completed(0)},
			[]string{"20 of 20 jobs never ran: seq 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ..."}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := bench.Check(tt.tally)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			var ce *bench.CheckError
			if !errors.As(err, &ce) {
				t.Fatalf("Check = %v, want a *CheckError", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	got := bench.Median([]bench.Result{
		{Store: "memory", JobsPerSec: 10, P50ms: 3, Seconds: 1},
		{Store: "memory", JobsPerSec: 30, P50ms: 1, Seconds: 3},
		{Store: "memory", JobsPerSec: 20, P50ms: 2, Seconds: 100},
	})
	if got.JobsPerSec != 20 || got.P50ms != 2 || got.Seconds != 3 || got.Runs != 3 || got.Store != "memory" {
		t.Errorf("Median = %+v, want jobs/s 20, p50 2, seconds 3, 3 runs", got)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
