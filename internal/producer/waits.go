package producer

import (
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
)

// A producer of one queue on a store that can wait (store.FetchWaiter)
// spends its idle time in a waiting fetch instead of on a watch and a
// timer: once a fetch comes back short, the next one waits on the store
// until the poll timer would have fired, and the store hands it the next
// job in the step that enqueues it, one trip sooner than a wake-up and a
// claim. A waiting fetch's first step is a claim, so nothing that became
// available between two of them is missed, and the store ends a wait at
// every change a watch would have heard of (a retry, a rescue, a resumed
// queue), so the producer needs no watch. The store does not hand jobs of
// a rate-limited queue: it only wakes the wait, and the producer claims
// them with its reserved start (ratestart.go). A producer of several
// queues watches them, as on every other store.

// minWait is the shortest wait worth a waiting fetch; closer to the poll
// timer, the producer fetches at once.
const minWait = time.Millisecond

// waiterOf returns cfg's store when a producer of cfg waits on it: a
// producer of one queue on the wall clock (a store waits on the wall
// clock; a producer on another clock, a test's, waits on that one's
// timers).
func waiterOf(cfg *Config) store.FetchWaiter {
	w, ok := cfg.Store.(store.FetchWaiter)
	if _, wall := cfg.Clock.(clock.Real); !ok || !wall || len(cfg.Queues) != 1 {
		return nil
	}
	return w
}

// late returns how long ago the claim of rows began: from at, the clock
// reading before the fetch, or for a waiting fetch's jobs, claimed when
// they were handed, from the Now that claim stamped on them (their lease
// counts from it).
func (p *Producer) late(rows []*store.JobRow, at time.Time, waited bool) time.Duration {
	now := p.cfg.Clock.Now()
	if !waited || len(rows) == 0 {
		return now.Sub(at)
	}
	claimed := rows[0].LeaseUntil.Add(-p.cfg.Lease)
	for _, r := range rows[1:] {
		if c := r.LeaseUntil.Add(-p.cfg.Lease); c.Before(claimed) {
			claimed = c
		}
	}
	return now.Sub(claimed)
}
