package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

var watchCases = []testCase{
	{name: "SignalOnEnqueue", run: testWatchEnqueue},
	{name: "SignalAfterCommit", run: testWatchAfterCommit},
	{name: "SignalOnRetryAndRescue", run: testWatchRetryRescue},
	{name: "CloseIdempotent", run: testWatchClose},
}

// signalTimeout bounds the wait for a watch signal.
const signalTimeout = 5 * time.Second

// watch opens a watch on queue; ok is false when the store does not support
// watching (store.ErrUnsupported), which passes.
func watch(t *testing.T, st store.Store, queue string) (w *store.Watch, ok bool) {
	t.Helper()
	w, err := st.QueueWatch(t.Context(), &store.QueueWatchParams{Queue: queue})
	if errors.Is(err, store.ErrUnsupported) {
		t.Logf("QueueWatch returned ErrUnsupported: workers poll this store")
		return nil, false
	}
	if err != nil {
		t.Fatalf("QueueWatch(%q) error: %v", queue, err)
	}
	if w == nil || w.C == nil {
		t.Fatalf("QueueWatch(%q) returned a nil Watch or channel and no error", queue)
	}
	t.Cleanup(w.Close)
	return w, true
}

// drain takes any pending signal off w, so the next one is new.
func drain(t *testing.T, w *store.Watch) {
	t.Helper()
	for {
		select {
		case _, ok := <-w.C:
			if !ok {
				t.Fatal("Watch.C was closed, want it never closed")
			}
		default:
			return
		}
	}
}

// waitSignal fails the test unless w signals within signalTimeout.
func waitSignal(t *testing.T, w *store.Watch, after string) {
	t.Helper()
	timer := time.NewTimer(signalTimeout)
	defer timer.Stop()
	select {
	case _, ok := <-w.C:
		if !ok {
			t.Fatal("Watch.C was closed, want it never closed")
		}
	case <-timer.C:
		t.Fatalf("no signal on the queue's watch within %v after %s", signalTimeout, after)
	}
}

// An enqueue signals every watch of the queue.
func testWatchEnqueue(t *testing.T, e *env) {
	w1, ok := watch(t, e.st, "q")
	if !ok {
		return
	}
	w2, _ := watch(t, e.st, "q")
	other, _ := watch(t, e.st, "other")
	drain(t, w1)
	drain(t, w2)
	drain(t, other)
	j := newJob("watched")
	j.Queue = "q"
	enqueueOne(t, e.st, at(0), j)
	waitSignal(t, w1, "an enqueue")
	waitSignal(t, w2, "an enqueue (second watch)")

	// A scheduled job signals too: a worker resets its timer on it.
	drain(t, w1)
	later := newJob("watched")
	later.Queue, later.RunAt = "q", at(time.Hour)
	enqueueOne(t, e.st, at(0), later)
	waitSignal(t, w1, "an enqueue of a scheduled job")

	// A large batch signals too (pgstore inserts it with COPY).
	drain(t, w1)
	batch := make([]*store.NewJob, 200)
	for i := range batch {
		batch[i] = newJobIn("watched", "q")
	}
	enqueue(t, e.st, at(0), batch...)
	waitSignal(t, w1, "an enqueue of 200 jobs in one call")

	// Signals coalesce: a watch nobody reads never holds up an enqueue.
	for range 20 {
		enqueueOne(t, e.st, at(0), newJobIn("watched", "q"))
	}
	waitSignal(t, w1, "20 enqueues nobody read")
	drain(t, w1)

	// The watch of another queue may get spurious signals, so nothing is
	// asserted about it; it must still work for its own queue.
	drain(t, other)
	j = newJob("watched")
	j.Queue = "other"
	enqueueOne(t, e.st, at(0), j)
	waitSignal(t, other, "an enqueue into its queue")
}

// Subscribers are notified after commit: a watcher that lists the queue as
// soon as it is signalled finds the job.
func testWatchAfterCommit(t *testing.T, e *env) {
	const rounds = 20
	w, ok := watch(t, e.st, "q")
	if !ok {
		return
	}
	drain(t, w)
	for i := range rounds {
		// The watcher answers each signal by listing; a signal may be
		// spurious, so it waits for another until it sees the job.
		found := make(chan string, 1)
		go func() {
			timer := time.NewTimer(signalTimeout)
			defer timer.Stop()
			signalled := false
			for {
				select {
				case <-w.C:
					signalled = true
				case <-timer.C:
					if signalled {
						found <- "signalled, but the job was not listed on any signal (signal sent before commit?)"
					} else {
						found <- "no signal"
					}
					return
				}
				rows, err := e.st.JobList(t.Context(), &store.JobListParams{Queue: "q", Limit: rounds + 1})
				if err != nil {
					found <- fmt.Sprintf("JobList after a signal error: %v", err)
					return
				}
				if len(rows) >= i+1 {
					found <- ""
					return
				}
			}
		}()
		enqueueOne(t, e.st, at(0), newJobIn("watched", "q"))
		if msg := <-found; msg != "" {
			t.Fatalf("round %d, within %v of an enqueue: %s", i, signalTimeout, msg)
		}
		drain(t, w)
	}
}

// A retry and a rescue, which make jobs available again, signal the watch.
func testWatchRetryRescue(t *testing.T, e *env) {
	now := at(time.Hour)
	w, ok := watch(t, e.st, "q")
	if !ok {
		return
	}
	dead := inState(t, e.st, now, store.JobStateDead, "q", "dead", "")
	drain(t, w)
	retryJob(t, e.st, dead.ID, now)
	waitSignal(t, w, "a JobRetry")

	inState(t, e.st, now, store.JobStateRunning, "q", "lost", "")
	drain(t, w)
	wantRescued(t, e.st, now.Add(time.Hour), 10, 1)
	waitSignal(t, w, "a JobRescue")
}

// A watch is signalled by what another handle commits, the way a worker in
// one process must learn of a job enqueued by another without waiting for
// its poll interval (DESIGN.md §3.6): an enqueue, a retry, a rescue and a
// resume through B each signal a watch on A whose worker found nothing to
// fetch and waits.
func testSharedWatch(t *testing.T, e *env) {
	now := at(time.Hour)
	a, b := e.st, e.share(t)
	w, ok := watch(t, a, "q")
	if !ok {
		return
	}
	// A's worker fetches (a kind nobody enqueues, so that the jobs stay
	// for the next step), finds nothing and waits.
	idle := func() {
		t.Helper()
		fetch(t, a, &store.JobFetchParams{Queue: "q", Kinds: []string{"unknown"}, Limit: 10, Now: now, Worker: "A-idle"})
		drain(t, w)
	}
	idle()
	enqueueOne(t, b, now, newJobIn("watched", "q"))
	waitSignal(t, w, "an enqueue through B")

	dead := inState(t, b, now, store.JobStateDead, "q", "dead", "")
	waitSignal(t, w, "making a dead job through B") // its enqueue
	idle()
	retryJob(t, b, dead.ID, now)
	waitSignal(t, w, "a JobRetry through B")

	inState(t, b, now, store.JobStateRunning, "q", "lost", "")
	waitSignal(t, w, "making a running job through B")
	idle()
	wantRescued(t, b, now.Add(time.Hour), 10, 1)
	waitSignal(t, w, "a JobRescue through B")

	pause(t, b, "q", true, now)
	idle()
	pause(t, b, "q", false, now)
	waitSignal(t, w, "a resume through B")
}

// Close is safe to call more than once and concurrently; C is never
// closed; the store goes on working after its watches are closed.
func testWatchClose(t *testing.T, e *env) {
	w, ok := watch(t, e.st, "q")
	if !ok {
		return
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Close()
		}()
	}
	wg.Wait()
	w.Close()
	j := newJob("after-close")
	j.Queue = "q"
	for range 3 {
		enqueueOne(t, e.st, at(0), j)
	}
	drain(t, w)
	w.Close()
}
