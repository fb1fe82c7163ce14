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
//
// Jobs enqueued by the enqueue workloads are run afterwards (not timed), so
// that their check covers the whole life of each job. Every run uses a queue
// of its own, so runs on a store that holds other jobs stay apart.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
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
)

// Workloads returns every workload in the order `sortie bench --workload all`
// runs them.
func Workloads() []Workload {
	return []Workload{EnqueueSingle, EnqueueBatch, Drain, Latency}
}

// ParseWorkload returns the workload named s, or an error listing the names.
func ParseWorkload(s string) (Workload, error) {
	for _, w := range Workloads() {
		if string(w) == s {
			return w, nil
		}
	}
	return "", fmt.Errorf("unknown workload %q: want enqueue-single, enqueue-batch, drain or latency", s)
}

// Options tune a run. A nil *Options means all defaults; a zero field means
// that field's default.
type Options struct {
	// Jobs is how many jobs the enqueue and drain workloads make. Ignored
	// by latency, which makes Rate × Duration jobs. Defaults to 100,000.
	Jobs int
	// Workers is the number of worker goroutines of the client that runs
	// the jobs (drain, latency, and the untimed run after an enqueue
	// workload). Defaults to 100.
	Workers int
	// Producers is the number of goroutines enqueueing at once in the
	// enqueue workloads. Defaults to 8 for enqueue-single and 1 for
	// enqueue-batch.
	Producers int
	// BatchSize is the number of jobs per EnqueueMany call of enqueue-batch.
	// Defaults to 1,000.
	BatchSize int
	// Rate is how many jobs per second latency enqueues. Defaults to 500.
	Rate float64
	// Duration is how long latency enqueues. Defaults to 5 seconds.
	Duration time.Duration
	// StallTimeout fails a run when no job makes progress for this long.
	// Defaults to 30 seconds.
	StallTimeout time.Duration
	// Logger receives the client's logs. Defaults to discarding them.
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultJobs          = 100_000
	DefaultWorkers       = 100
	DefaultProducers     = 8
	DefaultBatchSize     = 1000
	DefaultRate          = 500
	DefaultDuration      = 5 * time.Second
	DefaultStallTimeout  = 30 * time.Second
	defaultBatchProducer = 1
)

// withDefaults validates o for workload w and fills in the defaults.
func (o *Options) withDefaults(w Workload) (Options, error) {
	var v Options
	if o != nil {
		v = *o
	}
	for _, f := range []struct {
		name string
		val  int
	}{{"Jobs", v.Jobs}, {"Workers", v.Workers}, {"Producers", v.Producers}, {"BatchSize", v.BatchSize}} {
		if f.val < 0 {
			return v, fmt.Errorf("bench: Options.%s must not be negative, got %d", f.name, f.val)
		}
	}
	if v.Rate < 0 || v.Duration < 0 || v.StallTimeout < 0 {
		return v, fmt.Errorf("bench: Options.Rate, Duration and StallTimeout must not be negative")
	}
	if v.Jobs == 0 {
		v.Jobs = DefaultJobs
	}
	if v.Workers == 0 {
		v.Workers = DefaultWorkers
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
	// Jobs is the number of jobs the run made and ran.
	Jobs int `json:"jobs"`
	// Workers is the size of the worker pool, for drain and latency.
	Workers int `json:"workers,omitempty"`
	// Producers is the number of concurrent enqueuers, for enqueue workloads.
	Producers int `json:"producers,omitempty"`
	// BatchSize is the number of jobs per call, for enqueue-batch.
	BatchSize int `json:"batch_size,omitempty"`
	// Rate is the asked enqueue rate in jobs per second, for latency.
	Rate float64 `json:"rate,omitempty"`
	// Seconds is the length of the timed phase.
	Seconds float64 `json:"seconds"`
	// JobsPerSec is Jobs / Seconds: throughput, or for latency the rate
	// achieved.
	JobsPerSec float64 `json:"jobs_per_sec"`
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
	// GoVersion and CPUs describe the machine.
	GoVersion string `json:"go_version"`
	CPUs      int    `json:"cpus"`
}

// What the percentiles of each workload measure.
const (
	latencyEnqueueCall  = "enqueue call"
	latencyEnqueueStart = "enqueue to start"
)

// Run runs workload w once on a store opened from t and returns its result.
// It returns a *CheckError when a job did not run exactly once or the store
// still holds one pending, and ctx's error when ctx ends first.
func Run(ctx context.Context, t Target, w Workload, opts *Options) (Result, error) {
	if _, err := ParseWorkload(string(w)); err != nil {
		return Result{}, fmt.Errorf("bench: %w", err)
	}
	o, err := opts.withDefaults(w)
	if err != nil {
		return Result{}, err
	}
	st, closeStore, err := t.Open(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("bench: open %s store: %w", t.Name, err)
	}
	r, err := newRun(st, w, o)
	if err == nil {
		err = r.run(ctx)
	}
	if cerr := closeStore(); cerr != nil && err == nil {
		err = fmt.Errorf("bench: close %s store: %w", t.Name, cerr)
	}
	if err != nil {
		return Result{}, err
	}
	res := r.res
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
