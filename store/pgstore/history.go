package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/fetchplan"
	"github.com/sortiehq/sortie/store/internal/jobhistory"
)

// sqlHistoryAdd appends history counts to the deltas.
const sqlHistoryAdd = `INSERT INTO {s}.job_history_deltas (minute, queue, outcome, n)
	SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::bigint[])`

// addHistory appends the counts of t in tx, in one statement.
func (s *Store) addHistory(ctx context.Context, tx pgx.Tx, t *jobhistory.Tally) error {
	rows := t.Rows()
	if len(rows) == 0 {
		return nil
	}
	minutes, queues, outcomes, ns := make([]time.Time, len(rows)), make([]string, len(rows)), make([]string, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		minutes[i], queues[i], outcomes[i], ns[i] = r.At, r.Queue, string(r.Outcome), r.Count
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlHistoryAdd), minutes, queues, outcomes, ns); err != nil {
		return fmt.Errorf("update history: %w", err)
	}
	return nil
}

// sqlFoldHistory folds up to 10,000 history deltas into job_history; one
// caller at a time (the others skip), as sqlFoldCounts does for the
// counts.
const sqlFoldHistory = `WITH lock AS (
		SELECT pg_try_advisory_xact_lock(hashtext('sortie.fold_history.' || $1::text)) AS ok
	), d AS (
		DELETE FROM {s}.job_history_deltas WHERE ctid = ANY(ARRAY(
			SELECT ctid FROM {s}.job_history_deltas WHERE (SELECT ok FROM lock) LIMIT 10000))
		RETURNING minute, queue, outcome, n
	)
	INSERT INTO {s}.job_history (minute, queue, outcome, n)
		SELECT minute, queue, outcome, sum(n) FROM d GROUP BY minute, queue, outcome
	ON CONFLICT (minute, queue, outcome) DO UPDATE SET n = {s}.job_history.n + excluded.n`

// sqlHistory sums the folded counts and the deltas of the minutes from $1
// to $2 (NULL: no end), of queue $3 (NULL: every queue).
const sqlHistory = `SELECT minute, queue, outcome, sum(n)::bigint FROM (
		SELECT minute, queue, outcome, n FROM {s}.job_history
		WHERE minute >= $1 AND ($2::timestamptz IS NULL OR minute < $2) AND ($3::text IS NULL OR queue = $3)
		UNION ALL
		SELECT minute, queue, outcome, n FROM {s}.job_history_deltas
		WHERE minute >= $1 AND ($2::timestamptz IS NULL OR minute < $2) AND ($3::text IS NULL OR queue = $3)
	) h GROUP BY minute, queue, outcome HAVING sum(n) <> 0 ORDER BY minute, queue`

// JobHistory folds the history deltas (skipped when another caller is
// folding) and reads the counts, pipelined in one round trip. See
// store.Store.
func (s *Store) JobHistory(ctx context.Context, p *store.JobHistoryParams) ([]store.HistoryRow, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var until *time.Time
	if !p.Until.IsZero() {
		until = &p.Until
	}
	var queue *string
	if p.Queue != "" {
		queue = &p.Queue
	}
	b := &pgx.Batch{}
	b.Queue(s.q.get(sqlFoldHistory), s.schema)
	b.Queue(s.q.get(sqlHistory), p.Since, until, queue)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, s.opErr("read history", err)
	}
	rs, err := br.Query()
	if err != nil {
		return nil, s.opErr("read history", err)
	}
	defer rs.Close()
	out := []store.HistoryRow{}
	for rs.Next() {
		var r store.HistoryRow
		var outcome string
		if err := rs.Scan(&r.At, &r.Queue, &outcome, &r.Count); err != nil {
			return nil, s.opErr("read history", err)
		}
		r.At, r.Outcome = r.At.UTC(), store.HistoryOutcome(outcome)
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, s.opErr("read history", err)
	}
	slices.SortFunc(out, store.CompareHistoryRows)
	return out, nil
}

// sqlHistoryPrune deletes up to $2 counts of minutes before $1, oldest
// first.
const sqlHistoryPrune = `DELETE FROM {s}.job_history WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM {s}.job_history WHERE minute < $1 ORDER BY minute LIMIT $2))`

// JobHistoryPrune folds the history deltas and deletes the oldest counts
// before p.Before. See store.Store.
func (s *Store) JobHistoryPrune(ctx context.Context, p *store.JobHistoryPruneParams) (int, error) {
	if err := store.ValidateLimit("JobHistoryPruneParams", p.Limit); err != nil {
		return 0, err
	}
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	b := &pgx.Batch{}
	b.Queue(s.q.get(sqlFoldHistory), s.schema)
	b.Queue(s.q.get(sqlHistoryPrune), p.Before, p.Limit)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return 0, s.opErr("prune history", err)
	}
	tag, err := br.Exec()
	if err != nil {
		return 0, s.opErr("prune history", err)
	}
	return int(tag.RowsAffected()), nil
}

// sqlLatency reads, for queue $1 (NULL: every queue) when its counters say
// it has available, scheduled or retrying jobs, the earliest RunAt of its
// available jobs of each priority and of its scheduled and retrying ones:
// each a min() over an equality prefix of jobs_fetch or jobs_due, which
// PostgreSQL answers by reading the first entry.
var sqlLatency = func() string {
	var b strings.Builder
	b.WriteString(`SELECT q.queue`)
	for p := store.PriorityHighest; p <= store.PriorityLowest; p++ {
		fmt.Fprintf(&b, `,
		(SELECT min(run_at) FROM {s}.jobs WHERE state = 'available' AND queue = q.queue AND priority = %d)`, p)
	}
	b.WriteString(`,
		(SELECT min(run_at) FROM {s}.jobs WHERE state IN ('scheduled', 'retrying') AND queue = q.queue)
	FROM (SELECT queue FROM (
			SELECT queue, state, n FROM {s}.job_counts
			UNION ALL
			SELECT queue, state, n FROM {s}.job_count_deltas
		) c WHERE state IN ('available', 'scheduled', 'retrying') AND ($1::text IS NULL OR queue = $1)
		GROUP BY queue HAVING sum(n) > 0) q
	ORDER BY q.queue`)
	return b.String()
}()

// QueueLatency reads the heads of each queue's indexes of available and
// due jobs in one statement (sqlLatency). See store.Store.
func (s *Store) QueueLatency(ctx context.Context, p *store.QueueLatencyParams) ([]store.QueueLatencyRow, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var queue *string
	if p.Queue != "" {
		queue = &p.Queue
	}
	rs, err := s.pool.Query(ctx, s.q.get(sqlLatency), queue)
	if err != nil {
		return nil, s.opErr("read queue latency", err)
	}
	defer rs.Close()
	const heads = store.PriorityLowest - store.PriorityHighest + 2
	out := []store.QueueLatencyRow{}
	for rs.Next() {
		var q string
		var at [heads]*time.Time
		dest := []any{&q}
		for i := range at {
			dest = append(dest, &at[i])
		}
		if err := rs.Scan(dest...); err != nil {
			return nil, s.opErr("read queue latency", err)
		}
		var avail, wait time.Time
		for _, t := range at[:heads-1] {
			if t != nil && (avail.IsZero() || t.Before(avail)) {
				avail = *t
			}
		}
		if at[heads-1] != nil {
			wait = *at[heads-1]
		}
		if o := fetchplan.OldestDue(avail, wait, p.Now); !o.IsZero() {
			out = append(out, store.QueueLatencyRow{Queue: q, OldestRunAt: o.UTC()})
		}
	}
	if err := rs.Err(); err != nil {
		return nil, s.opErr("read queue latency", err)
	}
	return out, nil
}
