package peers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"

	"github.com/sortiehq/sortie/bench"
)

const usage = `usage: peerbench --peer river|river-raw|backlite [--workload NAME|all] [flags]

Peerbench runs the workloads of ` + "`sortie bench`" + ` (same sizes, same meanings, same
exactly-once check) against River on PostgreSQL, raw PostgreSQL statements, or
backlite on SQLite, and prints sortie bench's table with the peer's version and
settings, or with --json one JSON object per result.

Peers:
  river      River with riverpgxv5; --config defaults (River's defaults, 100
             workers), river-bench (FetchCooldown 2ms, FetchPollInterval 20ms,
             as River's own benchmark; 100 workers) or tuned (river-bench with
             2,000 workers). enqueue-batch uses InsertManyFast, enqueue-single
             Insert. Each run migrates River into a new schema, dropped after.
  river-raw  plain-table baselines: drain is a DELETE ... FOR UPDATE SKIP LOCKED
             LIMIT --workers loop on --producers connections (default 8),
             enqueue-single one-row INSERTs, enqueue-batch COPY FROM --batch
             rows. No latency workload.
  backlite   backlite on SQLite (modernc.org/sqlite; WAL, synchronous FULL,
             busy_timeout 5s); --database is a file, default a new temporary
             one per run. enqueue-single defaults to 20,000 jobs, as sortie
             bench's on SQLite.

Flags:
`

// Main is the peerbench command: it parses args, runs the workloads and
// prints the results to stdout, and returns the exit status (0 when every
// run passed its check, 1 when one failed, 2 for a usage error).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peerbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	var (
		peer      = fs.String("peer", "", "the `peer`: river, river-raw or backlite")
		database  = fs.String("database", "", "PostgreSQL `URL` for river and river-raw (default $SORTIE_TEST_POSTGRES_URL);\nfor backlite a SQLite file (default a new temporary file per run)")
		workload  = fs.String("workload", "all", "the `workload`: enqueue-single, enqueue-batch, drain, latency or all")
		config    = fs.String("config", string(RiverBench), "River's `config`: defaults, river-bench or tuned")
		jobs      = fs.Int("jobs", 0, "`N` jobs per run of the enqueue and drain workloads\n(default 100000; 20000 for enqueue-single on backlite)")
		workers   = fs.Int("workers", 0, "`C` workers (default 100; 2000 for --config tuned);\nfor river-raw drain the LIMIT of each DELETE")
		producers = fs.Int("producers", 0, "`P` goroutines enqueueing at once (default 8, 1 for enqueue-batch);\nfor river-raw drain the number of delete loops")
		batch     = fs.Int("batch", bench.DefaultBatchSize, "jobs per call of enqueue-batch")
		rate      = fs.Float64("rate", bench.DefaultRate, "`R` jobs per second enqueued by latency")
		duration  = fs.Duration("duration", bench.DefaultDuration, "how long latency enqueues, a `duration`")
		repeat    = fs.Int("repeat", 1, "run each workload `K` times and report the medians")
		asJSON    = fs.Bool("json", false, "print one JSON object per result instead of a table")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "peerbench: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case *jobs < 0, *workers < 0, *producers < 0, *batch < 1, !(*rate > 0), *duration <= 0, *repeat < 1:
		return bad("--jobs, --workers, --producers, --batch, --rate, --duration and --repeat must be positive")
	}
	workloads := bench.Workloads()
	if *workload != "all" {
		w, err := bench.ParseWorkload(*workload)
		if err != nil || w == bench.Interval {
			return bad("--workload: want enqueue-single, enqueue-batch, drain, latency or all, got %q", *workload)
		}
		workloads = []bench.Workload{w}
	}
	url := *database
	if url == "" && *peer != "backlite" {
		url = os.Getenv("SORTIE_TEST_POSTGRES_URL")
		if url == "" {
			return bad("--peer %s needs --database or $SORTIE_TEST_POSTGRES_URL", *peer)
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	var p Peer
	var err error
	switch *peer {
	case "river":
		var c RiverConfig
		if c, err = ParseRiverConfig(*config); err != nil {
			return bad("--config: %v", err)
		}
		p, err = OpenRiver(ctx, url, c, logger)
	case "river-raw":
		p, err = OpenRiverRaw(ctx, url)
		if *workload == "all" {
			workloads = []bench.Workload{bench.EnqueueSingle, bench.EnqueueBatch, bench.Drain}
		}
	case "backlite":
		p, err = OpenBacklite(url, logger)
	default:
		return bad("--peer: want river, river-raw or backlite, got %q", *peer)
	}
	if err != nil {
		fmt.Fprintf(stderr, "peerbench: %v\n", err)
		return 1
	}
	defer p.Close()

	out := &printer{w: stdout, json: *asJSON}
	label := p.Name()
	if p.Config() != "" {
		label += " " + p.Config()
	}
	status := 0
	for _, w := range workloads {
		o := Options{Jobs: *jobs, Workers: *workers, Producers: *producers, BatchSize: *batch, Rate: *rate, Duration: *duration}
		results := make([]bench.Result, 0, *repeat)
		for range *repeat {
			res, err := p.Run(ctx, w, o)
			if err != nil {
				if ctx.Err() != nil {
					fmt.Fprintf(stderr, "peerbench: interrupted during %s on %s\n", w, label)
					return 1
				}
				report(stderr, label, w, err)
				status = 1
				break
			}
			res.Store, res.Workload, res.Runs = label, w, 1
			res.GoVersion, res.CPUs = runtime.Version(), runtime.NumCPU()
			results = append(results, res)
		}
		if len(results) < *repeat {
			continue
		}
		r := Result{Result: bench.Median(results), Peer: p.Name(), Config: p.Config(), Version: p.Version(), Settings: p.Settings(w, o)}
		if err := out.print(r); err != nil {
			fmt.Fprintf(stderr, "peerbench: %v\n", err)
			return 1
		}
	}
	return status
}

// report prints a failed run, a failed check one problem a line.
func report(w io.Writer, label string, wl bench.Workload, err error) {
	var ce *bench.CheckError
	if errors.As(err, &ce) {
		fmt.Fprintf(w, "peerbench: %s on %s: FAILED the exactly-once check:\n", wl, label)
		for _, p := range ce.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
		return
	}
	fmt.Fprintf(w, "peerbench: %s on %s: %v\n", wl, label, err)
}
