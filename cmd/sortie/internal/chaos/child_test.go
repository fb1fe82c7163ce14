package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/cmd/sortie/internal/cli"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
)

// The environment of a process a scenario starts.
const (
	// envBackend names the backend whose open opens envStore.
	envBackend = "SORTIE_CHAOS_BACKEND"
	// envStore is the URL of the store (target.url).
	envStore = "SORTIE_CHAOS_STORE"
	// envQueues lists the queues a worker works with their MaxWorkers:
	// "work:4,other:2".
	envQueues = "SORTIE_CHAOS_QUEUES"
	// envLease is a worker's Config.Lease, as time.ParseDuration reads it.
	envLease = "SORTIE_CHAOS_LEASE"
	// envArgs is the command line of `sortie serve`, a JSON array.
	envArgs = "SORTIE_CHAOS_ARGS"
)

// The roles of the processes (childproc.Start).
const (
	childWorker = "worker"
	childServe  = "serve"
)

// The timing of worker processes, beyond their lease.
const (
	childRescue = 200 * time.Millisecond
	// childPoll is how often a worker looks for jobs without a wake-up:
	// SQLite wakes only the process that enqueued.
	childPoll = 50 * time.Millisecond
)

// childLifetime bounds a process nobody stops, so a scenario that dies
// leaves no process behind for long.
func childLifetime() time.Duration { return pick(5*time.Minute, 90*time.Minute) }

// Sleep is the job of the worker processes: its handler records its start
// in the journal, sleeps For (or until its context ends), records its result
// and its end.
type Sleep struct {
	For time.Duration `json:"for"`
	// FirstFor, when set, is how long the first attempt sleeps instead.
	FirstFor time.Duration `json:"first_for,omitempty"`
}

// Kind implements sortie.JobArgs.
func (Sleep) Kind() string { return "chaos.sleep" }

// ranBy is the result of a Sleep job: the process whose run completed it.
type ranBy struct {
	By string `json:"by"`
}

// childRoles are the main functions of the processes a scenario starts, by
// role; each returns the exit code.
var childRoles = map[string]func() int{
	childServe:  runServe,
	childWorker: runWorkerProcess,
}

// runWorkerProcess is the main function of a worker process, named
// childproc.Name(): its client ID, so the store's AttemptedBy names it.
func runWorkerProcess() int {
	name := childproc.Name()
	logger := childLogger(name)
	if err := runWorker(name, logger); err != nil {
		logger.Error("worker process failed", "err", err)
		return 1
	}
	return 0
}

// runServe runs `sortie serve` with the command line in envArgs until
// SIGTERM.
func runServe() int {
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(envArgs)), &args); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", envArgs, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, childLifetime())
	defer cancel()
	return cli.Run(ctx, args, os.Stdout, os.Stderr)
}

// childLogger logs at Info to stderr (the process's log), without the
// lines of every job's start and finish.
func childLogger(name string) *slog.Logger {
	h := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})
	return slog.New(skipHandler{h}).With("process", name)
}

// skipHandler drops the log lines written for every job.
type skipHandler struct{ slog.Handler }

func (h skipHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "job started" || r.Message == "job finished" {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h skipHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return skipHandler{h.Handler.WithAttrs(attrs)}
}

func (h skipHandler) WithGroup(name string) slog.Handler {
	return skipHandler{h.Handler.WithGroup(name)}
}

// runWorker works the queues in envQueues with Sleep jobs until SIGTERM,
// then stops gracefully.
func runWorker(name string, logger *slog.Logger) error {
	ctx := context.Background()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	b := backendNamed(os.Getenv(envBackend))
	if b == nil || b.open == nil {
		return fmt.Errorf("%s=%q: not a backend several processes can open", envBackend, os.Getenv(envBackend))
	}
	lease, err := time.ParseDuration(os.Getenv(envLease))
	if err != nil {
		return fmt.Errorf("%s: %w", envLease, err)
	}
	queues, err := parseQueues(os.Getenv(envQueues))
	if err != nil {
		return err
	}
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	st, err := b.open(openCtx, os.Getenv(envStore), logger)
	cancel()
	if err != nil {
		return err
	}
	defer closeStore(st)
	j, err := childproc.OpenJournal()
	if err != nil {
		return err
	}
	defer func() { _ = j.Close() }()

	client, err := sortie.NewClient(st, &sortie.Config{
		ID:                name,
		Queues:            queues,
		Workers:           sleepWorkers(j, name),
		Logger:            logger,
		Lease:             lease,
		HeartbeatInterval: lease / 10,
		RescueInterval:    childRescue,
		PollInterval:      childPoll,
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	why := "SIGTERM"
	select {
	case <-term:
	case <-time.After(childLifetime()):
		why = "lifetime"
	}
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop after %s: %w", why, err)
	}
	if why == "lifetime" {
		return errors.New("nobody stopped this worker process within " + childLifetime().String())
	}
	return nil
}

// sleepWorkers registers the handler of Sleep jobs, which journals its runs
// in j.
func sleepWorkers(j *childproc.Journal, name string) *sortie.Workers {
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Sleep]) error {
		if err := j.Start(job.JobRow); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		d := job.Args.For
		if job.Attempt == 1 && job.Args.FirstFor > 0 {
			d = job.Args.FirstFor
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		if err := sortie.SetResult(ctx, ranBy{By: name}); err != nil {
			return err
		}
		if err := j.End(job.JobRow, ctx.Err() != nil); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		return context.Cause(ctx)
	}), nil)
	return workers
}

// parseQueues parses envQueues.
func parseQueues(s string) (map[string]sortie.QueueConfig, error) {
	qc := make(map[string]sortie.QueueConfig)
	for f := range strings.SplitSeq(s, ",") {
		q, n, _ := strings.Cut(f, ":")
		mw, err := strconv.Atoi(n)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", envQueues, s, err)
		}
		qc[q] = sortie.QueueConfig{MaxWorkers: mw}
	}
	return qc, nil
}

// workerEnv is the environment of a worker process working queues (as
// envQueues lists them) of tg's store with lease.
func workerEnv(tg *target, lease time.Duration, queues string) map[string]string {
	return map[string]string{
		envBackend: tg.b.name,
		envStore:   tg.url,
		envQueues:  queues,
		envLease:   lease.String(),
	}
}
