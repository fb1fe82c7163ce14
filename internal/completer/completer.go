// Package completer records the outcomes of a client's attempts in
// batches, without ever acknowledging a job whose handler has not returned.
package completer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/held"
	"github.com/sortiehq/sortie/internal/logkey"
	"github.com/sortiehq/sortie/store"
)

const (
	// completeBatchMax caps the outcomes recorded in one store call.
	completeBatchMax = 1000
	// completePendingMax is how many outcomes may wait for the store before
	// workers block (and so stop taking new jobs) until it catches up.
	completePendingMax = 10000
)

// StopTimeout bounds how long Stop keeps retrying to record the last
// outcomes when its context has no deadline; jobs left unrecorded are
// rescued after their lease.
const StopTimeout = 10 * time.Second

// Finisher is the store call the completer makes.
type Finisher interface {
	// JobFinish records reports in one call, as store.Store.JobFinish.
	JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error)
}

// Config is what a Completer of attempts of type A works with.
type Config[A any] struct {
	Store  Finisher
	Clock  clock.Clock
	Health *health.Health
	Logger *slog.Logger
	// Held loses the claims of recorded attempts.
	Held *held.Set
	// Report returns the outcome to record for a.
	Report func(a A) *store.Report
	// Finished is called, in batch order, for each attempt whose outcome
	// the store answered for, with the store's answer.
	Finished func(ctx context.Context, a A, res store.ReportResult)
}

// Completer records attempts' outcomes in batches: one store call takes
// every outcome that arrived while the previous call ran, so a busy client
// pays one round trip for many jobs and an idle one adds no delay. A job is
// acknowledged only after its handler returned.
type Completer[A any] struct {
	cfg Config[A]
	// ctx is the loop's; cancel ends its store calls when Stop's deadline
	// passes.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	room     *sync.Cond // signalled when pending shrinks
	pending  []A
	inFlight int   // outcomes of the store call under way
	failed   int   // outcomes given up on during Stop
	lastErr  error // the store's last failure to record outcomes
	stopping bool

	wake chan struct{}
	done chan struct{}
}

// New returns a completer whose store calls run under ctx until Stop. Its
// owner runs Loop in a goroutine and calls Stop.
func New[A any](ctx context.Context, cfg Config[A]) *Completer[A] {
	cp := &Completer[A]{cfg: cfg, wake: make(chan struct{}, 1), done: make(chan struct{})}
	cp.ctx, cp.cancel = context.WithCancel(ctx)
	cp.room = sync.NewCond(&cp.mu)
	return cp
}

// Add queues a finished attempt. It blocks while too many outcomes wait.
// After Stop, what it queues is never recorded: the job's lease and the
// rescue decide.
func (cp *Completer[A]) Add(a A) {
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

// Stop records everything pending, retrying while the store fails, until
// ctx ends. It returns how many outcomes were not recorded and the store's
// last error. When ctx ends first it returns at once, without waiting for
// a store call that does not honour cancellation.
func (cp *Completer[A]) Stop(ctx context.Context) (unrecorded int, err error) {
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

// Loop records what Add queues until Stop has recorded the last of it, or
// gave up.
func (cp *Completer[A]) Loop() {
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
				cp.cfg.Logger.Error("could not record job outcomes; the jobs will be rescued when their lease expires",
					slog.Int(logkey.Count, n), slog.String(logkey.Error, err.Error()))
			}
		}
	}
}

// flush records batch, retrying with backoff while the store fails, until
// ctx ends (only at Stop's deadline does it end).
func (cp *Completer[A]) flush(ctx context.Context, batch []A) error {
	c := &cp.cfg
	outcomes := make([]*store.Report, len(batch))
	for i, a := range batch {
		outcomes[i] = c.Report(a)
	}
	for failures := 0; ; {
		res, err := c.Store.JobFinish(ctx, &store.JobFinishParams{Reports: outcomes, Now: c.Clock.Now()})
		if err == nil {
			c.Health.OK(ctx)
			c.Held.RemoveReported(outcomes)
			for i, a := range batch {
				c.Finished(ctx, a, res[i])
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
		c.Health.Fail(ctx, "finish", err)
		if !health.Sleep(ctx, c.Clock, nil, health.Backoff(failures)) {
			return err
		}
	}
}
