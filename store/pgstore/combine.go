package pgstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Combining: concurrent small enqueues share one statement, so many
// producers enqueueing one job each pay for one round trip and one commit
// between them, not one each.
const (
	// combineMaxJobs is the largest batch that is combined with others; a
	// larger one already amortizes its statement.
	combineMaxJobs = 16
	// combineMaxBatch caps the jobs of one combined statement.
	combineMaxBatch = 500
	// combineFlushers is how many combined statements run at once. While
	// one runs, new enqueues gather into the next. One was measured best
	// with 8 producers on 2 cores: each statement costs more than a row,
	// and more statements in flight carry fewer jobs each.
	combineFlushers = 1
	// combineTimeout bounds a combined statement, which no single caller's
	// context governs.
	combineTimeout = time.Minute
	// combineGather is the longest a flusher waits for callers before it
	// sends a statement; see combiner.gather.
	combineGather = 200 * time.Microsecond
	// combineRecall is how many past statements set the number of callers
	// a flusher expects.
	combineRecall = 8
)

// enqueueReq is one caller's batch waiting in the combiner.
type enqueueReq struct {
	b    *batch
	done chan struct{}
	// fast is false when the batch must take the careful path (a queue
	// has a MaxDepth); the caller then runs it alone.
	fast bool
	err  error
}

// combiner gathers concurrent enqueues. The first caller to find a free
// flusher slot becomes a flusher: it runs statements for whatever has
// gathered, until nothing waits, then returns to its own result.
type combiner struct {
	mu       sync.Mutex
	waiting  []*enqueueReq
	flushing int
	// callers holds how many callers each of the last statements served
	// (a ring of combineRecall; next is where the next count goes).
	callers [combineRecall]int
	next    int
	// gatherFor is gather's bound; zero means combineGather.
	gatherFor time.Duration
}

// expected is how many callers the next statement should serve: the most
// that any recent statement served.
func (c *combiner) expected() int {
	return slices.Max(c.callers[:])
}

// gather waits, with c.mu held, until as many callers wait as recent
// statements served, or combineGather has passed (gatherFor in tests). Producers that enqueue
// one job after another come back a few microseconds after their
// statement returns; sending at once would catch only the callers that
// happened to be early, and the late ones would wait a whole statement
// for the next. A lone caller (recent statements served one) never waits.
// The wait yields the processor rather than sleeping: a timer shorter
// than a millisecond can fire a millisecond late.
func (c *combiner) gather() {
	want := c.expected()
	if len(c.waiting) >= want {
		return
	}
	bound := c.gatherFor
	if bound == 0 {
		bound = combineGather
	}
	deadline := time.Now().Add(bound)
	for len(c.waiting) < want && time.Now().Before(deadline) {
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
	}
}

// enqueueCombined runs b (plain: no dependencies, no workflow) through the
// combiner. It returns false when the batch must take the careful path.
func (s *Store) enqueueCombined(ctx context.Context, b *batch) (bool, error) {
	r := &enqueueReq{b: b, done: make(chan struct{})}
	c := &s.combine
	c.mu.Lock()
	c.waiting = append(c.waiting, r)
	if c.flushing < combineFlushers {
		c.flushing++
		for len(c.waiting) > 0 {
			c.gather()
			n, jobs := 0, 0
			for n < len(c.waiting) && (n == 0 || jobs+len(c.waiting[n].b.p.Jobs) <= combineMaxBatch) {
				jobs += len(c.waiting[n].b.p.Jobs)
				n++
			}
			reqs := slices.Clone(c.waiting[:n])
			c.callers[c.next] = n
			c.next = (c.next + 1) % combineRecall
			c.waiting = slices.Delete(c.waiting, 0, n)
			c.mu.Unlock()
			// The statement serves other callers too: it must not end
			// when this caller's context does, but it must end.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), combineTimeout)
			s.flushCombined(fctx, reqs)
			cancel()
			c.mu.Lock()
		}
		c.flushing--
	}
	c.mu.Unlock()
	select {
	case <-r.done: // a flusher (this caller or another) is done with it
		return r.fast, r.err
	default:
	}
	select {
	case <-r.done:
		return r.fast, r.err
	case <-ctx.Done():
		// The statement may still commit this caller's jobs: like any
		// cancelled call, the outcome is unknown.
		return false, fmt.Errorf("%w (the jobs may still be committed by the statement in flight)", ctx.Err())
	}
}

// flushCombined enqueues the batches of reqs in one statement and hands
// each caller its results.
func (s *Store) flushCombined(ctx context.Context, reqs []*enqueueReq) {
	defer func() {
		for _, r := range reqs {
			close(r.done)
		}
	}()
	if len(reqs) == 1 {
		r := reqs[0]
		r.fast, r.err = s.enqueueFast(ctx, r.b)
		return
	}
	all := &batch{p: &store.JobEnqueueManyParams{}}
	for _, r := range reqs {
		b := r.b
		all.p.Jobs = append(all.p.Jobs, b.p.Jobs...)
		all.results = append(all.results, b.results...)
		all.runAt = append(all.runAt, b.runAt...)
		all.now = append(all.now, b.now...)
		all.tags = append(all.tags, b.tags...)
		all.unique = all.unique || b.unique
		for _, q := range b.queues {
			if !slices.Contains(all.queues, q) {
				all.queues = append(all.queues, q)
			}
		}
	}
	fast, err := s.enqueueFast(ctx, all)
	off := 0
	for _, r := range reqs {
		n := len(r.b.p.Jobs)
		r.fast, r.err = fast, err
		if fast && err == nil {
			copy(r.b.results, all.results[off:off+n])
		}
		off += n
	}
}
