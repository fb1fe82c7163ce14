package sortie_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// stopMargin is how far past its deadline Stop may return: the time to
// notice the deadline and log, with room for a loaded machine.
const stopMargin = 2 * time.Second

// A handler that ignores its context keeps its job claimed when Stop gives
// up on it: no other client may start the job while the handler may still
// run, and the rescue after its lease counts the attempt, so a handler that
// always hangs still reaches dead.
func TestStopLeavesHungHandlerClaimed(t *testing.T) {
	t.Parallel()
	eachStoreFakeTime(t, func(t *testing.T, st store.Store) {
		workers := sortie.NewWorkers()
		started := make(chan struct{}, 1)
		hang := make(chan struct{})
		t.Cleanup(func() { close(hang) })
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			started <- struct{}{}
			<-hang // ignores ctx
			return nil
		}), nil)
		c := newClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		id := mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{MaxAttempts: 1})
		<-started

		const deadline = 300 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		begin := time.Now()
		err := c.Stop(ctx)
		if took := time.Since(begin); took > deadline+stopMargin {
			t.Errorf("Stop() took %s with a %s deadline", took, deadline)
		}
		var serr *sortie.StopError
		if !errors.As(err, &serr) || !slices.Equal(serr.Running, []int64{id}) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop() = %v, want a *StopError naming job %d as still running, wrapping the deadline", err, id)
		}
		row := mustGet(t, c, id)
		if row.State != sortie.JobStateRunning || row.Attempt != 1 {
			t.Fatalf("hung job after Stop: state %s attempt %d, want running on attempt 1 (still claimed)", row.State, row.Attempt)
		}
		now := time.Now()
		rows, err := store.FetchedJobs(st.JobFetch(context.Background(), &store.JobFetchParams{Queue: "default", Limit: 10, Now: now, Lease: time.Minute, Worker: "other"}))
		if err != nil || len(rows) != 0 {
			t.Fatalf("another worker's fetch = %d jobs, %v; want none while the lease holds", len(rows), err)
		}
		// Once the lease has run out the rescue counts the attempt: with
		// one attempt allowed, the job is dead.
		if _, err := st.JobRescue(context.Background(), &store.JobRescueParams{Now: row.LeaseUntil.Add(time.Second), Limit: 10}); err != nil {
			t.Fatal(err)
		}
		if row := mustGet(t, c, id); row.State != sortie.JobStateDead || len(row.Errors) != 1 || row.Errors[0].Message != store.LeaseLostMessage {
			t.Fatalf("after the rescue: state %s errors %+v, want dead with the lost lease recorded", row.State, row.Errors)
		}
	})
}

// Stop returns by its deadline even when the store neither records the
// last outcomes nor answers, and says what it left behind.
func TestStopReturnsByDeadlineWhileStoreHangs(t *testing.T) {
	t.Parallel()
	// Stop's deadline passes on the bubble's fake clock, at once.
	synctest.Test(t, func(t *testing.T) {
		inner := memstore.New()
		t.Cleanup(func() { _ = inner.Close() })
		st := storefault.New(inner)
		t.Cleanup(st.Heal)
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), nil)
		c := newClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 4}}})
		st.Hang("JobFinish")
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		ev := record(t, c)
		id := mustEnqueue(t, c, Msg{}, nil)
		ev.waitFor(t, 10*time.Second, "the job to start", func(e *sortie.Event) bool { return e.Kind == sortie.EventJobStarted && e.Job.ID == id })
		// The completer's call is under way and hangs.
		waitCtx, cancelWait := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelWait()
		if err := st.WaitCalls(waitCtx, "JobFinish", 1); err != nil {
			t.Fatalf("the completer did not call JobFinish: %v", err)
		}

		const deadline = 300 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		begin := time.Now()
		err := c.Stop(ctx)
		if took := time.Since(begin); took > deadline+stopMargin {
			t.Errorf("Stop() took %s with a %s deadline while the store hung", took, deadline)
		}
		var serr *sortie.StopError
		if !errors.As(err, &serr) || serr.Unrecorded != 1 || len(serr.Running) != 0 {
			t.Fatalf("Stop() = %v, want a *StopError with 1 outcome not recorded", err)
		}
	})
}

// Without a deadline, Stop waits for its handlers but gives a failing store
// a bounded time; with an outage during Stop it reports what it could not
// record instead of hanging.
func TestStopReportsOutcomesTheStoreRefused(t *testing.T) {
	t.Parallel()
	// Stop's deadline passes on the bubble's fake clock, at once.
	synctest.Test(t, func(t *testing.T) {
		inner := memstore.New()
		t.Cleanup(func() { _ = inner.Close() })
		st := storefault.New(inner)
		c, id, release := startHeldJob(t, st)
		st.Fail("JobFinish", nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		stopped := make(chan error, 1)
		go func() { stopped <- c.Stop(ctx) }()
		close(release)
		err := <-stopped
		var serr *sortie.StopError
		if !errors.As(err, &serr) || serr.Unrecorded != 1 || !errors.Is(err, storefault.ErrInjected) {
			t.Fatalf("Stop() = %v, want a *StopError with 1 outcome not recorded, wrapping the store's error", err)
		}
		st.Heal()
		if row := mustGet(t, c, id); row.State != sortie.JobStateRunning {
			t.Fatalf("job whose outcome was not recorded: state %s, want running (its lease decides)", row.State)
		}
	})
}

// Cancelling Stop's context cancels the handlers at once. Those that return
// then have their jobs put back (available, the attempt not counted) before
// Stop returns, on every store; only a handler that ignores its context is
// left to its lease, and the *StopError names exactly that job.
func TestForcedStopPutsCancelledJobsBack(t *testing.T) {
	t.Parallel()
	for _, s := range migrateStores() {
		for _, tt := range []struct {
			name string
			hang bool
		}{
			{name: "prompt handlers"},
			{name: "one hung handler", hang: true},
		} {
			t.Run(s.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				testForcedStop(t, s.open(t), tt.hang)
			})
		}
	}
}

func testForcedStop(t *testing.T, st store.Store, hang bool) {
	workers := sortie.NewWorkers()
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		started <- struct{}{}
		if job.Args.Text == "hang" {
			<-release // ignores ctx
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}), nil)
	c := newClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 3}}})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	prompt := []int64{mustEnqueue(t, c, Msg{}, nil), mustEnqueue(t, c, Msg{}, nil)}
	n, hung := len(prompt), int64(0)
	if hang {
		n, hung = n+1, mustEnqueue(t, c, Msg{Text: "hang"}, nil)
	}
	for range n {
		<-started
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.Stop(ctx)
	if !hang && err != nil {
		t.Fatalf("Stop(cancelled ctx) = %v, want nil: every handler returned when cancelled", err)
	}
	if hang {
		var serr *sortie.StopError
		if !errors.As(err, &serr) || !slices.Equal(serr.Running, []int64{hung}) || serr.Unrecorded != 0 || !errors.Is(err, context.Canceled) {
			t.Fatalf("Stop(cancelled ctx) = %#v, want a *StopError naming only the hung job %d as running, nothing unrecorded, wrapping context.Canceled", err, hung)
		}
		if row := mustGet(t, c, hung); row.State != sortie.JobStateRunning || row.Attempt != 1 {
			t.Errorf("hung job after Stop: state %s attempt %d, want running on attempt 1 (left to its lease)", row.State, row.Attempt)
		}
	}
	for _, id := range prompt {
		if row := mustGet(t, c, id); row.State != sortie.JobStateAvailable || row.Attempt != 0 {
			t.Errorf("job %d whose handler returned when cancelled: state %s attempt %d after Stop, want available on attempt 0", id, row.State, row.Attempt)
		}
	}
}

// Past a cancelled context Stop waits only a bounded time: half a second
// for the handlers it cancelled to return, half a second for the store to
// record their releases. A store that hangs then does not hold it longer.
func TestForcedStopBoundedWhileStoreHangs(t *testing.T) {
	t.Parallel()
	// The bounds pass on the bubble's fake clock, at once.
	synctest.Test(t, func(t *testing.T) {
		inner := memstore.New()
		t.Cleanup(func() { _ = inner.Close() })
		st := storefault.New(inner)
		t.Cleanup(st.Heal)
		workers := sortie.NewWorkers()
		started := make(chan struct{}, 1)
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}), nil)
		c := newClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		id := mustEnqueue(t, c, Msg{}, nil)
		<-started
		st.Hang("JobFinish")

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		begin := time.Now()
		err := c.Stop(ctx)
		if took := time.Since(begin); took > time.Second {
			t.Errorf("Stop(cancelled ctx) took %s while the store hung, want at most 1s", took)
		}
		var serr *sortie.StopError
		if !errors.As(err, &serr) || serr.Unrecorded != 1 || len(serr.Running) != 0 {
			t.Fatalf("Stop() = %v, want a *StopError with job %d's release not recorded and no job running", err, id)
		}
	})
}

// A Stop called while a stop command is stopping the client waits for that
// stop: a program that exits when its own Stop returns does not leave
// running jobs behind.
func TestStopWaitsForStopUnderWay(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	workers := sortie.NewWorkers()
	started, release := make(chan struct{}, 1), make(chan struct{})
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		started <- struct{}{}
		<-release
		return nil
	}), nil)
	c := newClient(t, st, &sortie.Config{Workers: workers, ProcessBeat: 10 * time.Millisecond,
		Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := mustEnqueue(t, c, Msg{}, nil)
	<-started
	// The registry's first beat runs on its own goroutine: a command to a
	// process not yet registered is refused.
	testkit.WaitFor(t, 10*time.Second, "the client registers its process", nil, nil, func() (bool, error) {
		procs, err := c.Processes(context.Background())
		return slices.ContainsFunc(procs, func(p *sortie.ProcessRow) bool { return p.ID == c.ID() }), err
	})
	if _, err := c.CommandProcess(context.Background(), c.ID(), sortie.ProcessStop); err != nil {
		t.Fatal(err)
	}
	<-c.StopRequested()
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(context.Background()) }()
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Stop() = %v, want nil", err)
	}
	if row := mustGet(t, c, id); row.State != sortie.JobStateCompleted {
		t.Fatalf("job when Stop returned: state %s, want completed (Stop waits for the stop under way)", row.State)
	}
}
