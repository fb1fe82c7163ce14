package peers

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"

	"github.com/sortiehq/sortie/bench"
)

const usage = `usage: peerbench --peer river|river-raw|backlite|asynq|bullmq|redis-raw [--workload NAME|all] [flags]

Peerbench runs the workloads of ` + "`sortie bench`" + ` (same sizes, same meanings, same
exactly-once check) against River on PostgreSQL, raw PostgreSQL statements,
backlite on SQLite, or asynq and BullMQ on Redis, and prints sortie bench's
table with the peer's version and settings, or with --json one JSON object per
result.

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
  asynq      asynq on Redis (--redis); --config defaults (TaskCheckInterval 1s,
             asynq's default) or tuned (100ms). A Server with --workers
             Concurrency on one queue; enqueue-single is Enqueue, enqueue-batch
             --batch Enqueue calls spread over the client's pool (asynq has no
             batch enqueue; not atomic). Completed tasks are deleted
             (Retention 0, asynq's default). Each run uses a new queue,
             peerbench_<random>, whose keys are deleted after.
  bullmq     BullMQ (Node.js) on Redis (--redis), run by node from --bullmq-dir,
             where bullmq/install.sh installs the pinned version. A Worker of
             concurrency --workers; enqueue-single is queue.add, enqueue-batch
             addBulk (one pipeline, not atomic); removeOnComplete. Each run
             uses a new queue, peerbench_<random>, whose keys are deleted after.
  redis-raw  plain-command baselines on Redis (--redis), no script: a job is
             a hash and a sorted-set member; enqueue-single is one MULTI/EXEC
             (HSET, ZADD) a round trip from --producers connections (default
             8), enqueue-batch --batch such transactions pipelined a round trip
             (--batch 16 --producers 8: the pipelined figure), drain ZPOPMIN
             --workers and the popped hashes deleted in one pipeline, on
             --producers connections. No latency workload.

The memory workload (asynq and bullmq only, not part of all) enqueues --jobs
jobs (default 1,000,000) whose args are padded by --payload bytes into an
empty queue, waits for Redis's memory to settle, and reports INFO memory's
used_memory growth per job. Run it on a server nothing else writes to.

Flags:
`

// Main is the peerbench command: it parses args, runs the workloads and
// prints the results to stdout, and returns the exit status (0 when every
// run passed its check, 1 when one failed, 2 for a usage error).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "river-worker" {
		// A helper process of RiverDrainProcesses.
		return riverWorkerMain(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("peerbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	var (
		peer      = fs.String("peer", "", "the `peer`: river, river-raw, backlite, asynq, bullmq or redis-raw")
		database  = fs.String("database", "", "PostgreSQL `URL` for river and river-raw (default $SORTIE_TEST_POSTGRES_URL);\nfor backlite a SQLite file (default a new temporary file per run)")
		redisFlag = fs.String("redis", "", "Redis `URL` for asynq, bullmq and redis-raw (default $SORTIE_TEST_REDIS_URL)")
		bullmqDir = fs.String("bullmq-dir", "", "the `directory` of peerbench.js and its node_modules (default bench/peers/bullmq\nof the source tree peerbench was built from)")
		workload  = fs.String("workload", "all", "the `workload`: enqueue-single, enqueue-batch, drain, latency, all,\nor memory (asynq and bullmq)")
		config    = fs.String("config", "", "the peer's `config`: River's defaults, river-bench (default) or tuned;\nasynq's defaults or tuned (default)")
		jobs      = fs.Int("jobs", 0, "`N` jobs per run of the enqueue, drain and memory workloads\n(default 100000; 20000 for enqueue-single on backlite; 1000000 for memory)")
		payload   = fs.Int("payload", 0, "memory: pad each job's args with `B` bytes")
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
	case *jobs < 0, *workers < 0, *producers < 0, *batch < 1, !(*rate > 0), *duration <= 0, *repeat < 1, *payload < 0:
		return bad("--jobs, --workers, --producers, --batch, --rate, --duration, --repeat and --payload must be positive")
	}
	workloads := bench.Workloads()
	switch *workload {
	case "all":
	case string(Memory):
		workloads = []bench.Workload{Memory}
	default:
		w, err := bench.ParseWorkload(*workload)
		if err != nil || w == bench.Interval {
			return bad("--workload: want enqueue-single, enqueue-batch, drain, latency, all or memory, got %q", *workload)
		}
		workloads = []bench.Workload{w}
	}
	redisPeer := *peer == "asynq" || *peer == "bullmq" || *peer == "redis-raw"
	url := *database
	switch {
	case redisPeer:
		if url != "" {
			return bad("--peer %s takes --redis, not --database", *peer)
		}
		if url = cmp.Or(*redisFlag, os.Getenv("SORTIE_TEST_REDIS_URL")); url == "" {
			return bad("--peer %s needs --redis or $SORTIE_TEST_REDIS_URL", *peer)
		}
	case *redisFlag != "":
		return bad("--redis is for asynq, bullmq and redis-raw; --peer %s takes --database", *peer)
	case url == "" && *peer != "backlite":
		url = os.Getenv("SORTIE_TEST_POSTGRES_URL")
		if url == "" {
			return bad("--peer %s needs --database or $SORTIE_TEST_POSTGRES_URL", *peer)
		}
	}
	if *config != "" && *peer != "river" && *peer != "asynq" {
		return bad("--config is for river and asynq")
	}
	if *bullmqDir != "" && *peer != "bullmq" {
		return bad("--bullmq-dir is for bullmq")
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	var p Peer
	var err error
	switch *peer {
	case "river":
		var c RiverConfig
		if c, err = ParseRiverConfig(cmp.Or(*config, string(RiverBench))); err != nil {
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
	case "asynq":
		var c AsynqConfig
		if c, err = ParseAsynqConfig(cmp.Or(*config, string(AsynqTuned))); err != nil {
			return bad("--config: %v", err)
		}
		p, err = OpenAsynq(ctx, url, c, logger)
	case "bullmq":
		p, err = OpenBullMQ(ctx, url, cmp.Or(*bullmqDir, DefaultBullMQDir()), logger)
	case "redis-raw":
		p, err = OpenRedisRaw(ctx, url)
		if *workload == "all" {
			workloads = []bench.Workload{bench.EnqueueSingle, bench.EnqueueBatch, bench.Drain}
		}
	default:
		return bad("--peer: want river, river-raw, backlite, asynq, bullmq or redis-raw, got %q", *peer)
	}
	if err != nil {
		fmt.Fprintf(stderr, "peerbench: %v\n", err)
		return 1
	}
	defer p.Close()
	mp, memoryPeer := p.(MemoryPeer)
	if workloads[0] == Memory && !memoryPeer {
		return bad("--workload memory is for asynq and bullmq")
	}

	out := &printer{w: stdout, json: *asJSON}
	label := p.Name()
	if p.Config() != "" {
		label += " " + p.Config()
	}
	status := 0
	if workloads[0] == Memory {
		return runMemory(ctx, mp, label, MemoryOptions{Jobs: *jobs, PayloadBytes: *payload}, *repeat, out, stderr)
	}
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

// runMemory runs the memory workload repeat times and prints the run
// whose used_memory growth per job is the median, with the medians of the
// enqueue figures.
func runMemory(ctx context.Context, p MemoryPeer, label string, o MemoryOptions, repeat int, out *printer, stderr io.Writer) int {
	results := make([]bench.Result, 0, repeat)
	stats := make([]MemoryStats, 0, repeat)
	for range repeat {
		res, m, err := p.RunMemory(ctx, o)
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintf(stderr, "peerbench: interrupted during %s on %s\n", Memory, label)
			} else {
				report(stderr, label, Memory, err)
			}
			return 1
		}
		res.Store, res.Workload, res.Runs = label, Memory, 1
		res.GoVersion, res.CPUs = runtime.Version(), runtime.NumCPU()
		results = append(results, res)
		stats = append(stats, m)
	}
	slices.SortFunc(stats, func(a, b MemoryStats) int { return cmp.Compare(a.BytesPerJob, b.BytesPerJob) })
	m := stats[(len(stats)-1)/2]
	r := Result{Result: bench.Median(results), Peer: p.Name(), Config: p.Config(), Version: p.Version(), Settings: p.MemorySettings(o), Memory: &m}
	if err := out.print(r); err != nil {
		fmt.Fprintf(stderr, "peerbench: %v\n", err)
		return 1
	}
	return 0
}
