// Order: a job in durable steps on one SQLite file. An order is charged,
// waits for the payment provider's webhook (a child job it spawns and
// awaits), gets its receipt, sleeps "a day" and asks for a review. The
// first attempt dies right after the charge, as a process killed there
// would: the retry finds the charge recorded and does not charge again.
//
//	go run ./examples/order            # "a day" is 3 seconds
//	go run ./examples/order -day 24h   # the real thing, in the background
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

// Order is an order to process.
type Order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// Kind names the worker of Order jobs.
func (Order) Kind() string { return "order" }

// Webhook waits for the payment provider to confirm a charge.
type Webhook struct {
	Charge string `json:"charge"`
}

// Kind names the worker of Webhook jobs.
func (Webhook) Kind() string { return "payment_webhook" }

// Charge is the result of the charge step.
type Charge struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "order:", err)
		os.Exit(1)
	}
}

func run() error {
	day := flag.Duration("day", 3*time.Second, "how long the order sleeps before it asks for a review")
	flag.Parse()
	dir, err := os.MkdirTemp("", "sortie-order-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(filepath.Join(dir, "sortie.db"), nil)
	if err != nil {
		return err
	}
	defer st.Close()

	var charges atomic.Int32
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Order]) error {
		return processOrder(ctx, job, *day, &charges)
	}), nil)
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Webhook]) error {
		fmt.Printf("  webhook: the provider confirmed %s\n", job.Args.Charge)
		return nil
	}), nil)
	client, err := sortie.NewClient(st, &sortie.Config{
		Workers:     workers,
		Queues:      map[string]sortie.QueueConfig{"default": {MaxWorkers: 4}},
		RetryPolicy: sortie.RetryPolicyFunc(func(*sortie.JobRow) time.Duration { return time.Second }),
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()

	res, err := client.Enqueue(ctx, Order{ID: "o-1001", Amount: 4200}, nil)
	if err != nil {
		return err
	}
	row, err := client.Wait(ctx, res.ID)
	if err != nil {
		return err
	}
	fmt.Printf("order job %d %s after %d attempts; the card was charged %d time(s). Its steps:\n", row.ID, row.State, row.Attempt, charges.Load())
	for _, s := range row.Steps {
		fmt.Printf("  %-16s %-6s attempt %d\n", s.Name, s.Kind, s.Attempt)
	}
	return nil
}

// processOrder is the order's handler. Code inside a step runs once per
// job; code outside steps runs on every attempt, so it only reads.
func processOrder(ctx context.Context, job *sortie.Job[Order], day time.Duration, charges *atomic.Int32) error {
	fmt.Printf("order %s: attempt %d\n", job.Args.ID, job.Attempt)
	charge, err := sortie.Step(ctx, "charge", func(ctx context.Context) (Charge, error) {
		n := charges.Add(1)
		fmt.Printf("  charging %d cents (charge number %d)\n", job.Args.Amount, n)
		return Charge{ID: fmt.Sprintf("ch_%s", job.Args.ID), Amount: job.Args.Amount}, nil
	})
	if err != nil {
		return err
	}
	if job.Attempt == 1 {
		// As if the process died here: the charge is recorded, the rest is not.
		return errors.New("the process died right after the charge")
	}
	// Wait for the provider's webhook: a child job, spawned once, awaited
	// without holding a worker.
	if _, err := sortie.Spawn(ctx, "payment-webhook", []sortie.EnqueueParams{{Args: Webhook{Charge: charge.ID}}}, nil); err != nil {
		return err
	}
	confirmed, err := sortie.Await(ctx, "payment-webhook")
	if err != nil {
		return err // the attempt ends here until the webhook job has finished
	}
	if confirmed[0].State != sortie.JobStateCompleted {
		return sortie.Cancel(fmt.Errorf("charge %s was not confirmed", charge.ID))
	}
	if _, err := sortie.Step(ctx, "receipt", func(ctx context.Context) (string, error) {
		fmt.Printf("  sending the receipt for %s\n", charge.ID)
		return "sent", nil
	}); err != nil {
		return err
	}
	if err := sortie.Sleep(ctx, "wait-a-day", day); err != nil {
		return err // the attempt ends here; the job comes back in a day
	}
	_, err = sortie.Step(ctx, "review-request", func(ctx context.Context) (bool, error) {
		fmt.Printf("  asking for a review of order %s\n", job.Args.ID)
		return true, nil
	})
	return err
}
