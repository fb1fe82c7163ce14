package sortie_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
)

// An operator's retries keep a chain in order. A → B → C: A dies, B and C
// are cancelled. Retrying B while A is dead leaves B waiting (and revives
// C, cancelled because of B, to wait for it); retrying A, which then
// completes, runs B and then C.
func TestChainRetryRunsInOrder(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		var mu sync.Mutex
		var ran []int
		var failA atomic.Bool
		failA.Store(true)
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Step]) error {
			mu.Lock()
			ran = append(ran, job.Args.N)
			mu.Unlock()
			if job.Args.N == 1 && failA.Load() {
				return errors.New("step 1 fails until fixed")
			}
			return nil
		}), &sortie.WorkerOpts{MaxAttempts: 1})
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 4}}})
		res, err := c.EnqueueChain(ctx, sortie.EnqueueParams{Args: Step{N: 1}}, sortie.EnqueueParams{Args: Step{N: 2}}, sortie.EnqueueParams{Args: Step{N: 3}})
		if err != nil {
			t.Fatal(err)
		}
		a, b, cc := res[0].ID, res[1].ID, res[2].ID
		for id, want := range map[int64]sortie.JobState{a: sortie.JobStateDead, b: sortie.JobStateCancelled, cc: sortie.JobStateCancelled} {
			if row, err := c.Wait(ctx, id); err != nil || row.State != want {
				t.Fatalf("job %d = %v, %v; want %s", id, row, err, want)
			}
		}

		row, err := c.JobRetry(ctx, b)
		if err != nil || row.State != sortie.JobStateWaiting {
			t.Fatalf("JobRetry(step 2) while step 1 is dead = %v, %v; want waiting", row, err)
		}
		if row := mustGet(t, c, cc); row.State != sortie.JobStateWaiting {
			t.Fatalf("step 3 after the retry of step 2 = %s, want waiting (revived, waiting for step 2)", row.State)
		}

		failA.Store(false)
		if row, err := c.JobRetry(ctx, a); err != nil || row.State != sortie.JobStateAvailable {
			t.Fatalf("JobRetry(step 1) = %v, %v; want available", row, err)
		}
		for _, id := range []int64{a, b, cc} {
			if row, err := c.Wait(ctx, id); err != nil || row.State != sortie.JobStateCompleted {
				t.Fatalf("job %d after step 1's retry = %v, %v; want completed", id, row, err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []int{1, 1, 2, 3}; !slices.Equal(ran, want) {
			t.Fatalf("steps ran %v, want %v: step 1's failure, then the chain in order", ran, want)
		}
	})
}

// The client's retention prunes a dead job that a retried job waits for,
// and that job is cancelled at the client's time, naming it.
func TestPruneCancelsJobWaitingForPrunedDependency(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
		died := start.Add(-2 * time.Hour)
		res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: died, Jobs: []*store.NewJob{
			{Kind: "step", Queue: "default", Args: []byte(`{}`), Priority: 2, MaxAttempts: 1},
			{Kind: "step", Queue: "default", Args: []byte(`{}`), Priority: 2, MaxAttempts: 1, DependsOnIndex: []int{0}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		a, b := res[0].ID, res[1].ID
		jobs, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 1, Now: died, Lease: time.Minute}))
		if err != nil || len(jobs) != 1 {
			t.Fatalf("JobFetch() = %v, %v", jobs, err)
		}
		if _, err := st.JobFinish(ctx, &store.JobFinishParams{Now: died, Reports: []*store.Report{{ID: a, ClaimToken: jobs[0].ClaimToken,
			Kind: store.ReportFailed, Error: &store.AttemptError{Message: "boom"}}}}); err != nil {
			t.Fatal(err)
		}
		if row, err := st.JobRetry(ctx, &store.JobRetryParams{ID: b, Now: died}); err != nil || row.State != store.JobStateWaiting {
			t.Fatalf("JobRetry(%d) = %v, %v; want waiting", b, row, err)
		}

		fc := clock.NewFake(start)
		c := startClient(t, st, &sortie.Config{Clock: fc, Lease: 24 * time.Hour, RescueInterval: time.Minute, DeadRetention: time.Hour})
		waitArmed(t, fc, start.Add(time.Minute))
		fc.Advance(time.Minute)
		row, err := c.Wait(ctx, b)
		if err != nil || row.State != sortie.JobStateCancelled || !row.FinalizedAt.Equal(fc.Now()) {
			t.Fatalf("job %d after its dead dependency was pruned = %+v, %v; want cancelled at %v", b, row, err, fc.Now())
		}
	})
}

type Step struct {
	N int `json:"n"`
}

func (Step) Kind() string { return "step" }

func TestChainRunsInOrderAndCancelsRestOnDeath(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		var mu sync.Mutex
		var ran []int
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Step]) error {
			mu.Lock()
			ran = append(ran, job.Args.N)
			mu.Unlock()
			if job.Args.N == 99 {
				return errors.New("step 99 always fails")
			}
			return sortie.SetResult(ctx, job.Args.N*10)
		}), &sortie.WorkerOpts{MaxAttempts: 1})
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 4}}})

		res, err := c.EnqueueChain(ctx, sortie.EnqueueParams{Args: Step{N: 1}}, sortie.EnqueueParams{Args: Step{N: 2}}, sortie.EnqueueParams{Args: Step{N: 3}})
		if err != nil {
			t.Fatal(err)
		}
		last, err := c.Wait(ctx, res[2].ID)
		if err != nil || last.State != sortie.JobStateCompleted {
			t.Fatalf("last step = %v, %v; want completed", last, err)
		}
		mu.Lock()
		if got := ran; len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
			t.Fatalf("chain ran %v, want [1 2 3]", got)
		}
		ran = nil
		mu.Unlock()
		var n int
		if err := c.JobResult(ctx, res[1].ID, &n); err != nil || n != 20 {
			t.Fatalf("JobResult(step 2) = %d, %v; want 20", n, err)
		}
		page, err := c.JobList(ctx, &sortie.JobListParams{WorkflowID: res[0].ID})
		if err != nil || len(page.Jobs) != 3 {
			t.Fatalf("JobList of the chain = %d jobs, %v; want 3", len(page.Jobs), err)
		}

		res, err = c.EnqueueChain(ctx, sortie.EnqueueParams{Args: Step{N: 99}}, sortie.EnqueueParams{Args: Step{N: 100}}, sortie.EnqueueParams{Args: Step{N: 101}})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []sortie.JobState{sortie.JobStateDead, sortie.JobStateCancelled, sortie.JobStateCancelled} {
			row, err := c.Wait(ctx, res[i].ID)
			if err != nil || row.State != want {
				t.Fatalf("step %d = %v, %v; want %s", i+1, row, err, want)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ran) != 1 {
			t.Fatalf("after step 1 died, steps ran: %v; want only step 99", ran)
		}
	})
}

func TestWorkflowDependentsReadResults(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		sums := make(chan int, 1)
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Step]) error {
			if job.Args.N > 0 {
				return sortie.SetResult(ctx, job.Args.N)
			}
			results, err := sortie.DependencyResults(ctx)
			if err != nil {
				return err
			}
			sum := 0
			for _, r := range results {
				var v int
				if err := jsonUnmarshal(r, &v); err != nil {
					return err
				}
				sum += v
			}
			sums <- sum
			return nil
		}), nil)
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 4}}})
		wf := sortie.NewWorkflow()
		a := wf.Add(Step{N: 2}, nil)
		b := wf.Add(Step{N: 40}, nil)
		wf.Add(Step{N: 0}, nil, a, b)
		res, err := c.EnqueueWorkflow(ctx, wf)
		if err != nil {
			t.Fatal(err)
		}
		if row := mustGet(t, c, res[2].ID); row.State != sortie.JobStateWaiting && row.State != sortie.JobStateAvailable && row.State != sortie.JobStateRunning && row.State != sortie.JobStateCompleted {
			t.Fatalf("dependent's state %s right after enqueue", row.State)
		}
		if _, err := c.Wait(ctx, res[2].ID); err != nil {
			t.Fatal(err)
		}
		if sum := <-sums; sum != 42 {
			t.Fatalf("dependent summed its dependencies' results to %d, want 42", sum)
		}
	})
}
