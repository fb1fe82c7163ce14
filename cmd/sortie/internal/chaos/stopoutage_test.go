package chaos

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

const (
	stopQueue = "stop"
	// stopDeadline is the deadline of the Stop under test, and stopMargin
	// how late past it Stop may return.
	stopDeadline = 2 * time.Second
	stopMargin   = time.Second
	// stopLease is the clients' lease: the jobs Stop could not record are
	// rescued once it runs out.
	stopLease = 2 * time.Second
)

// TestStopDuringOutage calls Client.Stop with a 2 s deadline while the store
// can record nothing (its server down, its disk full, or every call
// failing), with jobs whose handlers returned and jobs still running: Stop
// returns by its deadline, give or take a small margin, with an error (and
// a log line) saying what it could not record. Once the store is back,
// another client rescues those jobs when their leases run out, and
// completes them.
func TestStopDuringOutage(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		for _, f := range b.faults {
			t.Run(b.name+"/"+strings.ReplaceAll(string(f.kind), " ", "_"), func(t *testing.T) {
				t.Parallel()
				testStopDuringOutage(t, b, f)
			})
		}
	}
}

func testStopDuringOutage(t *testing.T, b *backend, f fault) {
	c := newCounts(t, "Stop during outage ("+string(f.kind)+")", b.name)
	tg := f.make(t, b)
	n := pick(4, 16)
	started := make(chan int64, n)
	release := make(chan struct{})
	var runs atomic.Int64
	// A job with For set returns once released, before Stop: its outcome
	// waits to be recorded. The others run until Stop's deadline cancels
	// them.
	l := startLocal(t, tg.st, stopQueue, n, stopLease, func(ctx context.Context, job *sortie.Job[Sleep]) error {
		runs.Add(1)
		started <- job.ID
		if job.Args.For > 0 {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
			}
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	ids, err := enqueueLocal(t.Context(), tg.st, stopQueue, n/2, Sleep{For: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	more, err := enqueueLocal(t.Context(), tg.st, stopQueue, n-n/2, Sleep{})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, more...)
	c.enqueued, c.lost = n, n
	for range n {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatalf("the client started fewer than %d jobs within 30s; its log:\n%s", n, l.logs.tail(20))
		}
	}

	tg.outage.begin(t)
	c.faults = 1
	checkDown(t, tg.st)
	close(release)
	ctx, cancel := context.WithTimeout(t.Context(), stopDeadline)
	defer cancel()
	begin := time.Now()
	var stopErr error
	within(t, stopDeadline+30*time.Second, "Stop during the outage", func() { stopErr = l.client.Stop(ctx) })
	took := time.Since(begin)
	t.Logf("Stop returned after %s: %v", took.Round(time.Millisecond), stopErr)
	if took > stopDeadline+stopMargin {
		t.Errorf("Stop with a %s deadline returned after %s with the store down, want by the deadline (+%s)", stopDeadline, took, stopMargin)
	}
	if stopErr == nil || !strings.Contains(stopErr.Error(), "record") {
		t.Errorf("Stop returned %v, want an error saying what it could not record", stopErr)
	}
	if !l.logs.has(func(line string) bool {
		return (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) && strings.Contains(line, "record")
	}) {
		t.Errorf("the client logged no warning saying what it could not record; its log:\n%s", l.logs.tail(20))
	}

	tg.outage.end(t)
	rescuer := startLocal(t, tg.st, stopQueue, n, stopLease, func(context.Context, *sortie.Job[Sleep]) error {
		runs.Add(1)
		return nil
	})
	rescuer.waitCompleted(t, int64(n), 3*stopLease+30*time.Second)
	c.completed, c.lost, c.pending, c.dead, c.cancelled = n, 0, 0, 0, 0
	c.runs = int(runs.Load())
	c.duplicates, c.explained = c.runs-n, 0
	for _, id := range ids {
		row, err := tg.st.JobGet(t.Context(), &store.JobGetParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if row.State != store.JobStateCompleted || row.Attempt != 2 || len(row.Errors) != 1 || row.Errors[0].Message != store.LeaseLostMessage {
			t.Errorf("job %d is %s after %d attempts with errors %+v, want completed by its rescue: attempt 2, the first lost with its lease",
				id, row.State, row.Attempt, row.Errors)
			continue
		}
		c.explained++
	}
}

// checkDown fails t unless a write to st fails.
func checkDown(t *testing.T, st store.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := probeWrite(ctx, st); err == nil {
		t.Fatal("the store took a write during the outage")
	}
}

// probeWrite makes a write to st that changes something (it pauses or
// resumes a queue of its own), and returns its error.
func probeWrite(ctx context.Context, st store.Store) error {
	const queue = "chaos-probe"
	q, err := st.QueueGet(ctx, &store.QueueGetParams{Queue: queue})
	paused := err == nil && q.Paused
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	_, err = st.QueuePause(ctx, &store.QueuePauseParams{Queue: queue, Paused: !paused, Now: time.Now()})
	return err
}
