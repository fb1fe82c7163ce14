package sortie_test

import (
	"context"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store/memstore"
)

// A job of a rate-limited queue is claimed for a start a little ahead; a
// pause that comes between the claim and that start holds: the handler does
// not start, and the job goes back to available, its attempt not counted,
// to run after the resume.
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
	c := startClient(t, st, &sortie.Config{Workers: workers, Clock: fc, PollInterval: time.Hour, Lease: time.Hour,
		HeartbeatInterval: 10 * time.Minute, RescueInterval: 24 * time.Hour, ProcessBeat: time.Hour,
		Queues: map[string]sortie.QueueConfig{"rated": {MaxWorkers: 1, Settings: &sortie.QueueSettings{RateLimit: 1, RatePeriod: period}}}})
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

	// Resumed, it is claimed once the rate window allows another start
	// (the window keeps the start it reserved), for a start a little
	// ahead again.
	if _, err := c.QueueResume(ctx, "rated"); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		what  string
		match func(d time.Time) bool
	}{
		{"the rate window's next start", func(d time.Time) bool { return d.After(start.Add(period-time.Second)) && !d.After(start.Add(period)) }},
		{"the next reserved start", func(d time.Time) bool { return d.After(fc.Now()) && d.Sub(fc.Now()) <= time.Second }},
	} {
		d, err := fc.AwaitDeadline(waitCtx, step.match)
		if err != nil {
			nd, _ := fc.NextDeadline()
			t.Fatalf("after the resume, no timer for %s: %v (clock %s, start %s, next %s, job %+v)", step.what, err, fc.Now(), start, nd, mustGet(t, c, id))
		}
		fc.Set(d)
	}
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
