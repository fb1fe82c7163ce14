package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

const benchDescription = `
Bench runs sortie's benchmark workloads on a store and prints a table, or with
--json one JSON object per result. Every run checks that each job ran exactly
once and that none is left in the store; a failed check is reported on stderr
and the exit status is 1.

Workloads:
  enqueue-single  --producers goroutines (default 8) enqueue --jobs jobs, one per call
  enqueue-batch   EnqueueMany with --batch jobs (default 1,000) per call
  drain           --jobs no-op jobs preloaded, then --workers workers run them all
                  (timed until the store counts every job completed)
  latency         --workers idle workers; jobs enqueued at --rate per second for
                  --duration; percentiles of enqueue -> handler start
  all             each of the above in turn
  steps           durable steps: a step record against a lease heartbeat (--calls
                  of each), --jobs jobs of 10 steps (default 2,000) against 10 times
                  as many plain jobs, and --rounds parents (default 5) each spawning
                  --children children (default 10,000) and awaiting them: the time
                  from the last child's outcome to the parent's resumption
  interval        a queue limited to --rate starts per --period, preloaded, worked
                  for --duration by --processes client processes (default 2: this
                  one and copies of it) with --workers workers each (default
                  rate/processes, at most 100); SQLite, PostgreSQL or Redis
                  (memory with --processes 1 only; on PostgreSQL the helper
                  processes join the run's schema, on Redis its key prefix).
                  Measures the start rate over the whole periods of --duration
                  from the first start (working on until they have passed), and
                  the most starts in any period (the rate error is a figure);
                  fails when a period holds more than --rate starts,
                  a process started no job, or a started job did not run once

The enqueue workloads' percentiles are per call. With --repeat K each figure
is the median of K runs.

On PostgreSQL each run gets a schema of its own, dropped after it, unless
--schema names one; on Redis each run gets a key prefix of its own, whose
keys are deleted after it, unless the URL names one with ?prefix=NAME. A
named schema or prefix is kept.`

// benchFlags are the parsed flags of `sortie bench`.
type benchFlags struct {
	store, schema, workload, synchronous string
	jobs, workers, producers             int
	batch, repeat                        int
	rate                                 float64
	duration, period                     time.Duration
	processes                            int
	children, rounds, calls              int
	json, relaxedClaims                  bool
	cpuprofile                           string
}

func runBench(ctx context.Context, e *env, args []string) int {
	var f benchFlags
	fs := flagSet("bench", "[--store memory|sqlite|sqlite:PATH|postgres://URL|redis://URL] [--workload NAME|all] [flags]", benchDescription, "cpuprofile")
	fs.StringVar(&f.store, "store", "memory", storeFlagHelp)
	fs.StringVar(&f.schema, "schema", "", "PostgreSQL `schema` to run in, kept afterwards\n(default: a new schema per run, dropped after it)")
	fs.StringVar(&f.workload, "workload", "all", "the `workload`: enqueue-single, enqueue-batch, drain, latency, all, interval or steps")
	fs.IntVar(&f.jobs, "jobs", 0, "`N` jobs per run of the enqueue and drain workloads\n(default 100000; 20000 for enqueue-single on sqlite)")
	fs.IntVar(&f.workers, "workers", bench.DefaultWorkers, "`C` worker goroutines running the jobs\n(per process for interval: default rate/processes, at most 100)")
	fs.IntVar(&f.producers, "producers", 0, "`P` goroutines enqueueing at once\n(default 8 for enqueue-single, 1 for enqueue-batch)")
	fs.IntVar(&f.batch, "batch", bench.DefaultBatchSize, "jobs per EnqueueMany call of enqueue-batch")
	fs.Float64Var(&f.rate, "rate", bench.DefaultRate, "`R` jobs per second enqueued by latency;\nfor interval the queue's rate limit, R starts per --period")
	fs.DurationVar(&f.duration, "duration", bench.DefaultDuration, "how long latency enqueues and interval works its queue,\na `duration` like 5s")
	fs.DurationVar(&f.period, "period", bench.DefaultPeriod, "interval's rate period, a `duration`")
	fs.IntVar(&f.processes, "processes", bench.DefaultProcesses, "`N` client processes working interval's queue, this one included")
	fs.IntVar(&f.children, "children", bench.DefaultChildren, "`N` children each parent of steps spawns and awaits")
	fs.IntVar(&f.rounds, "rounds", bench.DefaultRounds, "`N` parents steps runs, one at a time")
	fs.IntVar(&f.calls, "calls", bench.DefaultStepCalls, "`N` step records and as many heartbeats steps times")
	fs.IntVar(&f.repeat, "repeat", 1, "run each workload `K` times and report the medians")
	fs.BoolVar(&f.json, "json", false, "print one JSON object per result instead of a table")
	fs.StringVar(&f.synchronous, "synchronous", "full", "SQLite commit durability, `mode` full (survives a power cut) or normal")
	fs.BoolVar(&f.relaxedClaims, "relaxed-claims", false, "SQLite with full: commit claims and outcomes without waiting for the disk\n(enqueues stay fully synced; see sqlitestore.Options.RelaxedClaims)")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the runs to `file`")
	if code := parseFlags(e, fs, args); code >= 0 {
		return code
	}
	plan, msg := f.plan(fs)
	if msg != "" {
		return usageError(e, fs, "%s", msg)
	}
	if f.cpuprofile != "" {
		stop, err := startCPUProfile(f.cpuprofile)
		if err != nil {
			fmt.Fprintf(e.stderr, "sortie bench: %v\n", err)
			return exitError
		}
		defer stop()
	}
	return f.runAll(ctx, e, plan)
}

// benchPlan is what a checked bench command line runs.
type benchPlan struct {
	spec      storeSpec
	workloads []bench.Workload
	sync      sqlitestore.Synchronous
	target    bench.Target
	// set holds the flags given on the command line.
	set map[string]bool
}

// plan checks the flags and returns what to run, or the usage error.
func (f *benchFlags) plan(fs *flag.FlagSet) (*benchPlan, string) {
	p := &benchPlan{set: map[string]bool{}}
	fs.Visit(func(fl *flag.Flag) { p.set[fl.Name] = true })
	spec, err := parseStoreFlag(f.store)
	if err != nil {
		return nil, err.Error()
	}
	p.spec = spec
	p.workloads = bench.Workloads()
	if f.workload != "all" {
		w, err := bench.ParseWorkload(f.workload)
		if err != nil {
			return nil, fmt.Sprintf("--workload: %v (or all)", err)
		}
		p.workloads = []bench.Workload{w}
	}
	if msg := f.checkNumbers(fs, p.set); msg != "" {
		return nil, msg
	}
	if p.sync, err = parseSynchronous(f.synchronous); err != nil {
		return nil, err.Error()
	}
	if msg := f.checkStore(p); msg != "" {
		return nil, msg
	}
	p.target = f.target(p)
	return p, ""
}

// checkNumbers says which numeric flag is out of range, if one is.
func (f *benchFlags) checkNumbers(fs *flag.FlagSet, set map[string]bool) string {
	for _, c := range []struct {
		name string
		bad  bool
	}{
		{"jobs", f.jobs < 0 || set["jobs"] && f.jobs == 0},
		{"workers", f.workers < 1},
		{"producers", f.producers < 0 || set["producers"] && f.producers == 0},
		{"batch", f.batch < 1},
		{"rate", !(f.rate > 0)},
		{"duration", f.duration <= 0},
		{"period", f.period <= 0},
		{"processes", f.processes < 1},
		{"repeat", f.repeat < 1},
		{"children", f.children < 1},
		{"rounds", f.rounds < 1},
		{"calls", f.calls < 1},
	} {
		if c.bad {
			return fmt.Sprintf("--%s must be positive, got %s", c.name, fs.Lookup(c.name).Value)
		}
	}
	return ""
}

// checkStore says which flag does not go with the store or workload.
func (f *benchFlags) checkStore(p *benchPlan) string {
	switch {
	case p.set["schema"] && schemaFlagErr(p.spec.kind) != nil:
		return schemaFlagErr(p.spec.kind).Error()
	case p.spec.kind != storeSQLite && (p.set["synchronous"] || p.set["relaxed-claims"]):
		return "--synchronous and --relaxed-claims apply to sqlite stores only"
	case f.relaxedClaims && p.sync != sqlitestore.SynchronousFull:
		return "--relaxed-claims needs --synchronous full"
	case !slices.Contains(p.workloads, bench.Interval):
		return ""
	case p.spec.kind == storeMemory && f.processes > 1:
		return fmt.Sprintf("--workload interval with --processes %d needs a SQLite, PostgreSQL or Redis store: "+
			"the memory store cannot be shared across processes (use --store sqlite, a postgres:// or redis:// URL, or --processes 1)", f.processes)
	case f.rate != math.Trunc(f.rate):
		return fmt.Sprintf("--rate must be a whole number for interval (the queue's rate limit), got %g", f.rate)
	case f.duration < f.period:
		return fmt.Sprintf("--duration (%s) must be at least --period (%s) for interval", f.duration, f.period)
	}
	return ""
}

// target is the store the plan benchmarks.
func (f *benchFlags) target(p *benchPlan) bench.Target {
	switch p.spec.kind {
	case storeSQLite:
		t := bench.SQLite(p.spec.path, "", &sqlitestore.Options{Synchronous: p.sync, RelaxedClaims: f.relaxedClaims})
		if f.relaxedClaims {
			t.Synchronous += "+relaxed"
		}
		return t
	case storePostgres:
		return bench.Postgres(p.spec.dsn, f.schema)
	case storeRedis:
		t := bench.Redis(p.spec.dsn)
		open := t.Open
		t.Open = func(ctx context.Context) (store.Store, func() error, error) {
			st, closeStore, err := open(ctx)
			if err != nil {
				return nil, nil, explainRedisErr(err, p.spec.dsn)
			}
			return st, closeStore, nil
		}
		return t
	}
	return bench.Memory()
}

// startCPUProfile writes a CPU profile to path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	pf, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		_ = pf.Close()
		return nil, fmt.Errorf("start CPU profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); _ = pf.Close() }, nil
}

// runAll runs the plan's workloads in turn, printing each result.
func (f *benchFlags) runAll(ctx context.Context, e *env, p *benchPlan) int {
	target := p.target
	out := newResultPrinter(e.stdout, f.json)
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	status := exitOK
	for _, w := range p.workloads {
		res, err := bench.RunRepeated(ctx, target, w, f.options(w, p, logger), f.repeat)
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintf(e.stderr, "sortie bench: interrupted during %s on %s\n", w, storeLabel(target.Name, target.Synchronous))
				return exitError
			}
			reportBenchError(e.stderr, target, w, err)
			status = exitError
			continue
		}
		if err := out.print(res); err != nil {
			fmt.Fprintf(e.stderr, "sortie bench: %v\n", err)
			return exitError
		}
	}
	return status
}

// options are workload w's options under the flags.
func (f *benchFlags) options(w bench.Workload, p *benchPlan, logger *slog.Logger) *bench.Options {
	opts := &bench.Options{
		Jobs: f.jobs, Workers: f.workers, Producers: f.producers, BatchSize: f.batch,
		Rate: f.rate, Duration: f.duration, Logger: logger, Children: f.children, Rounds: f.rounds, StepCalls: f.calls,
	}
	if w == bench.Interval {
		opts.Period, opts.Processes = f.period, f.processes
		opts.HelperCommand = helperCommand(p.spec.dsn, p.sync, f.relaxedClaims)
		if !p.set["workers"] {
			opts.Workers = 0 // interval's own default
		}
	}
	if opts.Jobs == 0 && p.spec.kind == storeSQLite && w == bench.EnqueueSingle {
		opts.Jobs = bench.DefaultSQLiteSingleJobs // otherwise bench.DefaultJobs
	}
	return opts
}

// reportBenchError prints a failed run on w, a failed check one problem a
// line.
func reportBenchError(w io.Writer, t bench.Target, wl bench.Workload, err error) {
	name := storeLabel(t.Name, t.Synchronous)
	var ce *bench.CheckError
	if errors.As(err, &ce) {
		check := "the exactly-once check"
		if wl == bench.Interval {
			check = "the rate and exactly-once check"
		}
		fmt.Fprintf(w, "sortie bench: %s on %s: FAILED %s:\n", wl, name, check)
		for _, p := range ce.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
		return
	}
	fmt.Fprintf(w, "sortie bench: %s on %s: %v\n", wl, name, err)
}

func storeLabel(name, synchronous string) string {
	if synchronous == "" {
		return name
	}
	return name + " " + synchronous
}

// resultPrinter prints results as they come: table rows under one header,
// or JSON lines.
type resultPrinter struct {
	w        io.Writer
	json     bool
	enc      *json.Encoder
	wroteHdr bool
}

func newResultPrinter(w io.Writer, asJSON bool) *resultPrinter {
	p := &resultPrinter{w: w, json: asJSON}
	if asJSON {
		p.enc = json.NewEncoder(w)
	}
	return p
}

func (p *resultPrinter) print(r bench.Result) error {
	if p.json {
		return p.enc.Encode(r)
	}
	if !p.wroteHdr {
		p.wroteHdr = true
		runs := ""
		if r.Runs > 1 {
			runs = fmt.Sprintf(" · each figure the median of %d runs", r.Runs)
		}
		if _, err := fmt.Fprintf(p.w, "# sortie bench · %s %s/%s · %d CPUs%s\n", r.GoVersion, runtime.GOOS, runtime.GOARCH, r.CPUs, runs); err != nil {
			return err
		}
		if err := bench.WriteTableHeader(p.w, "STORE"); err != nil {
			return err
		}
	}
	return bench.WriteTableRow(p.w, storeLabel(r.Store, r.Synchronous), r)
}
