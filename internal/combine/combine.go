// Package combine runs concurrent requests of one kind as batches, so that
// many goroutines making one small store call each pay for one round trip
// between them.
package combine

import (
	"context"
	"sync"
	"time"
)

// Timeout bounds a batch's call: no single caller's context governs it.
const Timeout = time.Minute

// Combiner gathers concurrent requests. A caller that finds fewer than
// Flushers batches under way sends one with its own request and goes on
// sending whatever gathered meanwhile, until nothing waits; callers that
// arrive while Flushers batches are under way wait for the next one. An
// idle combiner adds no delay, a busy one one round trip per batch. The
// zero value is not usable: set Flush.
type Combiner[Q, R any] struct {
	// Flush makes the call for a batch and returns one result per request,
	// in order, or an error for all of them.
	Flush func(ctx context.Context, reqs []Q) ([]R, error)
	// Max caps the requests of one batch; 0 means no cap.
	Max int
	// Flushers is how many batches may be under way at once; 0 means 1.
	Flushers int

	mu       sync.Mutex
	waiting  []*call[Q, R]
	flushing int
}

type call[Q, R any] struct {
	req  Q
	res  R
	err  error
	done chan struct{}
}

// Do sends req in the next batch and returns its result. A caller whose
// ctx ends before its batch is answered gets ctx.Err(); its request may
// still be sent and applied.
func (c *Combiner[Q, R]) Do(ctx context.Context, req Q) (R, error) {
	cl := &call[Q, R]{req: req, done: make(chan struct{})}
	c.mu.Lock()
	c.waiting = append(c.waiting, cl)
	if c.flushing >= max(c.Flushers, 1) {
		c.mu.Unlock()
		select {
		case <-cl.done:
			return cl.res, cl.err
		case <-ctx.Done():
			var zero R
			return zero, ctx.Err()
		}
	}
	c.flushing++
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), Timeout)
	defer cancel()
	for {
		n := len(c.waiting)
		if c.Max > 0 {
			n = min(n, c.Max)
		}
		if n == 0 {
			c.flushing--
			c.mu.Unlock()
			break
		}
		batch := c.waiting[:n:n]
		c.waiting = c.waiting[n:]
		c.mu.Unlock()
		c.flush(fctx, batch)
		c.mu.Lock()
	}
	return cl.res, cl.err
}

// flush sends batch and answers its callers.
func (c *Combiner[Q, R]) flush(ctx context.Context, batch []*call[Q, R]) {
	reqs := make([]Q, len(batch))
	for i, cl := range batch {
		reqs[i] = cl.req
	}
	res, err := c.Flush(ctx, reqs)
	for i, cl := range batch {
		if err == nil && i < len(res) {
			cl.res = res[i]
		} else if err == nil {
			cl.err = errShortReply
		} else {
			cl.err = err
		}
		close(cl.done)
	}
}

type shortReplyError struct{}

func (shortReplyError) Error() string {
	return "combine: the call returned fewer results than requests"
}

var errShortReply error = shortReplyError{}
