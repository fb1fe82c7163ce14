package sortie

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/held"
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
	held *held.Set
	// ctx is the loop's; cancel ends its store calls when Stop's deadline
	// passes.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	room     *sync.Cond // signalled when pending shrinks
	pending  []*attempt
	inFlight int   // outcomes of the store call under way
	failed   int   // outcomes given up on during Stop
	lastErr  error // the store's last failure to record outcomes
	stopping bool

	wake chan struct{}
	done chan struct{}
}

func newCompleter(ctx context.Context, c *Client, held *held.Set) *completer {
	cp := &completer{c: c, held: held, wake: make(chan struct{}, 1), done: make(chan struct{})}
	cp.ctx, cp.cancel = context.WithCancel(ctx)
	cp.room = sync.NewCond(&cp.mu)
	return cp
}

// add queues a finished attempt. It blocks while too many outcomes wait.
// After stop, what it queues is never recorded: the job's lease and the
// rescue decide.
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

// stop records everything pending, retrying while the store fails, until
// ctx ends. It returns how many outcomes were not recorded and the store's
// last error. When ctx ends first it returns at once, without waiting for
// a store call that does not honour cancellation.
func (cp *completer) stop(ctx context.Context) (unrecorded int, err error) {
	cp.mu.Lock()
	cp.stopping = true
	cp.room.Broadcast()
	cp.mu.Unlock()
	// When ctx ends first, the loop's store calls are cancelled as Stop
	// returns, and the loop ends once they do.
	defer cp.cancel()
	select {
	case cp.wake <- struct{}{}:
	default:
	}
	select {
	case <-cp.done:
	case <-ctx.Done():
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.failed + cp.inFlight + len(cp.pending), cp.lastErr
}

func (cp *completer) loop() {
	defer close(cp.done)
	defer cp.cancel()
	for {
		<-cp.wake
		for {
			cp.mu.Lock()
			n := min(len(cp.pending), completeBatchMax)
			batch := cp.pending[:n:n]
			cp.pending = cp.pending[n:]
			if len(cp.pending) == 0 {
				cp.pending = nil
			}
			cp.inFlight = n
			stopping := cp.stopping
			cp.room.Broadcast()
			cp.mu.Unlock()
			if n == 0 {
				if stopping {
					return
				}
				break
			}
			err := cp.flush(cp.ctx, batch)
			cp.mu.Lock()
			cp.inFlight = 0
			if err != nil {
				cp.failed += n
			}
			cp.mu.Unlock()
			if err != nil {
				cp.c.logger.Error("could not record job outcomes; the jobs will be rescued when their lease expires",
					slog.Int(logKeyCount, n), slog.String(logKeyError, err.Error()))
			}
		}
	}
}

// flush records batch, retrying with backoff while the store fails, until
// ctx ends (only at Stop's deadline does it end).
func (cp *completer) flush(ctx context.Context, batch []*attempt) error {
	c := cp.c
	outcomes := make([]*store.Report, len(batch))
	for i, a := range batch {
		outcomes[i] = &a.outcome
	}
	for failures := 0; ; {
		res, err := c.store.JobFinish(ctx, &store.JobFinishParams{Reports: outcomes, Now: c.clock.Now()})
		if err == nil {
			c.storeHealth.OK(ctx)
			cp.held.RemoveReported(outcomes)
			for i, a := range batch {
				c.finished(ctx, a, res[i])
			}
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		cp.mu.Lock()
		cp.lastErr = err
		cp.mu.Unlock()
		failures++
		c.storeHealth.Fail(ctx, "finish", err)
		if !health.Sleep(ctx, c.clock, nil, health.Backoff(failures)) {
			return err
		}
	}
}
