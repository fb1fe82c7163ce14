// Package health tracks a store's outages for the runtime's loops, so each
// outage is logged once when it starts and once when it is over, and gives
// them the backoff and the interruptible sleep they retry with.
package health

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/logkey"
	"github.com/sortiehq/sortie/store"
)

// healthSettle is how long a failing store must keep succeeding, with no
// failure, before the outage is logged as over.
const healthSettle = time.Second

// Health logs a store outage once when it starts and once when it is over,
// instead of on every retry; an outage that begins with a full store
// (store.ErrStoreFull) is logged as one, not as a store that does not
// answer. An outage is over once calls have succeeded
// for healthSettle without a failure between them: a store that fails every
// other call (a restarting server, a flaky network, one of two concurrent
// fetches failing) is one outage, not a log line per flip. A call that
// began before the successes, and whose failure is reported late (a fetch
// whose answer waited behind the other fetch's backoff), belongs to the
// outage it began in: it neither starts the settling over nor, once the
// outage is over, starts another.
//
// A Health is safe for concurrent use; its zero value with Logger and What
// set is ready.
type Health struct {
	// Logger receives the outage's two lines.
	Logger *slog.Logger
	// What names the failing party in the log ("store").
	What string
	// Now is the client's clock; nil means time.Now.
	Now func() time.Time

	// failing is read without the lock on every success, so that a
	// healthy store costs its callers an atomic load.
	failing atomic.Bool

	mu       sync.Mutex
	since    time.Time // the outage's first failure
	okSince  time.Time // the first success since the last failure; zero if none
	failures int       // failed calls during the outage
	// full: the outage began with a store that has no room
	// (store.ErrStoreFull), not one that does not answer.
	full bool
	// recovered is the first success of the run that ended the last
	// outage: a call begun before it failed during that outage.
	recovered time.Time

	// corrupt is the first failure that found the store's data damaged
	// (store.ErrCorrupt): not an outage, and it stays.
	corrupt atomic.Pointer[error]
}

// Corrupt returns the first failure reported to h that found the store's
// data damaged (it wraps store.ErrCorrupt), or nil.
func (h *Health) Corrupt() error {
	if p := h.corrupt.Load(); p != nil {
		return *p
	}
	return nil
}

func (h *Health) clock() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// Fail records a store call that failed just now; op names the call in
// the log.
func (h *Health) Fail(ctx context.Context, op string, err error) {
	h.FailCall(ctx, op, h.clock(), err)
}

// FailCall records a failed store call that began at began (by h's clock).
// A call that found the store's data damaged is no outage: it is logged
// once, as an error saying to restore from a backup, and kept for Corrupt.
func (h *Health) FailCall(ctx context.Context, op string, began time.Time, err error) {
	if errors.Is(err, store.ErrCorrupt) {
		if h.corrupt.CompareAndSwap(nil, &err) {
			h.Logger.ErrorContext(ctx, h.What+" is corrupt: retrying will not help; restore it from a backup",
				slog.String("op", op), slog.String(logkey.Error, err.Error()))
		}
		return
	}
	h.mu.Lock()
	first := !h.failing.Load()
	if first && began.Before(h.recovered) {
		h.mu.Unlock()
		return
	}
	full := errors.Is(err, store.ErrStoreFull)
	if first {
		h.failing.Store(true)
		h.since = h.clock()
		h.failures = 0
		h.full = full
	}
	h.failures++
	if !began.Before(h.okSince) {
		h.okSince = time.Time{}
	}
	h.mu.Unlock()
	switch {
	case first && full:
		h.Logger.WarnContext(ctx, h.What+" full, backing off", slog.String("op", op), slog.String(logkey.Error, err.Error()))
	case first:
		h.Logger.WarnContext(ctx, h.What+" unreachable, backing off", slog.String("op", op), slog.String(logkey.Error, err.Error()))
	}
}

// OK records a successful store call. Callers call it after every success,
// not only the first after a failure: the outage ends on a later one.
func (h *Health) OK(ctx context.Context) {
	if !h.failing.Load() {
		return
	}
	now := h.clock()
	h.mu.Lock()
	if !h.failing.Load() {
		h.mu.Unlock()
		return
	}
	if h.okSince.IsZero() {
		h.okSince = now
	}
	over := now.Sub(h.okSince) >= healthSettle
	lasted, failures, full := h.okSince.Sub(h.since), h.failures, h.full
	if over {
		h.failing.Store(false)
		h.recovered = h.okSince
	}
	h.mu.Unlock()
	switch {
	case over && full:
		h.Logger.InfoContext(ctx, h.What+" has room again", slog.Duration(logkey.Duration, lasted), slog.Int(logkey.Failed, failures))
	case over:
		h.Logger.InfoContext(ctx, h.What+" reachable again", slog.Duration(logkey.Duration, lasted), slog.Int(logkey.Failed, failures))
	}
}

// Backoff returns the wait before retry n (1-based) of a failing store call:
// 50ms doubling up to 5s, with jitter.
func Backoff(n int) time.Duration {
	d := 50 * time.Millisecond << min(n-1, 7)
	d = min(d, 5*time.Second)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Sleep waits d on clk, or until done is closed or ctx ends; it reports
// whether the full wait passed. A nil done never closes.
func Sleep(ctx context.Context, clk clock.Clock, done <-chan struct{}, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	case <-ctx.Done():
		return false
	}
}

// quietEvery is Quiet's period when Every is zero.
const quietEvery = time.Minute

// Quiet lets one warning a period through for each kind of failure of a
// store, for code that has no outage to track (a request handler, which
// does not retry): the first failure of a kind is logged, the next ones
// of that kind within the period are only counted, and the count goes
// with the next line of the kind logged. A kind is a word the caller
// chooses ("full", "unreachable"), from a small set: one failing in
// another way is not hidden behind the first. A Quiet is safe for
// concurrent use; its zero value is ready.
type Quiet struct {
	// Every is the period; zero means a minute.
	Every time.Duration

	mu    sync.Mutex
	kinds map[string]*quietKind
}

// quietKind is what a Quiet keeps of one kind of failure.
type quietKind struct {
	next time.Time
	held int
}

// Allow reports whether a line about a failure of kind may be logged at
// now, and how many of that kind were held back since the last one that
// was.
func (q *Quiet) Allow(kind string, now time.Time) (ok bool, held int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := q.kinds[kind]
	if k == nil {
		if q.kinds == nil {
			q.kinds = make(map[string]*quietKind)
		}
		k = &quietKind{}
		q.kinds[kind] = k
	}
	if now.Before(k.next) {
		k.held++
		return false, 0
	}
	held, k.held = k.held, 0
	every := q.Every
	if every == 0 {
		every = quietEvery
	}
	k.next = now.Add(every)
	return true, held
}

// Kind names the kind of a store's failure for Quiet: "full"
// (store.ErrStoreFull), "closed" (store.ErrClosed), or "failed".
func Kind(err error) string {
	switch {
	case errors.Is(err, store.ErrStoreFull):
		return "full"
	case errors.Is(err, store.ErrClosed):
		return "closed"
	}
	return "failed"
}
