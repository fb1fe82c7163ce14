// Quickstart: an embedded sortie on one SQLite file. It enqueues a few
// jobs, runs them with visible log lines, retries a job that fails once,
// runs a scheduled job two seconds later, and stops cleanly, as a worker
// process does on Ctrl-C.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// Email is a job's args: JSON-encoded in the store, its Kind names the worker.
type Email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// Kind names the worker that runs Email jobs.
func (Email) Kind() string { return "email" }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	dbPath := flag.String("db", "", "SQLite file to use (default: a new file in a temporary directory)")
	flag.Parse()
	if *dbPath == "" {
		dir, err := os.MkdirTemp("", "sortie-quickstart-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*dbPath = filepath.Join(dir, "sortie.db")
	}
	// The demo ends once its jobs are done, or after 30 s.
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))

	// 1. The store: one file, durable commits, no server.
	st, err := sqlitestore.Open(*dbPath, nil)
	if err != nil {
		return err
	}
	defer st.Close()

	// 2. Workers by kind. This one fails the first time it sees "flaky".
	var failedOnce atomic.Bool
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Email]) error {
		if job.Args.Subject == "flaky" && failedOnce.CompareAndSwap(false, true) {
			return errors.New("mail server said 421, try again")
		}
		logger.Info("sending email", "to", job.Args.To, "subject", job.Args.Subject)
		return nil
	}), &sortie.WorkerOpts{
		// Retry quickly so the demo doesn't wait the default backoff.
		RetryPolicy: sortie.RetryPolicyFunc(func(*sortie.JobRow) time.Duration { return time.Second }),
	})

	// 3. A client that enqueues and works the default queue with 4 workers.
	client, err := sortie.NewClient(st, &sortie.Config{
		Queues:  map[string]sortie.QueueConfig{sortie.QueueDefault: {MaxWorkers: 4}},
		Workers: workers,
		Logger:  logger,
	})
	if err != nil {
		return err
	}
	var completed atomic.Int32
	const total = 4
	client.Subscribe(func(e *sortie.Event) {
		if e.Kind == sortie.EventJobFinished && e.Outcome == sortie.OutcomeCompleted && completed.Add(1) == total {
			stop()
		}
	})

	// 4. Enqueue: returns once the job is committed to the file. No worker
	// needs to run for that.
	for _, e := range []Email{{To: "ada@example.com", Subject: "welcome"}, {To: "bob@example.com", Subject: "flaky"}} {
		if _, err := client.Enqueue(ctx, e, nil); err != nil {
			return err
		}
	}
	later, err := client.Enqueue(ctx, Email{To: "cy@example.com", Subject: "reminder"}, &sortie.EnqueueOpts{RunIn: 2 * time.Second})
	if err != nil {
		return err
	}
	logger.Info("scheduled a job", "job_id", later.ID, "state", later.State)
	// Unique jobs: the second enqueue is a duplicate of the first.
	first, _ := client.Enqueue(ctx, Email{To: "dee@example.com", Subject: "digest"}, &sortie.EnqueueOpts{UniqueKey: "digest:dee"})
	dup, _ := client.Enqueue(ctx, Email{To: "dee@example.com", Subject: "digest"}, &sortie.EnqueueOpts{UniqueKey: "digest:dee"})
	logger.Info("unique job", "job_id", first.ID, "second_enqueue_duplicate", dup.Duplicate, "duplicate_of", dup.ID)

	// 5. Run: work until Ctrl-C or SIGTERM (here, also until the jobs are
	// done). The first signal stops fetching and lets running jobs finish
	// within the drain timeout; a second cancels them and puts them back.
	if err := client.Run(ctx, &sortie.RunOpts{DrainTimeout: 10 * time.Second}); err != nil {
		return err
	}
	if n := completed.Load(); n < total {
		logger.Warn("stopped before every job completed", "completed", n, "of", total)
	}
	counts, err := client.JobCounts(context.Background(), "")
	if err != nil {
		return err
	}
	for _, c := range counts {
		logger.Info("jobs in store", "queue", c.Queue, "state", c.State, "count", c.Count)
	}
	return nil
}
