package multiproc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
	"github.com/sortiehq/sortie/store"
)

// wakeQueue is the queue of the wake-up test and benchmark.
const wakeQueue = "wake"

// wakeDeadline bounds each wait of the wake-up test: far below the worker
// process's poll interval (an hour), far above a wake-up (milliseconds).
const wakeDeadline = 20 * time.Second

// TestWakeAcrossProcesses: a worker process whose poll interval is an hour
// starts a job enqueued by this process at once, and a job held back by a
// pause as soon as this process resumes the queue. Only the store's
// wake-ups across processes can start either before the test's deadline.
func TestWakeAcrossProcesses(t *testing.T) {
	t.Parallel()
	for _, tt := range storeCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := tt.url(t)
			st, closeStore, err := openStore(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = closeStore() })
			testWake(t, st, url)
		})
	}
}

func testWake(t *testing.T, st store.Store, url string) {
	ctx := t.Context()
	dir := t.TempDir()
	w := startWakeProc(t, dir, url, "wake-p0", time.Hour)
	procs := []*proc{w.proc}
	diag := func() string { return describe(st, procs, wakeQueue) }
	testkit.WaitFor(t, wakeDeadline, w.Name+" found its queue empty", childproc.Watched(procs), diag, func() (bool, error) {
		idle, err := w.idleSince(time.Time{})
		return idle, err
	})
	c := newEnqueuer(t, st)

	enqueuedAt := time.Now()
	first := c.enqueue(t)
	a := w.waitStart(t, first, procs, diag)
	t.Logf("job %d enqueued here started in %s %s later", first, w.Name, a.Start.Sub(enqueuedAt))

	if _, err := st.QueuePause(ctx, &store.QueuePauseParams{Queue: wakeQueue, Paused: true, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	heldAt := time.Now()
	held := c.enqueue(t)
	// The enqueue wakes the worker, which finds the queue paused and waits
	// again: only the resume can start the job now.
	testkit.WaitFor(t, wakeDeadline, w.Name+" fetched from the paused queue after the enqueue", childproc.Watched(procs), diag, func() (bool, error) {
		return w.idleSince(heldAt)
	})
	resumedAt := time.Now()
	if _, err := st.QueuePause(ctx, &store.QueuePauseParams{Queue: wakeQueue, Paused: false, Now: resumedAt}); err != nil {
		t.Fatal(err)
	}
	a = w.waitStart(t, held, procs, diag)
	if a.Start.Before(resumedAt) {
		t.Errorf("job %d started at %s in %s, before the queue was resumed at %s", held,
			a.Start.Format("15:04:05.000000"), w.Name, resumedAt.Format("15:04:05.000000"))
	}
	t.Logf("job %d held by the pause started in %s %s after the resume", held, w.Name, a.Start.Sub(resumedAt))
	w.Stop(t, 20*time.Second)
}

// wakeProc is a worker process of wakeQueue that records when it waits for
// a wake-up (envIdle) and works until stopped.
type wakeProc struct {
	*proc
	idle string
}

// startWakeProc starts a worker process of wakeQueue with poll interval
// poll (0 for the library's default).
func startWakeProc(t testing.TB, dir, url, name string, poll time.Duration) *wakeProc {
	t.Helper()
	idle := filepath.Join(dir, name+".idle")
	env := []string{envPoll + "=" + poll.String(), envIdle + "=" + idle}
	return &wakeProc{proc: startProcEnv(t, dir, url, name, env, wakeQueue+":2"), idle: idle}
}

// idleSince says whether the process recorded a fetch of wakeQueue that
// began after since and came back short.
func (w *wakeProc) idleSince(since time.Time) (bool, error) {
	data, err := os.ReadFile(w.idle)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "idle" {
			continue // a line being written
		}
		at, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return false, fmt.Errorf("%s: %q: %w", w.idle, sc.Text(), err)
		}
		if f[1] == wakeQueue && time.Unix(0, at).After(since) {
			return true, nil
		}
	}
	return false, sc.Err()
}

// waitStart waits until the process's journal records the start of job id
// and returns that attempt.
func (w *wakeProc) waitStart(t testing.TB, id int64, procs []*proc, diag func() string) *attempt {
	t.Helper()
	var found *attempt
	testkit.WaitFor(t, wakeDeadline, fmt.Sprintf("job %d started in %s", id, w.Name), childproc.Watched(procs), diag, func() (bool, error) {
		atts, err := childproc.ReadJournal(w.Journal)
		if err != nil && !os.IsNotExist(err) {
			return false, err
		}
		i := slices.IndexFunc(atts, func(a *attempt) bool { return a.Job == id })
		if i >= 0 {
			found = atts[i]
		}
		return i >= 0, nil
	})
	return found
}

// enqueuer enqueues the wake-up jobs through one client.
type enqueuer struct{ c *sortie.Client }

func newEnqueuer(t testing.TB, st store.Store) *enqueuer {
	t.Helper()
	c, err := sortie.NewClient(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &enqueuer{c: c}
}

// enqueue enqueues a job of wakeQueue that returns at once, and returns its
// ID.
func (e *enqueuer) enqueue(t testing.TB) int64 {
	t.Helper()
	res, err := e.c.Enqueue(context.Background(), Sleep{}, &sortie.EnqueueOpts{Queue: wakeQueue})
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

// benchWakeEvery is how often BenchmarkWakeAcrossProcesses enqueues: each
// job finds the worker process idle, waiting for a wake-up.
const benchWakeEvery = 20 * time.Millisecond

// BenchmarkWakeAcrossProcesses measures enqueue → start across processes:
// this process enqueues a job every 20 ms, and a worker process with the
// default poll interval (1 s) starts it. It reports percentiles of the time
// from just before Enqueue to the handler's start, in milliseconds, from
// the wall clock both processes share:
//
//	go test -run '^$' -bench WakeAcrossProcesses -benchtime 300x ./internal/multiproc/
func BenchmarkWakeAcrossProcesses(b *testing.B) {
	for _, tt := range storeCases {
		b.Run(tt.name, func(b *testing.B) {
			url := tt.url(b)
			st, closeStore, err := openStore(b.Context(), url)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = closeStore() })
			w := startWakeProc(b, b.TempDir(), url, "bench-p0", 0)
			procs := []*proc{w.proc}
			diag := func() string { return describe(st, procs, wakeQueue) }
			testkit.WaitFor(b, wakeDeadline, w.Name+" found its queue empty", childproc.Watched(procs), diag, func() (bool, error) {
				return w.idleSince(time.Time{})
			})
			c := newEnqueuer(b, st)
			enqueuedAt := make(map[int64]time.Time, b.N)
			tick := time.NewTicker(benchWakeEvery)
			defer tick.Stop()
			b.ResetTimer()
			for range b.N {
				<-tick.C
				at := time.Now()
				enqueuedAt[c.enqueue(b)] = at
			}
			var atts []*attempt
			testkit.WaitFor(b, wakeDeadline, fmt.Sprintf("%d jobs started in %s", b.N, w.Name), childproc.Watched(procs), diag, func() (bool, error) {
				var err error
				atts, err = childproc.ReadJournal(w.Journal)
				return len(atts) >= b.N, err
			})
			b.StopTimer()
			lat := make([]float64, 0, len(atts))
			for _, a := range atts {
				lat = append(lat, float64(a.Start.Sub(enqueuedAt[a.Job]))/float64(time.Millisecond))
			}
			slices.Sort(lat)
			pct := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.95), "p95-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(lat[len(lat)-1], "max-ms")
			w.Stop(b, 20*time.Second)
		})
	}
}
