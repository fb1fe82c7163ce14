package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Combining: while one call of sortie_enqueue is on its way, the small
// batches of other callers gather, and the next call carries all of them.
// Many producers enqueueing one job each then share round trips and the
// library's per-call work, and a lone producer never waits for anyone.
const (
	// combineMaxJobs is the largest batch that is combined with others; a
	// larger one already amortizes its call.
	combineMaxJobs = 16
	// combineMaxBatches caps the batches of one combined call.
	combineMaxBatches = 256
	// combineTimeout bounds a combined call, which no single caller's
	// context governs.
	combineTimeout = time.Minute
)

// pendingBatch is one caller's batch, its encoded arguments and, once
// sent, its results.
type pendingBatch struct {
	jobs []*store.NewJob
	args []any
	res  []store.EnqueueResult
	err  error
	done chan struct{}
}

// combiner gathers concurrent small enqueues. The caller that finds no
// call on its way becomes the sender: it sends what has gathered, its own
// batch first, until nothing waits.
type combiner struct {
	mu      sync.Mutex
	waiting []*pendingBatch
	sending bool
}

// run enqueues b, alone or with others, and returns when b has its
// results. A combined call carries other callers' batches, so the
// caller's ctx does not end it: combineTimeout does.
func (c *combiner) run(ctx context.Context, s *Store, b *pendingBatch) {
	c.mu.Lock()
	c.waiting = append(c.waiting, b)
	if c.sending {
		c.mu.Unlock()
		<-b.done
		return
	}
	c.sending = true
	for len(c.waiting) > 0 {
		n := min(len(c.waiting), combineMaxBatches)
		bs := c.waiting[:n:n]
		c.waiting = c.waiting[n:]
		c.mu.Unlock()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), combineTimeout)
		s.sendBatches(sctx, bs)
		cancel()
		c.mu.Lock()
	}
	c.sending = false
	c.mu.Unlock()
}
