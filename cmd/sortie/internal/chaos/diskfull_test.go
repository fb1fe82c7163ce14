package chaos

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/store"
)

const diskQueue = "disk"

// TestDiskFull fills the disk under a store while a client works it: the
// write that finds no room fails with an error saying the disk is full and
// naming the file; everything acknowledged before stays, readable; the
// client logs the outage once; once space is freed, work resumes without a
// restart, and the database passes its integrity check.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		for _, f := range b.faults {
			if f.kind == faultDisk {
				t.Run(b.name, func(t *testing.T) {
					t.Parallel()
					testDiskFull(t, b, f)
				})
			}
		}
	}
}

func testDiskFull(t *testing.T, b *backend, f fault) {
	c := newCounts(t, "disk full", b.name)
	tg := f.make(t, b)
	d, ok := tg.outage.(*diskOutage)
	if !ok {
		t.Fatalf("the outage of a %s fault of %s is a %T, want a *diskOutage", f.kind, b.name, tg.outage)
	}
	l := startLocal(t, tg.st, diskQueue, 4, 10*time.Second, func(context.Context, *sortie.Job[Sleep]) error { return nil })
	before := pick(200, 5000)
	if _, err := enqueueLocal(t.Context(), tg.st, diskQueue, before, Sleep{}); err != nil {
		t.Fatal(err)
	}
	c.enqueued, c.lost = before, 0
	l.waitCompleted(t, int64(before), 20*time.Second)

	d.fill(t)
	c.faults = 1
	c.enqueued += d.ballast
	t.Logf("the disk took %d ballast jobs of 32 KiB, then: %v", d.ballast, d.err)
	if msg := d.err.Error(); !strings.Contains(msg, "full") || !strings.Contains(msg, tg.url) || !errors.Is(d.err, sortie.ErrStoreFull) {
		t.Errorf("enqueue on a full disk failed with %q, want an error that says the disk is full, names %s and is sortie.ErrStoreFull", msg, tg.url)
	}
	checkCounts(t, tg.st, diskQueue, map[store.JobState]int{store.JobStateCompleted: before})
	checkCounts(t, tg.st, ballastQueue, map[store.JobState]int{store.JobStateAvailable: d.ballast})

	d.free(t)
	// The jobs after the disk is freed write its size through the store
	// several times over: they fit only if the store reuses the space of
	// its own files (a SQLite write-ahead log copied into the database
	// and restarted).
	after := pick(4000, 20000)
	resumeEnqueue(t, tg.st, after)
	c.enqueued += after
	l.waitCompleted(t, int64(before+after), 20*time.Second)
	stopCtx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := l.client.Stop(stopCtx); err != nil {
		t.Errorf("Stop after the disk was freed: %v", err)
	}
	checkCounts(t, tg.st, diskQueue, map[store.JobState]int{store.JobStateCompleted: before + after})
	checkCounts(t, tg.st, ballastQueue, map[store.JobState]int{store.JobStateAvailable: d.ballast})
	checkSQLite(t, tg.url)
	// A write of the client's own that met the full disk is an outage
	// logged as the store being full (or, had SQLite answered it with an
	// I/O error, unreachable): once when it starts, once when it is over.
	down := l.logs.count(msgFull) + l.logs.count(msgUnreachable)
	if up := l.logs.count(msgRoom) + l.logs.count(msgReachable); down > 1 || up != down {
		t.Errorf("the client logged %d outages and %d ends for one full disk, want at most one, as many of both; its log:\n%s",
			down, up, l.logs.tail(30))
	}
	c.completed, c.pending, c.dead, c.cancelled = before+after, d.ballast, 0, 0
}

// resumeEnqueue enqueues n jobs into diskQueue once the disk was freed:
// the store takes the first within a few seconds, with no restart, and
// the rest at once.
func resumeEnqueue(t *testing.T, st store.Store, n int) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "an enqueue succeeds after the disk was freed", nil, nil, func() (bool, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := enqueueLocal(ctx, st, diskQueue, 1, Sleep{})
		return err == nil, err
	})
	for done := 1; done < n; done += 500 {
		if _, err := enqueueLocal(t.Context(), st, diskQueue, min(500, n-done), Sleep{}); err != nil {
			t.Fatalf("enqueue after the disk was freed, with %d of %d jobs enqueued: %v", done, n, err)
		}
	}
}

// checkCounts fails t unless queue holds exactly the jobs per state in want.
func checkCounts(t *testing.T, st store.Store, queue string, want map[store.JobState]int) {
	t.Helper()
	got, err := stateCounts(t.Context(), st, queue)
	if err != nil {
		t.Fatalf("count the jobs of queue %q: %v", queue, err)
	}
	for _, s := range store.JobStates {
		if got[s] != want[s] {
			t.Errorf("queue %q holds %v jobs per state, want %v", queue, got, want)
			return
		}
	}
}
