package sortie_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// storeFactory makes a fresh store for one test.
type storeFactory struct {
	name string
	new  func(t *testing.T) store.Store
}

var storeFactories = []storeFactory{
	{"memstore", func(t *testing.T) store.Store {
		st := memstore.New()
		t.Cleanup(func() { _ = st.Close() })
		return st
	}},
	// memstore behind JobFetchWait: workers of one queue wait in fetches.
	{"memstore-waiting", func(t *testing.T) store.Store {
		st := memstore.New()
		t.Cleanup(func() { _ = st.Close() })
		return waitingStore{st}
	}},
	{"sqlitestore", func(t *testing.T) store.Store {
		st, err := sqlitestore.Open(filepath.Join(t.TempDir(), "sortie.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}},
}

// eachStore runs fn once per store backend, in parallel subtests.
func eachStore(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Helper()
	for _, f := range storeFactories {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			fn(t, f.new(t))
		})
	}
}

// eachStoreFakeTime runs fn like eachStore, with the memstore case inside a
// synctest bubble: its clock is fake and jumps to the next timer whenever
// every goroutine of the case waits, so deadlines, leases and intervals
// take no wall time and come out exact. The other stores do I/O outside
// the bubble's reach and run on the wall clock.
func eachStoreFakeTime(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Helper()
	for _, f := range storeFactories {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			if f.name != "memstore" && f.name != "memstore-waiting" {
				fn(t, f.new(t))
				return
			}
			synctest.Test(t, func(t *testing.T) { fn(t, f.new(t)) })
		})
	}
}

// waitingStore serves store.FetchWaiter from JobFetch and QueueWatch, as
// the Redis store's waiting claims behave (store/redisstore tests those),
// so that every runtime test of eachStore also runs workers that wait in
// their fetches: a signal ends the wait with at most a few jobs claimed
// at that moment, none of a rate-limited queue.
type waitingStore struct{ store.Store }

func (w waitingStore) JobFetchWait(ctx context.Context, p *store.JobFetchParams, wait time.Duration) (*store.JobFetchResult, error) {
	watch, err := w.QueueWatch(ctx, &store.QueueWatchParams{Queue: p.Queue})
	if err != nil {
		return nil, err
	}
	defer watch.Close()
	start := time.Now()
	res, err := w.JobFetch(ctx, p)
	if err != nil || len(res.Jobs) > 0 {
		return res, err
	}
	if !res.NextAt.IsZero() {
		wait = min(wait, res.NextAt.Sub(p.Now))
	}
	if wait <= 0 {
		return res, nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return &store.JobFetchResult{}, nil
	case <-timer.C:
		return &store.JobFetchResult{}, nil
	case <-watch.C:
	}
	q, err := w.QueueGet(ctx, &store.QueueGetParams{Queue: p.Queue})
	if err != nil {
		return nil, err
	}
	if q.Settings.RateLimit > 0 || q.Settings.PartitionRateLimit > 0 {
		return &store.JobFetchResult{}, nil
	}
	again := *p
	again.Now = p.Now.Add(time.Since(start))
	again.Limit = min(p.Limit, 4)
	return w.JobFetch(ctx, &again)
}

type Noop struct{}

func (Noop) Kind() string { return "noop" }

type Msg struct {
	Text string `json:"text"`
}

func (Msg) Kind() string { return "msg" }

type Other struct{}

func (Other) Kind() string { return "other" }

// events records a client's events and lets a test wait for them.
type events struct {
	mu     sync.Mutex
	cond   *sync.Cond
	all    []*sortie.Event
	cancel func()
}

func record(t *testing.T, c *sortie.Client) *events {
	e := &events{}
	e.cond = sync.NewCond(&e.mu)
	e.cancel = c.Subscribe(func(ev *sortie.Event) {
		e.mu.Lock()
		e.all = append(e.all, ev)
		e.cond.Broadcast()
		e.mu.Unlock()
	})
	t.Cleanup(e.cancel)
	return e
}

// waitFor waits until match accepts some recorded event, failing the test
// after timeout.
func (e *events) waitFor(t *testing.T, timeout time.Duration, what string, match func(*sortie.Event) bool) *sortie.Event {
	t.Helper()
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() { e.mu.Lock(); e.cond.Broadcast(); e.mu.Unlock() })
	defer stop.Stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		for _, ev := range e.all {
			if match(ev) {
				return ev
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; saw %d events", timeout, what, len(e.all))
		}
		e.cond.Wait()
	}
}

// finished waits for the n-th finished event of job id (n from 1).
func (e *events) finished(t *testing.T, id int64, n int) *sortie.Event {
	t.Helper()
	return e.waitFor(t, 10*time.Second, fmt.Sprintf("finish %d of job %d", n, id), func(ev *sortie.Event) bool {
		if ev.Kind != sortie.EventJobFinished || ev.Job.ID != id {
			return false
		}
		// Count this job's finishes up to and including ev.
		seen := 0
		for _, x := range e.all {
			if x.Kind == sortie.EventJobFinished && x.Job.ID == id {
				seen++
			}
			if x == ev {
				break
			}
		}
		return seen == n
	})
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startClient makes and starts a client, stopping it when the test ends.
func startClient(t *testing.T, st store.Store, cfg *sortie.Config) *sortie.Client {
	t.Helper()
	c := newClient(t, st, cfg)
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop() = %v", err)
		}
	})
	return c
}

func newClient(t *testing.T, st store.Store, cfg *sortie.Config) *sortie.Client {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	c, err := sortie.NewClient(st, cfg)
	if err != nil {
		t.Fatalf("NewClient() = %v", err)
	}
	return c
}

func mustEnqueue(t *testing.T, c *sortie.Client, args sortie.JobArgs, opts *sortie.EnqueueOpts) int64 {
	t.Helper()
	res, err := c.Enqueue(context.Background(), args, opts)
	if err != nil {
		t.Fatalf("Enqueue(%T) = %v", args, err)
	}
	return res.ID
}

func mustGet(t *testing.T, c *sortie.Client, id int64) *sortie.JobRow {
	t.Helper()
	row, err := c.JobGet(context.Background(), id)
	if err != nil {
		t.Fatalf("JobGet(%d) = %v", id, err)
	}
	return row
}

func fastRetry() sortie.RetryPolicy {
	return sortie.RetryPolicyFunc(func(*sortie.JobRow) time.Duration { return time.Millisecond })
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// startHeldJob starts a client on st with one Msg worker whose handler
// blocks until release is closed, enqueues one job and returns once that
// handler has started, with the job's ID.
func startHeldJob(t *testing.T, st store.Store) (c *sortie.Client, id int64, release chan struct{}) {
	t.Helper()
	workers := sortie.NewWorkers()
	release = make(chan struct{})
	started := make(chan struct{}, 1)
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		started <- struct{}{}
		<-release
		return nil
	}), nil)
	c = newClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id = mustEnqueue(t, c, Msg{}, nil)
	<-started
	return c, id, release
}
