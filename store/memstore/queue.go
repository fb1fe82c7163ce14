package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/ratelimit"
)

// lanes holds pending jobs split into sublanes, sorted by priority then
// kind; byKey finds them. A queue has one for its jobs without a partition
// key, and each partition one for its own.
type lanes struct {
	subs  []*sublane
	byKey map[subKey]*sublane
}

// sublane returns the sublane of kind and prio, making it if needed.
func (l *lanes) sublane(kind string, prio int) *sublane {
	k := subKey{kind, prio}
	if sub := l.byKey[k]; sub != nil {
		return sub
	}
	if l.byKey == nil {
		l.byKey = make(map[subKey]*sublane)
	}
	sub := &sublane{kind: kind, prio: prio, owner: l}
	l.byKey[k] = sub
	i, _ := slices.BinarySearchFunc(l.subs, k, func(s *sublane, k subKey) int {
		if s.prio != k.prio {
			return s.prio - k.prio
		}
		switch {
		case s.kind < k.kind:
			return -1
		case s.kind > k.kind:
			return 1
		}
		return 0
	})
	l.subs = slices.Insert(l.subs, i, sub)
	return sub
}

// idle drops sub, which has no pending job, when the lanes keep more than
// maxIdleSublanes (so sublanes do not churn in the usual case of a few
// kinds, and do not pile up with many).
func (l *lanes) idle(sub *sublane) {
	if len(l.subs) > maxIdleSublanes {
		delete(l.byKey, subKey{sub.kind, sub.prio})
		l.subs = slices.DeleteFunc(l.subs, func(x *sublane) bool { return x == sub })
	}
}

// best returns the first due entry of the sublanes in l whose kind match
// accepts (nil accepts all), in (priority, RunAt, ID) order, with its
// priority and lane; e is nil when there is none.
func (l *lanes) best(match func(string) bool, nowSec int64, nowNsec int32) (prio int, e *entry, from *lane) {
	for _, sub := range l.subs {
		if e != nil && sub.prio > prio {
			break
		}
		if match != nil && !match(sub.kind) {
			continue
		}
		if t := sub.avail.top(); t != nil && (e == nil || t.less(e)) {
			prio, e, from = sub.prio, t, &sub.avail
		}
		if t := sub.wait.top(); t != nil && !t.after(nowSec, nowNsec) && (e == nil || t.less(e)) {
			prio, e, from = sub.prio, t, &sub.wait
		}
	}
	return prio, e, from
}

// partition holds the pending jobs of one PartitionKey in one queue and the
// state its limits need. It exists while it has pending jobs or starts in
// its rate window.
type partition struct {
	key string
	lanes
	pending int // pending jobs, running ones included
	running int
	starts  window
}

// window logs start times (Unix nanoseconds) in time order for a sliding
// rate window: a start at t counts at now while t > now - period, even when
// t is after now (callers read their clocks before they take the lock, so a
// start can be recorded with a later clock than the next caller's).
type window struct {
	t    []int64
	head int
}

func (w *window) len() int { return len(w.t) - w.head }

// push records a start, keeping the log in time order; starts almost always
// come in order, so this appends.
func (w *window) push(t int64) {
	w.t = append(w.t, t)
	for i := len(w.t) - 1; i > w.head && w.t[i-1] > t; i-- {
		w.t[i-1], w.t[i] = t, w.t[i-1]
	}
}

// remove forgets one start logged at t, if the log still holds one.
func (w *window) remove(t int64) {
	live := w.t[w.head:]
	i, found := slices.BinarySearch(live, t)
	if !found {
		return
	}
	w.t = slices.Delete(w.t, w.head+i, w.head+i+1)
}

// at returns the i-th start still logged, oldest first.
func (w *window) at(i int) int64 { return w.t[w.head+i] }

func (w *window) reset() { w.t, w.head = nil, 0 }

// prune forgets the starts that no caller's window can still hold: those
// before ratelimit.Window.ForgetBefore(now), so a caller whose Now lags
// behind (a shorter reserved start, a clock a little behind) still sees
// every start it must.
func (w *window) prune(now int64, period time.Duration) {
	cut := ratelimit.Window{Period: period}.ForgetBefore(time.Unix(0, now)).UnixNano()
	for w.head < len(w.t) && w.t[w.head] <= cut {
		w.head++
	}
	switch {
	case w.head == len(w.t):
		w.t, w.head = w.t[:0], 0
	case w.head > 64 && 2*w.head > len(w.t):
		n := copy(w.t, w.t[w.head:])
		w.t, w.head = w.t[:n], 0
	}
}

// room returns how many more starts the window allows at now under limit
// starts per period.
func (w *window) room(now int64, limit int, period time.Duration) int {
	w.prune(now, period)
	from := now - int64(period)
	live := w.t[w.head:]
	first, _ := slices.BinarySearch(live, from+1) // the first start after from
	return limit - (len(live) - first)
}

// freeAt returns when the window rate, full at now, next allows a start
// (ratelimit.Window.FreeAt over the starts it holds in its window).
func (w *window) freeAt(rate ratelimit.Window, now time.Time) time.Time {
	from := rate.From(now).UnixNano()
	starts := make([]ratelimit.Start, 0, w.len())
	for i := range w.len() {
		if t := w.at(i); t > from {
			starts = append(starts, ratelimit.Start{At: time.Unix(0, t), N: 1})
		}
	}
	return rate.FreeAt(starts)
}

// partition returns the partition of key in q, making it if needed.
func (q *queue) partition(key string) *partition {
	if p := q.parts[key]; p != nil {
		return p
	}
	if q.parts == nil {
		q.parts = make(map[string]*partition)
	}
	p := &partition{key: key}
	q.parts[key] = p
	return p
}

// partIdle drops p when nothing needs it any more.
func (q *queue) partIdle(p *partition) {
	if p.pending == 0 && p.starts.len() == 0 {
		delete(q.parts, p.key)
	}
}

// setLimited recomputes whether JobFetch must compute a cap for q.
func (q *queue) setLimited() {
	q.limited = q.paused || q.set.MaxRunning > 0 || q.set.RateLimit > 0
}

// capacity returns how many jobs a fetch at now may claim from q, at most
// limit, under its pause, MaxRunning and RateLimit.
func (q *queue) capacity(limit int, now time.Time) int {
	if q.paused {
		return 0
	}
	if m := q.set.MaxRunning; m > 0 {
		limit = min(limit, m-int(q.counts[stRunning]))
	}
	if r := q.set.RateLimit; r > 0 {
		limit = min(limit, q.starts.room(now.UnixNano(), r, q.set.RatePeriod))
	}
	return limit
}

// partCapacity returns how many jobs a fetch at now may claim from p.
func (q *queue) partCapacity(p *partition, now int64) int {
	c := int(^uint(0) >> 1)
	if m := q.set.PartitionMaxRunning; m > 0 {
		c = m - p.running
	}
	if r := q.set.PartitionRateLimit; r > 0 && c > 0 {
		c = min(c, p.starts.room(now, r, q.set.PartitionRatePeriod))
	}
	return c
}

// row returns q's shared state.
func (q *queue) row() *store.QueueRow {
	return &store.QueueRow{Name: q.name, Paused: q.paused, Settings: q.set, Dropped: q.dropped, UpdatedAt: q.updatedAt}
}

// listed reports whether QueueList shows q: it has jobs, or was configured
// or paused.
func (q *queue) listed() bool {
	if !q.updatedAt.IsZero() || q.paused || q.set != (store.QueueSettings{}) {
		return true
	}
	for _, n := range q.counts {
		if n != 0 {
			return true
		}
	}
	return false
}

// queued returns the jobs of q counting toward MaxDepth.
func (q *queue) queued() int64 {
	return q.counts[stWaiting] + q.counts[stScheduled] + q.counts[stAvailable] + q.counts[stRetrying]
}

// QueueConfigure replaces a queue's settings. Invalid settings (a negative
// value, a rate limit without a period, an unknown Overflow) return an error
// naming the field. See store.Store.
func (s *Store) QueueConfigure(ctx context.Context, p *store.QueueConfigureParams) (*store.QueueRow, error) {
	if p.Queue == "" {
		return nil, fmt.Errorf("configure queue: queue name is empty")
	}
	if err := p.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("configure queue %q: %w", p.Queue, err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	q := s.queue(p.Queue)
	q.set, q.updatedAt = p.Settings, p.Now
	q.setLimited()
	if q.set.RateLimit == 0 {
		q.starts.reset()
	}
	if q.set.PartitionRateLimit == 0 {
		for _, pt := range q.parts {
			pt.starts.reset()
			q.partIdle(pt)
		}
	}
	row := q.row()
	s.mu.Unlock()
	// Raised limits may let waiting workers claim more.
	s.hub.Notify(p.Queue)
	return row, nil
}

// QueueGet returns a queue's state. See store.Store.
func (s *Store) QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.QueueRow, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if q := s.queues[p.Queue]; q != nil {
		return q.row(), nil
	}
	return &store.QueueRow{Name: p.Queue}, nil
}

// QueueList returns every queue that has jobs or was configured or paused,
// by name. See store.Store.
func (s *Store) QueueList(ctx context.Context, _ *store.QueueListParams) ([]*store.QueueRow, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []*store.QueueRow{}
	for _, name := range s.names {
		if q := s.queues[name]; q.listed() {
			out = append(out, q.row())
		}
	}
	return out, nil
}

// QueueDelete deletes an empty queue. See store.Store.
func (s *Store) QueueDelete(ctx context.Context, p *store.QueueDeleteParams) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	q := s.queues[p.Queue]
	if q == nil {
		return nil
	}
	var jobs int64
	for _, n := range q.counts {
		jobs += n
	}
	if jobs != 0 {
		return store.QueueNotEmptyError(p.Queue, jobs)
	}
	delete(s.queues, p.Queue)
	if i, ok := slices.BinarySearch(s.names, p.Queue); ok {
		s.names = slices.Delete(s.names, i, i+1)
	}
	return nil
}

// QueuePause pauses or resumes a queue. See store.Store.
func (s *Store) QueuePause(ctx context.Context, p *store.QueuePauseParams) (*store.QueueRow, error) {
	if p.Queue == "" {
		return nil, fmt.Errorf("pause queue: queue name is empty")
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	q := s.queue(p.Queue)
	q.paused, q.updatedAt = p.Paused, p.Now
	q.setLimited()
	row := q.row()
	s.mu.Unlock()
	if !p.Paused {
		s.hub.Notify(p.Queue)
	}
	return row, nil
}
