package sortie_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// WelcomeEmail is a job's args: stored as JSON, its Kind names the worker.
type WelcomeEmail struct {
	To string `json:"to"`
}

func (WelcomeEmail) Kind() string { return "welcome_email" }

// The quick start: one SQLite file, a worker for one kind, a client that
// works the default queue until it is told to stop, one job enqueued and
// run.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sortie-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	st, err := sqlitestore.Open(filepath.Join(dir, "sortie.db"), nil) // one file, durable commits
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[WelcomeEmail]) error {
		fmt.Printf("sending to %s (attempt %d)\n", job.Args.To, job.Attempt)
		return nil // an error retries with backoff; sortie.Cancel and sortie.Snooze end it otherwise
	}), nil)

	client, err := sortie.NewClient(st, &sortie.Config{
		Queues:  map[string]sortie.QueueConfig{sortie.QueueDefault: {MaxWorkers: 10}},
		Workers: workers,
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.Enqueue(ctx, WelcomeEmail{To: "ada@example.com"}, nil)
	if err != nil {
		log.Fatal(err) // Enqueue returns once the job is committed
	}

	// Run works until SIGINT or SIGTERM: the first stops fetching and lets
	// running jobs finish, a second cancels them and puts them back. Here
	// the end of ctx, once the job has finished, stops it the same way.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	client.Subscribe(func(e *sortie.Event) {
		if e.Kind == sortie.EventJobFinished {
			fmt.Println("outcome:", e.Outcome)
			stop()
		}
	})
	if err := client.Run(runCtx, nil); err != nil {
		log.Fatal(err)
	}
	row, err := client.JobGet(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("job", row.ID, row.State)
	// Output:
	// sending to ada@example.com (attempt 1)
	// outcome: completed
	// job 1 completed
}
