package peers

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sortiehq/sortie/bench"
)

// River across processes: the same drain as bench.DrainProcesses, with
// River's workers in helper processes (peerbench river-worker), so that
// both can be timed on the same worker hosts (internal/testkit/netns) and links.

// RunRiverHelper is peerbench river-worker: it works queue a.Queue of the
// River tables in schema of the database at url with a.Workers workers
// until ctx ends, speaking bench's helper protocol on stdout (RunHelpers).
func RunRiverHelper(ctx context.Context, url, schema string, config RiverConfig, a bench.HelperArgs, stdout io.Writer, logger *slog.Logger) error {
	pool, err := pgPool(ctx, url)
	if err != nil {
		return fmt.Errorf("river: connect: %w", err)
	}
	defer pool.Close()
	var mu sync.Mutex
	var ran []int64
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, job *river.Job[jobArgs]) error {
		mu.Lock()
		ran = append(ran, job.Args.Seq)
		mu.Unlock()
		return nil
	}))
	cfg := (&River{config: config, logger: logger}).clientConfig(schema, a.Workers)
	cfg.Queues = map[string]river.QueueConfig{a.Queue: {MaxWorkers: a.Workers}}
	cfg.Workers = workers
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return fmt.Errorf("river: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("river: start client: %w", err)
	}
	if err := bench.WriteHelperReady(stdout); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if err := client.Stop(sctx); err != nil {
		return fmt.Errorf("river: stop client: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return bench.WriteHelperReport(stdout, a.ID, ran)
}

// riverWorkerMain is peerbench river-worker's command line: --database,
// --schema and --config, then the flags of bench.HelperArgs.
func riverWorkerMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peerbench river-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	database := fs.String("database", "", "PostgreSQL `URL`")
	schema := fs.String("schema", "", "the run's River `schema`")
	config := fs.String("config", string(RiverBench), "River's `config`: defaults, river-bench or tuned")
	var a bench.HelperArgs
	a.SetFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c, err := ParseRiverConfig(*config)
	if err != nil || *database == "" || *schema == "" || a.Queue == "" || a.Workers < 1 {
		fmt.Fprintln(stderr, "peerbench river-worker: needs --database, --schema, --queue, --workers and a known --config")
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := RunRiverHelper(ctx, *database, *schema, c, a, stdout, logger); err != nil {
		fmt.Fprintf(stderr, "peerbench river-worker: %v\n", err)
		return 1
	}
	return 0
}

// RiverDrainProcesses is bench.DrainProcesses for River: in a new schema
// of the database at url it starts one helper per command (a peerbench
// river-worker for the schema it is given, to which RunHelpers appends
// the HelperArgs flags), pauses the queue once they are ready, inserts
// jobs no-op jobs, and times the helpers from the queue's resume until
// River counts every job completed. Every job must have run once.
func RiverDrainProcesses(ctx context.Context, url string, jobs, workers int, commands []func(schema string) []string, logger *slog.Logger) (*bench.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pool, err := pgPool(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("river: connect: %w", err)
	}
	defer pool.Close()
	schema, err := riverSchema(ctx, pool, logger)
	if err != nil {
		return nil, err
	}
	defer func() { _ = dropSchema(ctx, pool, schema) }()
	// An insert-only client (no queues) pauses, fills and resumes.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger, Schema: schema})
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	queue := randomName("peerbench_")
	var lines [][]string
	for _, c := range commands {
		lines = append(lines, c(schema))
	}
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	var took time.Duration
	ran, err := bench.RunHelpers(ctx, lines, bench.HelperArgs{Queue: queue, Workers: workers, ID: queue}, jobs, func(ctx context.Context) error {
		if err := client.QueuePause(ctx, queue, nil); err != nil {
			return fmt.Errorf("river: pause: %w", err)
		}
		if err := bench.Preload(ctx, jobs, func(ctx context.Context, lo, hi int64) error {
			params := make([]river.InsertManyParams, hi-lo)
			for i := range params {
				params[i] = river.InsertManyParams{Args: jobArgs{Seq: lo + int64(i)}, InsertOpts: &river.InsertOpts{Queue: queue}}
			}
			_, err := client.InsertManyFast(ctx, params)
			return err
		}); err != nil {
			return fmt.Errorf("river: insert: %w", err)
		}
		start := time.Now()
		if err := client.QueueResume(ctx, queue, nil); err != nil {
			return fmt.Errorf("river: resume: %w", err)
		}
		for {
			var n int64
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE state = 'completed'").Scan(&n); err != nil {
				return fmt.Errorf("river: count completed jobs: %w", err)
			}
			if n >= int64(jobs) {
				took = time.Since(start)
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if err := bench.CheckRanOnce(ran); err != nil {
		return nil, err
	}
	res := &bench.Result{Store: "river", Workload: bench.Drain, Jobs: jobs, Workers: workers * len(commands), Processes: len(commands)}
	res.SetThroughput(jobs, took)
	return res, nil
}

// riverWorkerCommand returns the command line of a river-worker of exe
// on the database at url, for RiverDrainProcesses.
func riverWorkerCommand(prefix []string, exe, url string, config RiverConfig) func(schema string) []string {
	return func(schema string) []string {
		return append(prefix[:len(prefix):len(prefix)], exe, "river-worker", "--database", url, "--schema", schema,
			"--config", string(config))
	}
}
