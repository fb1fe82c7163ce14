package sortie_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/sortietest"
	"github.com/sortiehq/sortie/store/memstore"
)

// Receipt is the args of a receipt job.
type Receipt struct {
	OrderID int    `json:"order_id"`
	Email   string `json:"email"`
}

func (Receipt) Kind() string { return "receipt" }

// ReceiptWorker sends receipts. A struct worker keeps what its jobs need
// (here a mail function) in its fields.
type ReceiptWorker struct {
	Send func(to string, orderID int) error
}

// Work implements sortie.Worker[Receipt].
func (w *ReceiptWorker) Work(ctx context.Context, job *sortie.Job[Receipt]) error {
	if job.Args.Email == "" {
		// Retrying cannot help: cancel the job, recording why.
		return sortie.Cancel(errors.New("order has no email address"))
	}
	return w.Send(job.Args.Email, job.Args.OrderID) // an error retries the job
}

// A typed worker with per-kind defaults: its own queue, three attempts and a
// fixed retry delay. Drain runs due jobs inline and a fake clock makes the
// retry due, so nothing here waits.
func ExampleAddWorker() {
	ctx := context.Background()
	clk := sortietest.NewFakeClock(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))
	st := memstore.New()
	defer st.Close()

	failures := 1 // the mail server refuses the first message
	send := func(to string, orderID int) error {
		if failures > 0 {
			failures--
			return errors.New("mail server busy")
		}
		fmt.Printf("receipt for order %d sent to %s\n", orderID, to)
		return nil
	}
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, &ReceiptWorker{Send: send}, &sortie.WorkerOpts{
		Queue:       "mail",
		MaxAttempts: 3,
		RetryPolicy: sortie.RetryPolicyFunc(func(*sortie.JobRow) time.Duration { return time.Minute }),
	})
	client, err := sortie.NewClient(st, &sortie.Config{Workers: workers, Clock: clk})
	if err != nil {
		log.Fatal(err)
	}

	paid, _ := client.Enqueue(ctx, Receipt{OrderID: 7, Email: "ada@example.com"}, nil)
	noEmail, _ := client.Enqueue(ctx, Receipt{OrderID: 8}, nil)
	show := func(id int64) {
		row, err := client.JobGet(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("job %d in %s: %s after %d of %d attempts", row.ID, row.Queue, row.State, row.Attempt, row.MaxAttempts)
		if n := len(row.Errors); n > 0 {
			fmt.Printf(", last error %q", row.Errors[n-1].Message)
		}
		fmt.Println()
	}

	n, _ := client.Drain(ctx)
	fmt.Println("first drain ran", n)
	show(paid.ID)
	show(noEmail.ID)

	clk.Advance(time.Minute) // the retry is due
	n, _ = client.Drain(ctx)
	fmt.Println("second drain ran", n)
	show(paid.ID)
	// Output:
	// first drain ran 2
	// job 1 in mail: retrying after 1 of 3 attempts, last error "mail server busy"
	// job 2 in mail: cancelled after 1 of 3 attempts, last error "order has no email address"
	// receipt for order 7 sent to ada@example.com
	// second drain ran 1
	// job 1 in mail: completed after 2 of 3 attempts, last error "mail server busy"
}
