package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/fetchplan"
)

// JobHistory reads the history counts of a range of minutes: a range of
// job_history's key. See store.Store.
func (s *Store) JobHistory(ctx context.Context, p *store.JobHistoryParams) ([]store.HistoryRow, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	if !p.Since.IsZero() {
		from = micros(p.Since)
	}
	if !p.Until.IsZero() {
		to = micros(p.Until)
	}
	rows, err := s.reads.history.QueryContext(ctx, from, to, p.Queue)
	if err != nil {
		return nil, s.readErr("read history", err)
	}
	defer rows.Close()
	out := []store.HistoryRow{}
	for rows.Next() {
		var r store.HistoryRow
		var minute int64
		var outcome string
		if err := rows.Scan(&minute, &r.Queue, &outcome, &r.Count); err != nil {
			return nil, s.readErr("read history", err)
		}
		r.At, r.Outcome = fromMicros(minute), store.HistoryOutcome(outcome)
		if r.Count != 0 {
			out = append(out, r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("read history", err)
	}
	slices.SortFunc(out, store.CompareHistoryRows)
	return out, nil
}

// JobHistoryPrune deletes the oldest history counts before p.Before in one
// write transaction. See store.Store.
func (s *Store) JobHistoryPrune(ctx context.Context, p *store.JobHistoryPruneParams) (int, error) {
	if err := store.ValidateLimit("JobHistoryPruneParams", p.Limit); err != nil {
		return 0, err
	}
	var n int64
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		res, err := t.w.stmts.historyPrune.ExecContext(t.ctx, micros(p.Before), p.Limit)
		if err != nil {
			return fmt.Errorf("delete history: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return 0, opErr("prune history", err)
	}
	return int(n), nil
}

// QueueLatency reads the heads of each queue's indexes of available and
// due jobs in one statement (sqlLatency). See store.Store.
func (s *Store) QueueLatency(ctx context.Context, p *store.QueueLatencyParams) ([]store.QueueLatencyRow, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	rows, err := s.reads.latency.QueryContext(ctx, p.Queue)
	if err != nil {
		return nil, s.readErr("read queue latency", err)
	}
	defer rows.Close()
	out := []store.QueueLatencyRow{}
	heads := make([]sql.NullInt64, latencyColumns)
	dest := make([]any, 1+latencyColumns)
	for i := range heads {
		dest[1+i] = &heads[i]
	}
	for rows.Next() {
		var q string
		dest[0] = &q
		if err := rows.Scan(dest...); err != nil {
			return nil, s.readErr("read queue latency", err)
		}
		var avail time.Time
		for _, h := range heads[:latencyColumns-1] {
			if at := fromNullMicros(h); !at.IsZero() && (avail.IsZero() || at.Before(avail)) {
				avail = at
			}
		}
		if at := fetchplan.OldestDue(avail, fromNullMicros(heads[latencyColumns-1]), p.Now); !at.IsZero() {
			out = append(out, store.QueueLatencyRow{Queue: q, OldestRunAt: at})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("read queue latency", err)
	}
	return out, nil
}
