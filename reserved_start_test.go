package sortie_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// A job of a rate-limited queue is claimed for a start a little ahead; a
// pause that comes between the claim and that start holds: the handler does
// not start, and the job goes back to available, its attempt not counted
// and its start given back to the window, to run at once after the resume.
func TestPauseHoldsForReservedStart(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	started := make(chan int64, 2)
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		started <- job.ID
		return nil
	}), nil)
	const period = time.Minute
	c := startClient(t, st, ratedConfig(workers, fc, period))
	ev := record(t, c)
	ctx := t.Context()
	id := mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{Queue: "rated"})

	// The claim reserves a start ahead of the clock (within a second), and
	// the worker waits for it on a timer: the only one due that soon.
	now := fc.Now()
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start, err := fc.AwaitDeadline(waitCtx, func(d time.Time) bool { return d.After(now) && d.Sub(now) <= time.Second })
	if err != nil {
		t.Fatalf("no timer for a reserved start within a second of %s: %v", now, err)
	}
	if row := mustGet(t, c, id); row.State != sortie.JobStateRunning || !row.AttemptedAt.Equal(start) {
		t.Fatalf("job %d waiting for its start: state %s attempted at %s, want running with its start reserved at %s", id, row.State, row.AttemptedAt, start)
	}

	if _, err := c.QueuePause(ctx, "rated"); err != nil {
		t.Fatal(err)
	}
	fc.Set(start)
	ev.finished(t, id, 1)
	select {
	case <-started:
		t.Fatal("the handler started after QueuePause returned, at the job's reserved start")
	default:
	}
	if row := mustGet(t, c, id); row.State != sortie.JobStateAvailable || row.Attempt != 0 {
		t.Fatalf("job after its paused start: state %s attempt %d, want available on attempt 0", row.State, row.Attempt)
	}

	// Resumed, it is claimed again at once, for a start a little ahead:
	// the put-back gave its start back to the window, as it never started.
	if _, err := c.QueueResume(ctx, "rated"); err != nil {
		t.Fatal(err)
	}
	resumed := fc.Now()
	next, err := fc.AwaitDeadline(waitCtx, func(d time.Time) bool { return d.After(resumed) && d.Sub(resumed) <= time.Second })
	if err != nil {
		nd, _ := fc.NextDeadline()
		t.Fatalf("after the resume, no timer for a reserved start within a second of %s: %v (start %s, next timer %s, job %+v)",
			resumed, err, start, nd, mustGet(t, c, id))
	}
	fc.Set(next)
	select {
	case got := <-started:
		if got != id {
			t.Fatalf("started job %d, want %d", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start within 10s of its next reserved start after the resume")
	}
	if row, err := c.Wait(ctx, id); err != nil || row.State != sortie.JobStateCompleted || row.Attempt != 1 {
		t.Fatalf("job after the resume: %+v, %v; want completed on attempt 1", row, err)
	}
}

// A claim of a rate-limited queue that comes back after the start it
// reserved is put back unrun, and gives that start back to the window: the
// job is claimed again at once, for a start a little ahead, not a period
// later. Had the window kept the start that never happened, the queue would
// leave that room unused for a whole period and run below its rate (two
// processes starting at once lost a quarter of their first period so).
func TestLateClaimGivesBackItsStart(t *testing.T) {
	t.Parallel()
	mem := memstore.New()
	t.Cleanup(func() { _ = mem.Close() })
	fc := clock.NewFake(lateClaimStart)
	// The first claim that finds the job comes back a second after its
	// clock reading, past the start it reserved (at most a second ahead).
	st := &lateClaimStore{Store: mem, late: func() { fc.Advance(time.Second + time.Millisecond) }}
	started := make(chan int, 2)
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		started <- job.Attempt
		return nil
	}), nil)
	const period = time.Hour
	c := startClient(t, st, ratedConfig(workers, fc, period))
	ev := record(t, c)
	ctx := t.Context()
	id := mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{Queue: "rated"})

	if e := ev.finished(t, id, 1); e.Outcome != sortie.OutcomeReleased {
		t.Fatalf("the late claim of job %d ended %s, want %s (put back unrun)", id, e.Outcome, sortie.OutcomeReleased)
	}
	now := fc.Now()
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start, err := fc.AwaitDeadline(waitCtx, func(d time.Time) bool { return d.After(now) && d.Sub(now) <= time.Second })
	if err != nil {
		nd, _ := fc.NextDeadline()
		t.Fatalf("after the late claim was put back, no timer for a reserved start within a second of %s: %v (next timer %s, job %+v)",
			now, err, nd, mustGet(t, c, id))
	}
	fc.Set(start)
	select {
	case attempt := <-started:
		if attempt != 1 {
			t.Fatalf("the job started as attempt %d, want 1 (the late claim counted no attempt)", attempt)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start within 10s of its reserved start")
	}
	if row, err := c.Wait(ctx, id); err != nil || row.State != sortie.JobStateCompleted || !row.AttemptedAt.Equal(start) {
		t.Fatalf("job after its second claim: %+v, %v; want completed, started at %s", row, err, start)
	}
}

// fetchCounter counts a store's JobFetch calls.
type fetchCounter struct {
	store.Store
	n atomic.Int32
}

func (s *fetchCounter) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	s.n.Add(1)
	return s.Store.JobFetch(ctx, p)
}

// A worker of a rate-limited queue whose window is full sleeps until the
// claim that reserves the window's next start, and makes it: it does not
// wake short of it and chase the start with claims that each come back
// empty. Here the first claim took 100 ms, so claims reserve their start
// a lead ahead that shrinks at each claim.
func TestRateLimitedFetchWakesOnceForTheNextStart(t *testing.T) {
	t.Parallel()
	mem := memstore.New()
	t.Cleanup(func() { _ = mem.Close() })
	fc := clock.NewFake(lateClaimStart)
	st := &fetchCounter{Store: &lateClaimStore{Store: mem, late: func() { fc.Advance(100 * time.Millisecond) }}}
	started := make(chan int64, 2)
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		started <- job.ID
		return nil
	}), nil)
	const period = time.Minute
	c := startClient(t, st, ratedConfig(workers, fc, period))
	ctx := t.Context()
	for range 2 {
		mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{Queue: "rated"})
	}
	waitStart := func(what string) int64 {
		t.Helper()
		select {
		case id := <-started:
			return id
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not start within 10s", what)
			return 0
		}
	}
	first := waitStart("the first job")
	before := st.n.Load()

	// Step the clock through the worker's timers until the second job starts.
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for step := 0; ; step++ {
		now := fc.Now()
		d, err := fc.AwaitDeadline(waitCtx, func(d time.Time) bool { return d.After(now) && d.Sub(now) <= period+time.Second })
		if err != nil {
			t.Fatalf("step %d: no timer within a period of %s: %v", step, now, err)
		}
		fc.Set(d)
		select {
		case id := <-started:
			if id == first {
				t.Fatalf("job %d started twice", id)
			}
			if fetches := st.n.Load() - before; fetches > 3 {
				t.Errorf("%d claims between the two starts, want at most 3 (one that finds the window full, one for its next start, and one the finish may wake)", fetches)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if step == 10 {
			t.Fatalf("the second job did not start after %d of the worker's timers; %d claims since the first start", step+1, st.n.Load()-before)
		}
	}
}

// ratedConfig is a client of workers on clock fc working queue "rated",
// one start a period, one worker, with nothing else due for hours: no
// poll, heartbeat, rescue or process beat sets a timer the tests await.
func ratedConfig(workers *sortie.Workers, fc *clock.Fake, period time.Duration) *sortie.Config {
	return &sortie.Config{Workers: workers, Clock: fc, PollInterval: time.Hour, Lease: time.Hour,
		HeartbeatInterval: 10 * time.Minute, RescueInterval: 24 * time.Hour, ProcessBeat: time.Hour,
		Queues: map[string]sortie.QueueConfig{"rated": {MaxWorkers: 1, Settings: &sortie.QueueSettings{RateLimit: 1, RatePeriod: period}}}}
}
