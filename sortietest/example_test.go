package sortietest_test

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

// Reminder is the args of the jobs the application under test enqueues.
type Reminder struct {
	User string `json:"user"`
}

func (Reminder) Kind() string { return "reminder" }

// signup is the application code under test: it schedules a reminder.
func signup(ctx context.Context, c *sortie.Client, user string) error {
	_, err := c.Enqueue(ctx, Reminder{User: user}, &sortie.EnqueueOpts{RunIn: 24 * time.Hour})
	return err
}

// A worker's own logic, tested with no store: Work runs it once, as the
// first attempt of a job.
func ExampleWork() {
	worker := sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Reminder]) error {
		if job.Args.User == "" {
			return sortie.Cancel(errors.New("no user"))
		}
		fmt.Printf("reminding %s (attempt %d)\n", job.Args.User, job.Attempt)
		return nil
	})
	ctx := context.Background()
	fmt.Println(sortietest.Work(ctx, worker, Reminder{User: "ada"}))
	err := sortietest.Work(ctx, worker, Reminder{})
	fmt.Println(err, sortie.IsCancel(err))
	// Output:
	// reminding ada (attempt 1)
	// <nil>
	// job cancelled: no user true
}

// Time that moves only when told: a job scheduled a day ahead runs once the
// fake clock gets there, and Drain runs it in the calling goroutine. In a
// test, sortietest.NewClient(t, cfg) builds such a client (memstore and a
// fake clock starting at sortietest.Start) and stops it when the test ends,
// and RequireEnqueued asserts on what the code under test enqueued; an
// example has no *testing.T, so this one builds the client by hand.
func ExampleFakeClock() {
	ctx := context.Background()
	clk := sortietest.NewFakeClock(sortietest.Start)
	st := memstore.New()
	defer st.Close()
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Reminder]) error {
		fmt.Println("reminding", job.Args.User)
		return nil
	}), nil)
	client, err := sortie.NewClient(st, &sortie.Config{Workers: workers, Clock: clk})
	if err != nil {
		log.Fatal(err)
	}

	if err := signup(ctx, client, "ada"); err != nil {
		log.Fatal(err)
	}
	n, _ := client.Drain(ctx)
	fmt.Println("ran before the day passed:", n)
	clk.Advance(24 * time.Hour)
	n, _ = client.Drain(ctx)
	fmt.Println("ran after:", n)
	// Output:
	// ran before the day passed: 0
	// reminding ada
	// ran after: 1
}
