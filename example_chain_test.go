package sortie_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store/memstore"
)

// Charge, Ship and Notify are the steps of an order's chain.
type (
	Charge struct {
		Order int `json:"order"`
	}
	Ship struct {
		Order int `json:"order"`
	}
	Notify struct {
		Order int `json:"order"`
	}
)

func (Charge) Kind() string { return "charge" }
func (Ship) Kind() string   { return "ship" }
func (Notify) Kind() string { return "notify" }

// A chain runs its steps one after another. When a step is cancelled (or
// dies), the steps after it are cancelled too.
func ExampleClient_EnqueueChain() {
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()

	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Charge]) error {
		fmt.Println("charge order", job.Args.Order)
		return nil
	}), nil)
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Ship]) error {
		if job.Args.Order == 8 {
			fmt.Println("ship order 8: address rejected")
			return sortie.Cancel(errors.New("address rejected"))
		}
		fmt.Println("ship order", job.Args.Order)
		return nil
	}), nil)
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Notify]) error {
		fmt.Println("notify order", job.Args.Order)
		return nil
	}), nil)
	client, err := sortie.NewClient(st, &sortie.Config{Workers: workers})
	if err != nil {
		log.Fatal(err)
	}

	for _, order := range []int{7, 8} {
		res, err := client.EnqueueChain(ctx,
			sortie.EnqueueParams{Args: Charge{Order: order}},
			sortie.EnqueueParams{Args: Ship{Order: order}},
			sortie.EnqueueParams{Args: Notify{Order: order}},
		)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := client.Drain(ctx); err != nil { // runs due jobs inline, as a test would
			log.Fatal(err)
		}
		// The chain is one workflow: its first job's ID names it.
		page, err := client.JobList(ctx, &sortie.JobListParams{WorkflowID: res[0].ID})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("order %d:", order)
		for _, j := range page.Jobs {
			fmt.Printf(" %s %s;", j.Kind, j.State)
		}
		fmt.Println()
	}
	// Output:
	// charge order 7
	// ship order 7
	// notify order 7
	// order 7: charge completed; ship completed; notify completed;
	// charge order 8
	// ship order 8: address rejected
	// order 8: charge completed; ship cancelled; notify cancelled;
}
