package sortie

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sortiehq/sortie/store"
)

const (
	// completeBatchMax caps the outcomes recorded in one store call.
	completeBatchMax = 1000
	// completePendingMax is how many outcomes may wait for the store before
	// workers block (and so stop taking new jobs) until it catches up.
	completePendingMax = 10000
	// completeStopTimeout bounds how long Stop keeps retrying to record the
	// last outcomes; jobs left unrecorded are rescued after their lease.
	completeStopTimeout = 10 * time.Second
)

// completer records attempts' outcomes in batches: one store call takes
// every outcome that arrived while the previous call ran, so a busy client
// pays one round trip for many jobs and an idle one adds no delay. A job is
// acknowledged only after its handler returned.
type completer struct {
	c    *Client
	held *heldSet

	mu       sync.Mutex
	room     *sync.Cond // signalled when pending shrinks
	pending  []*attempt
	stopping bool

	wake chan struct{}
	done chan struct{}
	err  error // set by loop before done closes
}

func newCompleter(c *Client, held *heldSet) *completer {
	cp := &completer{c: c, held: held, wake: make(chan struct{}, 1), done: make(chan struct{})}
	cp.room = sync.NewCond(&cp.mu)
	return cp
}

// add queues a finished attempt. It blocks while too many outcomes wait.
func (cp *completer) add(a *attempt) {
	cp.mu.Lock()
	for len(cp.pending) >= completePendingMax && !cp.stopping {
		cp.room.Wait()
	}
	cp.pending = append(cp.pending, a)
	cp.mu.Unlock()
	select {
	case cp.wake <- struct{}{}:
	default:
	}
}

// stop records everything pending and ends the loop; it returns an error
// when some outcomes could not be recorded.
func (cp *completer) stop() error {
	cp.mu.Lock()
	cp.stopping = true
	cp.room.Broadcast()
	cp.mu.Unlock()
	select {
	case cp.wake <- struct{}{}:
	default:
	}
	<-cp.done
	return cp.err
}

func (cp *completer) loop(ctx context.Context) {
	defer close(cp.done)
	var stopCtx context.Context
	for {
		<-cp.wake
		cp.mu.Lock()
		stopping := cp.stopping
		cp.mu.Unlock()
		if stopping && stopCtx == nil {
			var cancel context.CancelFunc
			stopCtx, cancel = context.WithTimeout(ctx, completeStopTimeout)
			defer cancel()
		}
		for {
			cp.mu.Lock()
			n := min(len(cp.pending), completeBatchMax)
			batch := cp.pending[:n:n]
			cp.pending = cp.pending[n:]
			if len(cp.pending) == 0 {
				cp.pending = nil
			}
			stopping = cp.stopping
			cp.room.Broadcast()
			cp.mu.Unlock()
			if n == 0 {
				break
			}
			fctx := ctx
			if stopCtx != nil {
				fctx = stopCtx
			}
			if err := cp.flush(fctx, batch); err != nil {
				cp.c.logger.ErrorContext(ctx, "could not record job outcomes; the jobs will be rescued when their lease expires",
					slog.Int(logKeyCount, len(batch)), slog.String(logKeyError, err.Error()))
				cp.err = err
			}
		}
		if stopping {
			return
		}
	}
}

// flush records batch, retrying with backoff while the store fails, until
// ctx ends (only during Stop does it end).
func (cp *completer) flush(ctx context.Context, batch []*attempt) error {
	c := cp.c
	outcomes := make([]*store.Outcome, len(batch))
	for i, a := range batch {
		outcomes[i] = &a.outcome
	}
	for failures := 0; ; {
		res, err := c.store.JobFinish(ctx, &store.JobFinishParams{Outcomes: outcomes, Now: c.clock.Now()})
		if err == nil {
			c.storeHealth.ok(ctx)
			cp.held.removeAll(batch)
			for i, a := range batch {
				c.finished(ctx, a, res[i])
			}
			return nil
		}
		failures++
		c.storeHealth.fail(ctx, "finish", err)
		if !sleepCtx(ctx, nil, backoff(failures)) {
			return err
		}
	}
}
