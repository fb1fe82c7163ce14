// Package sortietest helps test applications that use sortie, with no
// server and no sleeping: an in-memory client on a fake clock, a way to run
// every due job inline, and assertions on enqueued jobs.
//
//	func TestSignup(t *testing.T) {
//		workers := sortie.NewWorkers()
//		sortie.AddWorker(workers, &EmailWorker{}, nil)
//		tc := sortietest.NewClient(t, &sortie.Config{Workers: workers})
//
//		signup(ctx, tc.Client, "a@example.com")         // enqueues an Email job
//		job := sortietest.RequireEnqueued[Email](t, tc.Client, nil)
//
//		tc.Clock.Advance(time.Hour)                       // scheduled jobs become due
//		n, err := tc.Drain(ctx)                           // runs them inline
//	}
package sortietest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// FakeClock is a clock that moves only when told (Advance, Set). Its timers
// fire when time reaches them. It implements sortie.Clock.
type FakeClock = clock.Fake

// NewFakeClock returns a fake clock reading start.
func NewFakeClock(start time.Time) *FakeClock { return clock.NewFake(start) }

// Start is the time a test client's fake clock starts at.
var Start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Client is a sortie client on an in-memory store and a fake clock.
type Client struct {
	*sortie.Client
	// Clock is the client's fake clock; Advance it to make scheduled jobs
	// and retries due.
	Clock *FakeClock
	// Store is the in-memory store behind the client.
	Store *memstore.Store
}

// NewClient returns a client for tests on a fresh in-memory store, with a
// fake clock starting at Start (unless cfg.Clock is set) and a logger that
// writes to t.Log. cfg may be nil. The store is closed and a started client
// stopped when the test ends.
func NewClient(t testing.TB, cfg *sortie.Config) *Client {
	t.Helper()
	var c sortie.Config
	if cfg != nil {
		c = *cfg
	}
	fc, ok := c.Clock.(*FakeClock)
	if c.Clock == nil {
		fc = NewFakeClock(Start)
		c.Clock = fc
	} else if !ok {
		fc = nil
	}
	if c.Logger == nil {
		c.Logger = testLogger(t)
	}
	st := memstore.New()
	client, err := sortie.NewClient(st, &c)
	if err != nil {
		t.Fatalf("sortietest.NewClient: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx) // ErrNotStarted when the test never started it
		_ = st.Close()
	})
	return &Client{Client: client, Clock: fc, Store: st}
}

// Work runs worker once on args, as attempt 1 of a job that is not stored,
// and returns what the worker returned. It is for unit tests of a worker's
// own logic. Durable steps need a stored job (sortie.Step and the others
// return sortie.ErrNotInJob here): test a worker that uses them through
// NewClient and Client.Drain, which run it on a store, attempts and all.
func Work[T sortie.JobArgs](ctx context.Context, worker sortie.Worker[T], args T) error {
	payload, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("sortietest.Work: encode args: %w", err)
	}
	now := time.Now()
	row := &sortie.JobRow{
		ID: 1, Kind: args.Kind(), Queue: sortie.QueueDefault, Args: payload, State: store.JobStateRunning,
		Priority: store.PriorityDefault, Attempt: 1, MaxAttempts: 25, RunAt: now, CreatedAt: now, AttemptedAt: now,
	}
	// Decode the payload again, as a real worker would see it.
	var decoded T
	if err := json.Unmarshal(payload, &decoded); err != nil {
		return fmt.Errorf("sortietest.Work: decode args: %w", err)
	}
	return worker.Work(ctx, &sortie.Job[T]{JobRow: row, Args: decoded})
}

// EnqueuedJobs returns the pending (waiting, scheduled, available, running
// or retrying) jobs of T's kind, oldest first, with decoded args.
func EnqueuedJobs[T sortie.JobArgs](t testing.TB, c *sortie.Client) []*sortie.Job[T] {
	t.Helper()
	var zero T
	kind := zero.Kind()
	var out []*sortie.Job[T]
	ctx := context.Background()
	for _, state := range []sortie.JobState{sortie.JobStateWaiting, sortie.JobStateScheduled, sortie.JobStateAvailable, sortie.JobStateRunning, sortie.JobStateRetrying} {
		p := &sortie.JobListParams{Kind: kind, State: state, Limit: 1000}
		for {
			page, err := c.JobList(ctx, p)
			if err != nil {
				t.Fatalf("sortietest: list jobs of kind %q: %v", kind, err)
			}
			for _, row := range page.Jobs {
				var args T
				if err := json.Unmarshal(row.Args, &args); err != nil {
					t.Fatalf("sortietest: job %d of kind %q: decode args: %v", row.ID, kind, err)
				}
				out = append(out, &sortie.Job[T]{JobRow: row, Args: args})
			}
			if page.NextCursor == 0 {
				break
			}
			p.Cursor = page.NextCursor
		}
	}
	sortJobs(out)
	return out
}

// RequireEnqueued fails the test unless a pending job of T's kind exists
// for which match returns true (nil matches any), and returns the first.
func RequireEnqueued[T sortie.JobArgs](t testing.TB, c *sortie.Client, match func(*sortie.Job[T]) bool) *sortie.Job[T] {
	t.Helper()
	jobs := EnqueuedJobs[T](t, c)
	for _, j := range jobs {
		if match == nil || match(j) {
			return j
		}
	}
	var zero T
	t.Fatalf("sortietest: no pending job of kind %q matched; pending jobs of that kind: %s", zero.Kind(), describe(jobs))
	return nil
}

// RequireEnqueuedN fails the test unless exactly n pending jobs of T's kind
// exist, and returns them.
func RequireEnqueuedN[T sortie.JobArgs](t testing.TB, c *sortie.Client, n int) []*sortie.Job[T] {
	t.Helper()
	jobs := EnqueuedJobs[T](t, c)
	if len(jobs) != n {
		var zero T
		t.Fatalf("sortietest: %d pending jobs of kind %q, want %d: %s", len(jobs), zero.Kind(), n, describe(jobs))
	}
	return jobs
}

// RequireNotEnqueued fails the test if a pending job of T's kind exists for
// which match returns true (nil matches any).
func RequireNotEnqueued[T sortie.JobArgs](t testing.TB, c *sortie.Client, match func(*sortie.Job[T]) bool) {
	t.Helper()
	for _, j := range EnqueuedJobs[T](t, c) {
		if match == nil || match(j) {
			t.Fatalf("sortietest: job %d of kind %q is pending (%s), want none", j.ID, j.Kind, j.State)
		}
	}
}

func describe[T sortie.JobArgs](jobs []*sortie.Job[T]) string {
	if len(jobs) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(jobs))
	for _, j := range jobs {
		parts = append(parts, fmt.Sprintf("#%d %s queue=%s args=%s", j.ID, j.State, j.Queue, j.JobRow.Args))
	}
	return strings.Join(parts, "; ")
}

func sortJobs[T sortie.JobArgs](jobs []*sortie.Job[T]) {
	for i := 1; i < len(jobs); i++ {
		for k := i; k > 0 && jobs[k].ID < jobs[k-1].ID; k-- {
			jobs[k], jobs[k-1] = jobs[k-1], jobs[k]
		}
	}
}
