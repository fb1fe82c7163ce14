package pgstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
)

// notifyGap is the shortest time between two NOTIFYs of one queue from
// plain enqueues of one Store. Under load, enqueues then NOTIFY about once
// per gap instead of once per statement (each NOTIFY takes a global lock
// at commit and wakes every listener); a worker learns of a job at most
// one gap late.
const notifyGap = time.Millisecond

// debouncer decides which queues a plain enqueue notifies. A queue
// notified less than notifyGap ago is left out of the statement; after the
// statement commits it is marked, and a NOTIFY follows at the end of the
// gap, so the last enqueue of a burst always wakes the workers.
type debouncer struct {
	clock   clock.Clock // the enqueues' clock is the caller's; this one spaces NOTIFYs
	mu      sync.Mutex
	last    map[string]time.Time
	pending map[string]bool // marked after commit; a NOTIFY is scheduled
	send    func(queues []string)
	flushes sync.WaitGroup // scheduled NOTIFYs, waited for by Close
}

func newDebouncer(c clock.Clock, send func([]string)) *debouncer {
	return &debouncer{clock: c, last: map[string]time.Time{}, pending: map[string]bool{}, send: send}
}

// take returns the queues to notify in the statement now, recording them
// as notified, and the queues left for later (pass those to committed).
func (d *debouncer) take(queues []string) (now, later []string) {
	t := d.clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range queues {
		if t.Sub(d.last[q]) >= notifyGap {
			d.last[q] = t
			now = append(now, q)
		} else {
			later = append(later, q)
		}
	}
	return now, later
}

// committed schedules a NOTIFY at the end of the gap of each queue in
// later, whose enqueue has committed.
func (d *debouncer) committed(later []string) {
	if len(later) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range later {
		if d.pending[q] {
			continue
		}
		d.pending[q] = true
		timer := d.clock.NewTimer(max(notifyGap-d.clock.Now().Sub(d.last[q]), 0))
		d.flushes.Add(1)
		go func() {
			defer d.flushes.Done()
			<-timer.C()
			d.flush(q)
		}()
	}
}

func (d *debouncer) flush(q string) {
	d.mu.Lock()
	delete(d.pending, q)
	d.last[q] = d.clock.Now()
	d.mu.Unlock()
	d.send([]string{q})
}

// sendNotify is the debouncer's send: a NOTIFY statement of its own.
func (s *Store) sendNotify(queues []string) {
	if s.closed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.notify(ctx, s.pool, slices.Clone(queues)); err != nil && !s.closed.Load() {
		// Workers still poll; the next enqueue notifies again.
		s.log.Warn("pgstore: deferred NOTIFY failed", "queues", queues, "err", err)
	}
}
