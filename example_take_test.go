package sortie_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store/memstore"
)

// Resize is a job this program takes itself instead of registering a
// worker for it.
type Resize struct {
	Image string `json:"image"`
}

func (Resize) Kind() string { return "resize" }

// A pull-mode consumer: the program takes jobs when it is ready for them
// and reports how each one ended. A failure goes back into the queue after
// the kind's retry policy, as it would from a worker.
func ExampleClient_Take() {
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()
	workers := sortie.NewWorkers()
	workers.AddKind("resize", &sortie.WorkerOpts{
		RetryPolicy: sortie.RetryPolicyFunc(func(*sortie.JobRow) time.Duration { return time.Minute }),
	})
	client, err := sortie.NewClient(st, &sortie.Config{Workers: workers})
	if err != nil {
		panic(err)
	}
	// A started client keeps the leases of the jobs it hands out.
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)
	for _, image := range []string{"cat.png", "broken.png"} {
		if _, err := client.Enqueue(ctx, Resize{Image: image}, nil); err != nil {
			panic(err)
		}
	}

	// Take blocks until a job is available (or the wait passes).
	jobs, err := client.Take(ctx, "default", 10, &sortie.TakeOpts{Wait: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	for _, job := range jobs {
		var args Resize
		if err := json.Unmarshal(job.Args, &args); err != nil {
			panic(err)
		}
		if args.Image == "broken.png" {
			err = job.Fail(ctx, errors.New("cannot decode image"))
		} else {
			err = job.Complete(ctx, map[string]string{"thumbnail": "thumb-" + args.Image})
		}
		if err != nil {
			panic(err)
		}
		row, _ := client.JobGet(ctx, job.ID)
		fmt.Printf("%s: %s\n", args.Image, row.State)
	}
	// Output:
	// cat.png: completed
	// broken.png: retrying
}
