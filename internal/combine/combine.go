// Package combine gathers concurrent small requests into shared calls to a
// server, so many callers cost one round trip instead of one each. The
// PostgreSQL and Redis stores send their plain enqueue batches through it,
// and the client its durable steps' records.
//
// The first caller to find a free flusher slot becomes a flusher: it
// sends calls for whatever has gathered, until nothing waits, then
// returns to its own result. Before each call a flusher waits, briefly,
// for as many callers as recent calls served (see Combiner.gather).
package combine

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Recall is how many past calls set the number of callers a flusher
// expects.
const Recall = 8

// The defaults of Config's zero fields.
const (
	// DefaultFlushers: one call in flight was measured best with 8
	// producers on 2 cores: each call costs more than a row, and more
	// calls in flight carry fewer jobs each.
	DefaultFlushers = 1
	// DefaultTimeout bounds a combined call.
	DefaultTimeout = time.Minute
	// DefaultGather is how long a flusher waits for the callers it
	// expects.
	DefaultGather = 200 * time.Microsecond
)

// Config sets a Combiner's bounds.
type Config struct {
	// MaxJobs caps the jobs of one combined call; a single caller's batch
	// may be larger and is then sent alone.
	MaxJobs int
	// Flushers is how many combined calls are in flight at once. While one
	// is, new enqueues gather into the next. Defaults to DefaultFlushers.
	Flushers int
	// Timeout bounds a combined call, which no single caller's context
	// governs. Defaults to DefaultTimeout.
	Timeout time.Duration
	// Gather is the longest a flusher waits for callers before it sends.
	// Defaults to DefaultGather.
	Gather time.Duration
}

// or returns v, or def when v is zero.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Combiner gathers concurrent requests of type R into calls. The zero
// value has no bounds; set Config before the first Do.
type Combiner[R any] struct {
	Config Config

	mu       sync.Mutex
	waiting  []*waiter[R]
	flushing int
	// callers holds how many callers each of the last calls served (a
	// ring of Recall; next is where the next count goes).
	callers [Recall]int
	next    int
}

// waiter is one caller's request waiting in the combiner.
type waiter[R any] struct {
	req  R
	jobs int
	done chan struct{}
}

// Do sends req, a batch of jobs jobs, through the combiner: send is called
// (by this caller or another) with the requests of one combined call, in
// order, and must hand each its results before it returns. Do returns
// true once req's call is done, false when ctx ended first: that call may
// still be under way, so the outcome is unknown.
func (c *Combiner[R]) Do(ctx context.Context, req R, jobs int, send func(context.Context, []R)) bool {
	w := &waiter[R]{req: req, jobs: jobs, done: make(chan struct{})}
	c.mu.Lock()
	c.waiting = append(c.waiting, w)
	if c.flushing < or(c.Config.Flushers, DefaultFlushers) {
		c.flushing++
		for len(c.waiting) > 0 {
			c.flush(ctx, send)
		}
		c.flushing--
	}
	c.mu.Unlock()
	select {
	case <-w.done: // a flusher (this caller or another) is done with it
		return true
	default:
	}
	select {
	case <-w.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// flush sends one call for the callers waiting first, with c.mu held
// (released during the call).
func (c *Combiner[R]) flush(ctx context.Context, send func(context.Context, []R)) {
	c.gather()
	if len(c.waiting) == 0 {
		// With more than one flusher, another one took them while this
		// one gathered (gather lets go of c.mu).
		return
	}
	n, jobs := 0, 0
	for n < len(c.waiting) && (n == 0 || jobs+c.waiting[n].jobs <= c.Config.MaxJobs) {
		jobs += c.waiting[n].jobs
		n++
	}
	ws := slices.Clone(c.waiting[:n])
	c.callers[c.next] = n
	c.next = (c.next + 1) % Recall
	c.waiting = slices.Delete(c.waiting, 0, n)
	c.mu.Unlock()
	reqs := make([]R, n)
	for i, w := range ws {
		reqs[i] = w.req
	}
	// The call serves other callers too: it must not end when this
	// caller's context does, but it must end.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), or(c.Config.Timeout, DefaultTimeout))
	send(fctx, reqs)
	cancel()
	for _, w := range ws {
		close(w.done)
	}
	c.mu.Lock()
}

// expected is how many callers the next call should serve: the most that
// any recent call served.
func (c *Combiner[R]) expected() int {
	return slices.Max(c.callers[:])
}

// gather waits, with c.mu held, until as many callers wait as recent
// calls served, or Config.Gather has passed. Producers that enqueue one
// job after another come back a few microseconds after their call
// returns; sending at once would catch only the callers that happened to
// be early, and the late ones would wait a whole call for the next. A
// lone caller (recent calls served one) never waits. The wait yields the
// processor rather than sleeping: a timer shorter than a millisecond can
// fire a millisecond late.
func (c *Combiner[R]) gather() {
	want := c.expected()
	if len(c.waiting) >= want {
		return
	}
	deadline := time.Now().Add(or(c.Config.Gather, DefaultGather))
	for len(c.waiting) < want && time.Now().Before(deadline) {
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
	}
}
