package memstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/fetchplan"
)

// histKey names one history count: a queue's jobs of one outcome in one
// minute (Unix seconds of its start).
type histKey struct {
	queue   string
	minute  int64
	outcome store.HistoryOutcome
}

// count counts one job of queue q reaching outcome o at now, under the
// lock.
func (s *Store) count(q *queue, now time.Time, o store.HistoryOutcome) {
	if s.history == nil {
		s.history = make(map[histKey]int64)
	}
	s.history[histKey{q.name, store.HistoryMinute(now).Unix(), o}]++
}

// JobHistory returns the history counts. It reads every count the store
// keeps (at most one per queue, minute and outcome within the retention).
// See store.Store.
func (s *Store) JobHistory(ctx context.Context, p *store.JobHistoryParams) ([]store.HistoryRow, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	out := []store.HistoryRow{}
	for k, n := range s.history {
		at := time.Unix(k.minute, 0).UTC()
		if (p.Queue == "" || k.queue == p.Queue) && !at.Before(p.Since) && (p.Until.IsZero() || at.Before(p.Until)) {
			out = append(out, store.HistoryRow{Queue: k.queue, At: at, Outcome: k.outcome, Count: n})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, store.CompareHistoryRows)
	return out, nil
}

// JobHistoryPrune deletes the counts of minutes before p.Before, oldest
// first. See store.Store.
func (s *Store) JobHistoryPrune(ctx context.Context, p *store.JobHistoryPruneParams) (int, error) {
	if err := store.ValidateLimit("JobHistoryPruneParams", p.Limit); err != nil {
		return 0, err
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	var old []histKey
	for k := range s.history {
		if time.Unix(k.minute, 0).Before(p.Before) {
			old = append(old, k)
		}
	}
	slices.SortFunc(old, func(a, b histKey) int { return cmp.Compare(a.minute, b.minute) })
	old = old[:min(len(old), p.Limit)]
	for _, k := range old {
		delete(s.history, k)
	}
	return len(old), nil
}

// QueueLatency returns each queue's oldest due job from the fronts of its
// lanes (and its partitions'): one look per kind and priority. See
// store.Store.
func (s *Store) QueueLatency(ctx context.Context, p *store.QueueLatencyParams) ([]store.QueueLatencyRow, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []store.QueueLatencyRow{}
	add := func(q *queue) {
		var avail, wait time.Time
		heads := func(l *lanes) {
			for _, sub := range l.subs {
				if e := sub.avail.top(); e != nil && (avail.IsZero() || e.j.row.RunAt.Before(avail)) {
					avail = e.j.row.RunAt
				}
				if e := sub.wait.top(); e != nil && (wait.IsZero() || e.j.row.RunAt.Before(wait)) {
					wait = e.j.row.RunAt
				}
			}
		}
		heads(&q.lanes)
		for _, pt := range q.parts {
			heads(&pt.lanes)
		}
		if at := fetchplan.OldestDue(avail, wait, p.Now); !at.IsZero() {
			out = append(out, store.QueueLatencyRow{Queue: q.name, OldestRunAt: at})
		}
	}
	if p.Queue != "" {
		if q := s.queues[p.Queue]; q != nil {
			add(q)
		}
		return out, nil
	}
	for _, name := range s.names {
		add(s.queues[name])
	}
	return out, nil
}
