package sortie_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// Remote is a kind no worker of the test program runs: it is taken.
type Remote struct {
	N int `json:"n"`
}

func (Remote) Kind() string { return "remote" }

var takeStart = time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)

// waitArmedAt waits until fc's earliest timer is at want, failing the test
// after 10 s of the wall clock.
func waitArmedAt(t *testing.T, fc *clock.Fake, want time.Time) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("the fake clock's next deadline is %v", want), nil, func() string {
		got, ok := fc.NextDeadline()
		return fmt.Sprintf("next deadline %v (armed %v)", got, ok)
	}, func() (bool, error) {
		got, ok := fc.NextDeadline()
		return ok && got.Equal(want), nil
	})
}

type takeResult struct {
	jobs []*sortie.Taken
	err  error
}

func takeAsync(c *sortie.Client, queue string, n int, opts *sortie.TakeOpts) <-chan takeResult {
	done := make(chan takeResult, 1)
	go func() {
		jobs, err := c.Take(context.Background(), queue, n, opts)
		done <- takeResult{jobs, err}
	}()
	return done
}

func awaitTake(t *testing.T, done <-chan takeResult) takeResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Take did not return within 10s")
		return takeResult{}
	}
}

func TestTakeWakesOnEnqueue(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		fc := clock.NewFake(takeStart)
		// The poll is an hour away and the fake clock does not move, so only
		// the store's notification can wake the Take.
		c := newClient(t, st, &sortie.Config{Clock: fc, PollInterval: time.Hour})
		done := takeAsync(c, "default", 5, &sortie.TakeOpts{Remote: true})
		waitArmedAt(t, fc, takeStart.Add(time.Hour))
		id := mustEnqueue(t, c, Remote{N: 1}, nil)
		r := awaitTake(t, done)
		if r.err != nil || len(r.jobs) != 1 || r.jobs[0].ID != id {
			t.Fatalf("Take() = %d jobs, %v; want job %d", len(r.jobs), r.err, id)
		}
		if j := r.jobs[0]; j.State != sortie.JobStateRunning || j.Attempt != 1 || j.ClaimToken == 0 {
			t.Errorf("taken job: state %s, attempt %d, token %d; want running, 1, a token", j.State, j.Attempt, j.ClaimToken)
		}
	})
}

func TestTakeWaitEnds(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(takeStart)
	c := newClient(t, storeFactories[0].new(t), &sortie.Config{Clock: fc, PollInterval: time.Hour})
	done := takeAsync(c, "default", 1, &sortie.TakeOpts{Remote: true, Wait: 5 * time.Second})
	waitArmedAt(t, fc, takeStart.Add(5*time.Second))
	fc.Advance(5 * time.Second)
	if r := awaitTake(t, done); r.err != nil || len(r.jobs) != 0 {
		t.Fatalf("Take() after its wait = %d jobs, %v; want none, nil", len(r.jobs), r.err)
	}
	jobs, err := c.Take(context.Background(), "default", 1, &sortie.TakeOpts{Remote: true, Wait: -1})
	if err != nil || len(jobs) != 0 {
		t.Fatalf("Take(Wait -1) on an empty queue = %d jobs, %v; want none at once", len(jobs), err)
	}
}

func TestTakeStartsAScheduledJobWhenDue(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(takeStart)
	c := newClient(t, storeFactories[0].new(t), &sortie.Config{Clock: fc, PollInterval: time.Hour})
	id := mustEnqueue(t, c, Remote{}, &sortie.EnqueueOpts{RunIn: time.Minute})
	done := takeAsync(c, "default", 1, &sortie.TakeOpts{Remote: true})
	waitArmedAt(t, fc, takeStart.Add(time.Minute))
	fc.Advance(time.Minute)
	if r := awaitTake(t, done); r.err != nil || len(r.jobs) != 1 || r.jobs[0].ID != id {
		t.Fatalf("Take() = %d jobs, %v; want job %d when due", len(r.jobs), r.err, id)
	}
}

func TestReportFailureFollowsTheKindsRetryPolicy(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		fc := clock.NewFake(takeStart)
		workers := sortie.NewWorkers()
		workers.AddKind("remote", &sortie.WorkerOpts{MaxAttempts: 2,
			RetryPolicy: sortie.RetryPolicyFunc(func(*sortie.JobRow) time.Duration { return 7 * time.Minute })})
		c := newClient(t, st, &sortie.Config{Clock: fc, Workers: workers})
		ev := record(t, c)
		id := mustEnqueue(t, c, Remote{}, nil)
		ctx := context.Background()
		jobs, err := c.Take(ctx, "default", 1, &sortie.TakeOpts{Remote: true})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("Take() = %d jobs, %v", len(jobs), err)
		}
		if err := jobs[0].Fail(ctx, errors.New("smtp refused")); err != nil {
			t.Fatalf("Fail() = %v", err)
		}
		row := mustGet(t, c, id)
		if want := takeStart.Add(7 * time.Minute); row.State != sortie.JobStateRetrying || !row.RunAt.Equal(want) {
			t.Errorf("after Fail: state %s, RunAt %v; want retrying at %v (the kind's policy)", row.State, row.RunAt, want)
		}
		if len(row.Errors) != 1 || row.Errors[0].Message != "smtp refused" {
			t.Errorf("errors = %+v, want the reported one", row.Errors)
		}
		if e := ev.finished(t, id, 1); e.Outcome != sortie.OutcomeRetrying || e.Err == nil {
			t.Errorf("finished event: outcome %s, err %v; want retrying with the error", e.Outcome, e.Err)
		}
		fc.Advance(7 * time.Minute)
		jobs, err = c.Take(ctx, "default", 1, &sortie.TakeOpts{Remote: true, Wait: -1})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("second Take() = %d jobs, %v", len(jobs), err)
		}
		res, err := c.Report(ctx, &sortie.Report{ID: id, ClaimToken: jobs[0].ClaimToken, Kind: sortie.ReportFailed})
		if err != nil || res[0].Err != nil || res[0].State != sortie.JobStateDead || res[0].Outcome != sortie.OutcomeDead {
			t.Fatalf("Report(failed, last attempt) = %+v, %v; want dead", res, err)
		}
		if e := ev.finished(t, id, 2); e.Outcome != sortie.OutcomeDead {
			t.Errorf("second finished event: outcome %s, want dead", e.Outcome)
		}
	})
}

func TestReportOfAStaleClaimIsRefused(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		fc := clock.NewFake(takeStart)
		c := newClient(t, st, &sortie.Config{Clock: fc})
		id := mustEnqueue(t, c, Remote{}, nil)
		ctx := context.Background()
		old, err := c.Take(ctx, "default", 1, &sortie.TakeOpts{Remote: true, Lease: time.Second})
		if err != nil || len(old) != 1 {
			t.Fatalf("Take() = %d jobs, %v", len(old), err)
		}
		// The taker stalls past its lease; the job is rescued and taken again.
		if _, err := st.JobRescue(ctx, &store.JobRescueParams{Now: takeStart.Add(time.Minute), Limit: 10}); err != nil {
			t.Fatal(err)
		}
		fc.Advance(time.Minute)
		fresh, err := c.Take(ctx, "default", 1, &sortie.TakeOpts{Remote: true, Wait: -1})
		if err != nil || len(fresh) != 1 {
			t.Fatalf("Take() after the rescue = %d jobs, %v", len(fresh), err)
		}
		if err := old[0].Complete(ctx, map[string]int{"sent": 1}); !errors.Is(err, sortie.ErrLeaseLost) {
			t.Fatalf("stale Complete() = %v, want ErrLeaseLost", err)
		}
		st2, err := c.ExtendLease(ctx, id, old[0].ClaimToken, nil)
		if err != nil || st2.Held {
			t.Fatalf("stale ExtendLease() = %+v, %v; want not held", st2, err)
		}
		row := mustGet(t, c, id)
		if row.State != sortie.JobStateRunning || row.ClaimToken != fresh[0].ClaimToken || row.Result != nil {
			t.Fatalf("job after the stale report: %s, token %d, result %s; want the new claim untouched", row.State, row.ClaimToken, row.Result)
		}
		if err := fresh[0].Complete(ctx, nil); err != nil {
			t.Fatalf("Complete() of the new claim = %v", err)
		}
		if _, err := c.Report(ctx, &sortie.Report{ID: 999, ClaimToken: 1, Kind: sortie.ReportReleased}); err != nil {
			t.Fatal(err)
		}
		res, _ := c.Report(ctx, &sortie.Report{ID: 999, ClaimToken: 1, Kind: sortie.ReportReleased})
		if !errors.Is(res[0].Err, sortie.ErrNotFound) {
			t.Errorf("report on a missing job: %v, want ErrNotFound", res[0].Err)
		}
	})
}

// A report that cannot be checked because the store fails is an error,
// recording nothing, not a refusal of the claim: the worker that took the
// job (here in another process) tries again rather than drop it.
func TestReportWhenTheStoreFails(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	t.Cleanup(func() { _ = inner.Close() })
	st := storefault.New(inner)
	fc := clock.NewFake(takeStart)
	taker := newClient(t, st, &sortie.Config{Clock: fc})
	id := mustEnqueue(t, taker, Remote{}, nil)
	ctx := context.Background()
	jobs, err := taker.Take(ctx, "default", 1, &sortie.TakeOpts{Remote: true})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("Take() = %d jobs, %v", len(jobs), err)
	}
	reporter := newClient(t, st, &sortie.Config{Clock: fc})
	report := &sortie.Report{ID: id, ClaimToken: jobs[0].ClaimToken, Kind: sortie.ReportCompleted}
	st.Fail("JobGet", nil)
	if res, err := reporter.Report(ctx, report); !errors.Is(err, storefault.ErrInjected) {
		t.Fatalf("Report() with the store failing = %+v, %v; want an error wrapping the store's", res, err)
	}
	st.Heal()
	res, err := reporter.Report(ctx, report)
	if err != nil || res[0].Err != nil || res[0].State != sortie.JobStateCompleted {
		t.Fatalf("Report() once the store works = %+v, %v; want the job completed", res, err)
	}
}

func TestTakenJobHeldByTheHeartbeat(t *testing.T) {
	t.Parallel()
	st := storeFactories[0].new(t)
	fc := clock.NewFake(takeStart)
	c := startClient(t, st, &sortie.Config{Clock: fc, Lease: 30 * time.Second, HeartbeatInterval: 10 * time.Second,
		RescueInterval: time.Hour, PollInterval: time.Hour})
	id := mustEnqueue(t, c, Remote{}, nil)
	ctx := context.Background()
	jobs, err := c.Take(ctx, "default", 1, nil)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("Take() = %d jobs, %v", len(jobs), err)
	}
	taken := jobs[0]
	waitArmedAt(t, fc, takeStart.Add(10*time.Second))
	fc.Advance(10 * time.Second)
	testkit.WaitFor(t, 10*time.Second, "a heartbeat extends the lease", nil, nil, func() (bool, error) {
		return !mustGet(t, c, id).LeaseUntil.Before(takeStart.Add(40 * time.Second)), nil
	})
	// The lease is lost behind the client's back: the next heartbeat cancels
	// the taken job's context.
	if _, err := st.JobRescue(ctx, &store.JobRescueParams{Now: takeStart.Add(time.Hour), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	waitArmedAt(t, fc, takeStart.Add(20*time.Second))
	fc.Advance(10 * time.Second)
	select {
	case <-taken.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("taken job's context not cancelled after its lease was lost")
	}
	if cause := context.Cause(taken.Context()); !errors.Is(cause, sortie.ErrLeaseLost) {
		t.Errorf("context cause = %v, want ErrLeaseLost", cause)
	}
	if err := taken.Complete(ctx, nil); !errors.Is(err, sortie.ErrLeaseLost) {
		t.Errorf("Complete() after the lease was lost = %v, want ErrLeaseLost", err)
	}
}

func TestTakeAndStop(t *testing.T) {
	t.Parallel()
	st := storeFactories[0].new(t)
	c := newClient(t, st, &sortie.Config{})
	ctx := context.Background()
	if _, err := c.Take(ctx, "default", 1, nil); !errors.Is(err, sortie.ErrNotStarted) {
		t.Fatalf("Take() on a client not started = %v, want ErrNotStarted", err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	id := mustEnqueue(t, c, Remote{}, nil)
	jobs, err := c.Take(ctx, "default", 1, nil)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("Take() = %d jobs, %v", len(jobs), err)
	}
	blocked := takeAsync(c, "default", 1, nil)
	stopCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(stopCtx) }()
	if r := awaitTake(t, blocked); !errors.Is(r.err, sortie.ErrClosed) {
		t.Errorf("a Take waiting at Stop = %v, want ErrClosed", r.err)
	}
	// Stop waits for the taken job, and cancels its context before its
	// deadline so the taker puts it back.
	select {
	case err := <-stopped:
		t.Fatalf("Stop() = %v before the taken job was reported", err)
	case <-jobs[0].Context().Done():
	}
	if err := jobs[0].Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Stop() = %v, want nil once the taken job was released", err)
	}
	if row := mustGet(t, c, id); row.State != sortie.JobStateAvailable || row.Attempt != 0 {
		t.Errorf("released job: %s, attempt %d; want available, attempt not counted", row.State, row.Attempt)
	}
	if _, err := c.Take(ctx, "default", 1, nil); !errors.Is(err, sortie.ErrClosed) {
		t.Errorf("Take() after Stop = %v, want ErrClosed", err)
	}
}

func TestTakeConcurrently(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		c := startClient(t, st, &sortie.Config{})
		ctx := context.Background()
		const n = 60
		for i := range n {
			mustEnqueue(t, c, Remote{N: i}, nil)
		}
		var mu sync.Mutex
		seen := map[int64]int{}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					jobs, err := c.Take(ctx, "default", 7, &sortie.TakeOpts{Wait: -1})
					if err != nil {
						t.Errorf("Take() = %v", err)
						return
					}
					if len(jobs) == 0 {
						return
					}
					for _, j := range jobs {
						mu.Lock()
						seen[j.ID]++
						mu.Unlock()
						if err := j.Complete(ctx, nil); err != nil {
							t.Errorf("Complete(%d) = %v", j.ID, err)
						}
					}
				}
			}()
		}
		wg.Wait()
		if len(seen) != n {
			t.Fatalf("took %d distinct jobs, want %d", len(seen), n)
		}
		for id, k := range seen {
			if k != 1 {
				t.Errorf("job %d taken %d times", id, k)
			}
		}
		counts, err := c.JobCounts(ctx, "default")
		if err != nil || len(counts) != 1 || counts[0].State != sortie.JobStateCompleted || counts[0].Count != n {
			t.Errorf("counts = %+v, %v; want %d completed", counts, err, n)
		}
	})
}

// On a store that can wait (store.FetchWaiter) a waiting Take waits in the
// store's fetch: an enqueue ends it with the job claimed, without a poll,
// and a client that stops ends it at once.
func TestTakeWaitsInTheStore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inner := memstore.New()
		t.Cleanup(func() { _ = inner.Close() })
		st := &countingWaits{waitingStore: waitingStore{inner}, waiting: make(chan struct{}, 1)}
		const poll = time.Hour
		c := newClient(t, st, &sortie.Config{PollInterval: poll})
		begin := time.Now()
		done := takeAsync(c, "default", 5, &sortie.TakeOpts{Remote: true})
		<-st.waiting
		synctest.Wait()
		id := mustEnqueue(t, c, Remote{N: 1}, nil)
		r := <-done
		if r.err != nil || len(r.jobs) != 1 || r.jobs[0].ID != id {
			t.Fatalf("Take() = %d jobs, %v; want job %d", len(r.jobs), r.err, id)
		}
		if took := time.Since(begin); took >= poll {
			t.Errorf("Take returned after %v, a poll interval", took)
		}

		// A local Take of a started client ends when the client stops.
		w := sortie.NewWorkers()
		sortie.AddWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), nil)
		c2 := newClient(t, st, &sortie.Config{PollInterval: poll, Workers: w, Queues: map[string]sortie.QueueConfig{"other": {MaxWorkers: 1}}})
		if err := c2.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		begin = time.Now()
		done = takeAsync(c2, "default", 1, nil)
		<-st.waiting
		synctest.Wait()
		if err := c2.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := <-done; !errors.Is(r.err, sortie.ErrClosed) {
			t.Errorf("Take() as its client stopped = %d jobs, %v; want ErrClosed", len(r.jobs), r.err)
		}
		if took := time.Since(begin); took >= poll {
			t.Errorf("Take returned %v after its client stopped, a poll interval", took)
		}
	})
}
