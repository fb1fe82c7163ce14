package sortie_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// A job retried with no backoff keeps its place: it runs again before the
// jobs queued after it, as a distinct queue's users expect of a job put
// back.
func TestZeroDelayRetryKeepsItsPlace(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		var mu sync.Mutex
		var ran []string
		var c *sortie.Client
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			mu.Lock()
			ran = append(ran, job.Args.Text)
			mu.Unlock()
			if job.Args.Text == "first" && job.Attempt == 1 {
				// Two jobs arrive while the first one runs, then it fails.
				mustEnqueue(t, c, Msg{Text: "second"}, nil)
				mustEnqueue(t, c, Msg{Text: "third"}, nil)
				return errors.New("try again at once")
			}
			return nil
		}), &sortie.WorkerOpts{RetryPolicy: sortie.RetryPolicyFunc(func(*sortie.JobRow) time.Duration { return 0 })})
		c = newClient(t, st, &sortie.Config{Workers: workers})
		mustEnqueue(t, c, Msg{Text: "first"}, nil)
		if _, err := c.Drain(ctx); err != nil {
			t.Fatalf("Drain() = %v", err)
		}
		if want := []string{"first", "first", "second", "third"}; !slices.Equal(ran, want) {
			t.Fatalf("jobs ran in order %v, want %v (the retried job first)", ran, want)
		}
	})
}
