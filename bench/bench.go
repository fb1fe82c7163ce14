// Package bench holds the benchmark workloads that `sortie bench` and the Go
// benchmarks share. Each workload drives a real sortie.Client on a store,
// times one phase, and then checks that every job it made ran exactly once
// and that the store holds none of them pending. A run that breaks the
// check returns a *CheckError: a fast wrong answer is not a result.
//
//	res, err := bench.Run(ctx, bench.Memory(), bench.Drain, &bench.Options{Jobs: 100_000})
//
// The workloads:
//
//   - enqueue-single: Producers goroutines (default 8) enqueue Jobs jobs,
//     one per Enqueue call. Timed: the enqueues. Percentiles: per call.
//   - enqueue-batch: EnqueueMany with BatchSize jobs (default 1,000) per
//     call. Timed: the enqueues. Percentiles: per call.
//   - drain: Jobs no-op jobs are preloaded (not timed), then a client with
//     Workers workers (default 100) starts. Timed: from Start until the
//     store counts every job completed.
//   - latency: Workers idle workers wait while jobs are enqueued open-loop
//     at Rate per second for Duration. Percentiles: from just before each
//     Enqueue call to the start of its handler.
//   - interval: a queue limited to Rate starts in any window of Period
//     (QueueSettings.RateLimit and RatePeriod) is preloaded with more no-op
//     jobs than it may start, then Processes client processes (default 2:
//     this one and HelperCommand's) work it for Duration, and on until the
//     whole periods of Duration from the first start have passed (the
//     first start comes a claim and a reserved lead after the start).
//     Measured from the store's AttemptedAt: the start rate over those
//     periods, and the most starts in any window of Period.
//     The check fails when a window holds more than Rate starts, when no
//     job or a process started no job, or when a started job did not run
//     exactly once and complete; how far the start rate fell short of the
//     limit is a figure (RateErrorPct), as a drain's speed is: a machine
//     short of CPU makes claims come back after their reserved start, and
//     each such claim loses its slot. The jobs left available at the end
//     were surplus and are deleted, untimed.
//   - steps: durable steps (steps.go): the cost of recording a step
//     against a lease heartbeat, a drain of Jobs jobs of 10 steps against
//     10 × Jobs plain jobs, and Rounds parents each spawning Children
//     children and awaiting them (the time from the last child's outcome
//     to the parent's resumption). Each unit of work must run once.
//
// Jobs enqueued by the enqueue workloads are run afterwards (not timed), so
// that their check covers the whole life of each job. Every run uses a queue
// of its own, so runs on a store that holds other jobs stay apart.
//
// Interval with more than one process needs a store that several processes
// can open (SQLite, PostgreSQL, Redis) and a command that starts a helper:
// `sortie bench` starts its own binary as `sortie bench-worker`, which
// calls RunHelper. HelperCommand gets the run's store, so it can name the
// same file (sqlitestore.Store.Path), schema (pgstore.Store.Schema) or key
// prefix (redisstore.Store.Prefix).
package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Workload names one benchmark workload.
type Workload string

// The workloads; see the package documentation.
const (
	EnqueueSingle Workload = "enqueue-single"
	EnqueueBatch  Workload = "enqueue-batch"
	Drain         Workload = "drain"
	Latency       Workload = "latency"
	Interval      Workload = "interval"
	Steps         Workload = "steps"
)

// Workloads returns the throughput and latency workloads in the order
// `sortie bench --workload all` runs them. Interval is not among them: it
// checks a rate limit rather than measuring speed, and takes Duration
// whatever the store.
func Workloads() []Workload {
	return []Workload{EnqueueSingle, EnqueueBatch, Drain, Latency}
}

// ParseWorkload returns the workload named s, or an error listing the names.
func ParseWorkload(s string) (Workload, error) {
	for _, w := range append(Workloads(), Interval, Steps) {
		if string(w) == s {
			return w, nil
		}
	}
	return "", fmt.Errorf("unknown workload %q: want enqueue-single, enqueue-batch, drain, latency, interval or steps", s)
}

// Options tune a run. A nil *Options means all defaults; a zero field means
// that field's default.
type Options struct {
	// Jobs is how many jobs the enqueue and drain workloads make. Ignored
	// by latency, which makes Rate × Duration jobs, and by interval, which
	// makes Rate × (Duration/Period rounded up, plus 2). Defaults to 100,000.
	Jobs int
	// Workers is the number of worker goroutines of the client that runs
	// the jobs (drain, latency, and the untimed run after an enqueue
	// workload), and of each process of interval. Defaults to 100; for
	// interval, to Rate/Processes rounded up (at most 100), so that every
	// process takes part in each period's starts. Interval's jobs each take
	// a tenth of Period (at most 100 ms), so fewer than Rate/10 workers in
	// all cannot keep up with the limit.
	Workers int
	// Producers is the number of goroutines enqueueing at once in the
	// enqueue workloads. Defaults to 8 for enqueue-single and 1 for
	// enqueue-batch.
	Producers int
	// BatchSize is the number of jobs per EnqueueMany call of enqueue-batch.
	// Defaults to 1,000.
	BatchSize int
	// Rate is how many jobs per second latency enqueues, and for interval
	// the queue's RateLimit: the most jobs it starts in any window of
	// Period, a whole number. Defaults to 500.
	Rate float64
	// Period is interval's RatePeriod. Defaults to 1 second.
	Period time.Duration
	// Duration is how long latency enqueues and interval's processes work
	// the queue; for interval at least Period. Defaults to 5 seconds.
	Duration time.Duration
	// Processes is the number of client processes interval works its queue
	// with, this one included. Defaults to 2.
	Processes int
	// HelperCommand returns the command line of one more client process
	// of interval, working the database of st. Run appends the flags of
	// HelperArgs (HelperArgs.Flags) and starts it; the process must pass
	// them to RunHelper on a store of the same database. It may return an
	// error for a store that other processes cannot open. Required by
	// interval when Processes is more than 1.
	HelperCommand func(st store.Store) ([]string, error)
	// Children is how many children each parent of steps spawns. Defaults
	// to 10,000.
	Children int
	// Rounds is how many parents steps runs, one at a time. Defaults to 5.
	Rounds int
	// StepCalls is how many StepRecord and LeaseExtend calls steps times,
	// each. Defaults to 2,000.
	StepCalls int
	// StallTimeout fails a run when no job makes progress for this long.
	// Defaults to 30 seconds.
	StallTimeout time.Duration
	// Logger receives the client's logs. Defaults to discarding them.
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultJobs = 100_000
	// DefaultSQLiteSingleJobs is enqueue-single's --jobs on SQLite, whose
	// FULL commits make 100,000 single enqueues long to wait for.
	DefaultSQLiteSingleJobs = 20_000
	DefaultWorkers          = 100
	DefaultProducers        = 8
	DefaultBatchSize        = 1000
	DefaultRate             = 500
	DefaultDuration         = 5 * time.Second
	DefaultPeriod           = time.Second
	DefaultProcesses        = 2
	DefaultStallTimeout     = 30 * time.Second
	defaultBatchProducer    = 1
)

// WithDefaults returns o validated for workload w, with the defaults filled
// in: the options Run runs w with. A nil o means all defaults. It does not
// change o. peerbench gives its peers sortie's defaults with it.
func (o *Options) WithDefaults(w Workload) (Options, error) {
	var v Options
	if o != nil {
		v = *o
	}
	for _, f := range []struct {
		name string
		val  int
	}{
		{"Jobs", v.Jobs}, {"Workers", v.Workers}, {"Producers", v.Producers}, {"BatchSize", v.BatchSize},
		{"Processes", v.Processes}, {"Children", v.Children}, {"Rounds", v.Rounds}, {"StepCalls", v.StepCalls},
	} {
		if f.val < 0 {
			return v, fmt.Errorf("bench: Options.%s must not be negative, got %d", f.name, f.val)
		}
	}
	if v.Rate < 0 || v.Duration < 0 || v.Period < 0 || v.StallTimeout < 0 {
		return v, fmt.Errorf("bench: Options.Rate, Duration, Period and StallTimeout must not be negative")
	}
	if v.Jobs == 0 {
		v.Jobs = DefaultJobs
		if w == Steps {
			v.Jobs = DefaultStepJobs
		}
	}
	if w == Steps {
		v.Children = cmp.Or(v.Children, DefaultChildren)
		v.Rounds = cmp.Or(v.Rounds, DefaultRounds)
		v.StepCalls = cmp.Or(v.StepCalls, DefaultStepCalls)
	}
	if v.Period == 0 {
		v.Period = DefaultPeriod
	}
	if v.Processes == 0 {
		v.Processes = DefaultProcesses
	}
	if v.Producers == 0 {
		v.Producers = DefaultProducers
		if w == EnqueueBatch {
			v.Producers = defaultBatchProducer
		}
	}
	if v.BatchSize == 0 {
		v.BatchSize = DefaultBatchSize
	}
	if v.Rate == 0 {
		v.Rate = DefaultRate
	}
	if v.Duration == 0 {
		v.Duration = DefaultDuration
	}
	if v.Workers == 0 {
		v.Workers = DefaultWorkers
		if w == Interval {
			v.Workers = min(DefaultWorkers, int(math.Ceil(v.Rate/float64(v.Processes))))
		}
	}
	if v.StallTimeout == 0 {
		v.StallTimeout = DefaultStallTimeout
	}
	if v.Logger == nil {
		v.Logger = slog.New(slog.DiscardHandler)
	}
	if w == Latency {
		v.Jobs = int(v.Rate*v.Duration.Seconds() + 0.5)
		if v.Jobs < 1 {
			return v, fmt.Errorf("bench: latency at %g jobs/s for %s makes no job", v.Rate, v.Duration)
		}
	}
	if w == Interval {
		if v.Rate != math.Trunc(v.Rate) || v.Rate > math.MaxInt32 {
			return v, fmt.Errorf("bench: interval needs a whole Options.Rate (the queue's RateLimit), got %g", v.Rate)
		}
		if v.Duration < v.Period {
			return v, fmt.Errorf("bench: interval needs Options.Duration (%s) at least Options.Period (%s)", v.Duration, v.Period)
		}
		if v.Processes > 1 && v.HelperCommand == nil {
			return v, fmt.Errorf("bench: interval with %d processes needs Options.HelperCommand", v.Processes)
		}
		v.Jobs = int(v.Rate) * (int((v.Duration+v.Period-1)/v.Period) + 2)
	}
	return v, nil
}

// Target is a store to benchmark. Open makes the store of one run: a fresh
// empty one where the target can (memory, a temporary SQLite file), the
// same database otherwise.
type Target struct {
	// Name names the store in results: "memory", "sqlite".
	Name string
	// Synchronous is the store's commit durability, when it has a setting
	// for it ("FULL", "NORMAL"); empty otherwise.
	Synchronous string
	// Open returns the store of one run and a function that closes it and
	// removes whatever Open created.
	Open func(ctx context.Context) (st store.Store, closeStore func() error, err error)
}

// Result is the outcome of one run, or the median of several (see Median).
type Result struct {
	// Store and Synchronous come from the Target.
	Store       string   `json:"store"`
	Synchronous string   `json:"synchronous,omitempty"`
	Workload    Workload `json:"workload"`
	// Jobs is the number of jobs the run made and ran; for interval, the
	// number of starts in the measured window.
	Jobs int `json:"jobs"`
	// Workers is the size of the worker pool, for drain and latency; for
	// interval, of each process.
	Workers int `json:"workers,omitempty"`
	// Producers is the number of concurrent enqueuers, for enqueue workloads.
	Producers int `json:"producers,omitempty"`
	// BatchSize is the number of jobs per call, for enqueue-batch.
	BatchSize int `json:"batch_size,omitempty"`
	// Rate is the asked enqueue rate in jobs per second, for latency; for
	// interval, the queue's rate limit in jobs per second (RateLimit /
	// RatePeriod).
	Rate float64 `json:"rate,omitempty"`
	// RateLimit and RatePeriodSec are interval's queue settings: at most
	// RateLimit starts in any window of RatePeriodSec seconds.
	RateLimit     int     `json:"rate_limit,omitempty"`
	RatePeriodSec float64 `json:"rate_period_s,omitempty"`
	// Processes is the number of client processes, for interval.
	Processes int `json:"processes,omitempty"`
	// Seconds is the length of the timed phase; for interval, of the
	// measured window: the whole periods of Duration from the first start.
	Seconds float64 `json:"seconds"`
	// JobsPerSec is Jobs / Seconds: throughput, or for latency and interval
	// the rate achieved.
	JobsPerSec float64 `json:"jobs_per_sec"`
	// RateErrorPct is interval's |JobsPerSec − Rate| / Rate in percent; nil
	// for the other workloads.
	RateErrorPct *float64 `json:"rate_error_pct,omitempty"`
	// MaxInWindow is interval's largest number of starts in any window of
	// the rate period, over the whole run; at most RateLimit.
	MaxInWindow int `json:"max_in_window,omitempty"`
	// P50ms, P95ms, P99ms and MaxMs are percentiles in milliseconds of what
	// LatencyOf names; zero for drain.
	P50ms float64 `json:"p50_ms"`
	P95ms float64 `json:"p95_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	// LatencyOf says what the percentiles measure: "enqueue call" (one
	// Enqueue or EnqueueMany call), "enqueue to start" (from just before
	// Enqueue to the start of the job's handler), or empty.
	LatencyOf string `json:"latency_of,omitempty"`
	// Runs is how many runs this result is the median of.
	Runs int `json:"runs"`
	// Steps are the figures of the steps workload; nil for the others.
	Steps *StepsFigures `json:"steps,omitempty"`
	// GoVersion and CPUs describe the machine.
	GoVersion string `json:"go_version"`
	CPUs      int    `json:"cpus"`
}

// What the percentiles of each workload measure.
const (
	LatencyEnqueueCall  = "enqueue call"
	LatencyEnqueueStart = "enqueue to start"
)

// Run runs workload w once on a store opened from t and returns its result.
// It returns a *CheckError when a job did not run exactly once or the store
// still holds one pending, and ctx's error when ctx ends first.
func Run(ctx context.Context, t Target, w Workload, opts *Options) (Result, error) {
	if _, err := ParseWorkload(string(w)); err != nil {
		return Result{}, fmt.Errorf("bench: %w", err)
	}
	o, err := opts.WithDefaults(w)
	if err != nil {
		return Result{}, err
	}
	st, closeStore, err := t.Open(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("bench: open %s store: %w", t.Name, err)
	}
	var res Result
	if w == Steps {
		res, err = runSteps(ctx, st, o)
	} else {
		var r *run
		if r, err = newRun(st, w, o); err == nil {
			err = r.run(ctx)
			res = r.res
		}
	}
	if cerr := closeStore(); cerr != nil && err == nil {
		err = fmt.Errorf("bench: close %s store: %w", t.Name, cerr)
	}
	if err != nil {
		return Result{}, err
	}
	res.Store, res.Synchronous, res.Workload = t.Name, t.Synchronous, w
	res.Runs, res.GoVersion, res.CPUs = 1, runtime.Version(), runtime.NumCPU()
	return res, nil
}

// RunRepeated runs workload w k times and returns the median (see Median).
// It stops at the first failed run.
func RunRepeated(ctx context.Context, t Target, w Workload, opts *Options, k int) (Result, error) {
	if k < 1 {
		return Result{}, fmt.Errorf("bench: repeat count must be at least 1, got %d", k)
	}
	results := make([]Result, 0, k)
	for range k {
		res, err := Run(ctx, t, w, opts)
		if err != nil {
			return Result{}, err
		}
		results = append(results, res)
	}
	return Median(results), nil
}

// randomQueue returns a queue name no other run uses.
func randomQueue() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "bench-" + hex.EncodeToString(b[:])
}
