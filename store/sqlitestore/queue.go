package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
)

// queueState is the writer's cached copy of a queue's shared state.
type queueState struct {
	paused bool
	s      store.QueueSettings
}

// partitioned reports whether the queue has per-partition limits.
func (q *queueState) partitioned() bool {
	return q.s.PartitionMaxRunning > 0 || q.s.PartitionRateLimit > 0
}

// settingsJSON is how QueueSettings are stored in queues.settings.
type settingsJSON struct {
	MaxRunning          int   `json:"max_running,omitempty"`
	RateLimit           int   `json:"rate_limit,omitempty"`
	RatePeriod          int64 `json:"rate_period_ns,omitempty"`
	PartitionMaxRunning int   `json:"partition_max_running,omitempty"`
	PartitionRateLimit  int   `json:"partition_rate_limit,omitempty"`
	PartitionRatePeriod int64 `json:"partition_rate_period_ns,omitempty"`
	MaxDepth            int   `json:"max_depth,omitempty"`
	Overflow            int   `json:"overflow,omitempty"`
}

func encodeSettings(s store.QueueSettings) (string, error) {
	b, err := json.Marshal(settingsJSON{
		MaxRunning: s.MaxRunning, RateLimit: s.RateLimit, RatePeriod: int64(s.RatePeriod),
		PartitionMaxRunning: s.PartitionMaxRunning, PartitionRateLimit: s.PartitionRateLimit,
		PartitionRatePeriod: int64(s.PartitionRatePeriod), MaxDepth: s.MaxDepth, Overflow: int(s.Overflow),
	})
	return string(b), err
}

func decodeSettings(v sql.NullString) (store.QueueSettings, error) {
	var j settingsJSON
	if v.Valid && v.String != "" {
		if err := json.Unmarshal([]byte(v.String), &j); err != nil {
			return store.QueueSettings{}, fmt.Errorf("decode queue settings: %w", err)
		}
	}
	return store.QueueSettings{
		MaxRunning: j.MaxRunning, RateLimit: j.RateLimit, RatePeriod: time.Duration(j.RatePeriod),
		PartitionMaxRunning: j.PartitionMaxRunning, PartitionRateLimit: j.PartitionRateLimit,
		PartitionRatePeriod: time.Duration(j.PartitionRatePeriod), MaxDepth: j.MaxDepth, Overflow: store.Overflow(j.Overflow),
	}, nil
}

// scanQueue reads one row of sqlQueueColumns.
func scanQueue(s scanner) (*store.QueueRow, error) {
	var (
		q        store.QueueRow
		paused   bool
		settings sql.NullString
		updated  sql.NullInt64
	)
	if err := s.Scan(&q.Name, &paused, &settings, &q.Dropped, &updated); err != nil {
		return nil, err
	}
	st, err := decodeSettings(settings)
	if err != nil {
		return nil, fmt.Errorf("queue %q: %w", q.Name, err)
	}
	q.Paused, q.Settings, q.UpdatedAt = paused, st, fromNullMicros(updated)
	return &q, nil
}

// reloadQueues reads the queues table into the writer's cache, as of
// queues_version version.
func (t *txn) reloadQueues(version int64) error {
	rows, err := t.w.stmts.queuesAll.QueryContext(t.ctx)
	if err != nil {
		return fmt.Errorf("read queues: %w", err)
	}
	defer rows.Close()
	m := make(map[string]*queueState)
	for rows.Next() {
		q, err := scanQueue(rows)
		if err != nil {
			return fmt.Errorf("read queues: %w", err)
		}
		if q.Paused || q.Settings != (store.QueueSettings{}) {
			m[q.Name] = &queueState{paused: q.Paused, s: q.Settings}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read queues: %w", err)
	}
	t.w.queues, t.w.queuesVersion = m, version
	return nil
}

// queueChanged bumps queues_version after a change of settings or pause and
// reloads the cache, so later requests of the same group see the change.
func (t *txn) queueChanged() error {
	t.w.queuesVersion = -1
	if _, err := t.w.stmts.queuesBump.ExecContext(t.ctx); err != nil {
		return fmt.Errorf("update queues version: %w", err)
	}
	t.seqLoaded = false
	return t.loadSequences()
}

// queueRowForWrite reads a queue's row in the writer; a queue never
// configured gets a zero row.
func queueRowForWrite(t *txn, name string) (*store.QueueRow, error) {
	q, err := scanQueue(t.w.stmts.queueGet.QueryRowContext(t.ctx, name))
	if errNoRows(err) {
		return &store.QueueRow{Name: name}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read queue %q: %w", name, err)
	}
	return q, nil
}

// QueueConfigure replaces p.Queue's settings and returns its state. It
// returns an error naming the field when a setting is invalid (negative, a
// rate limit without a period, an unknown Overflow).
func (s *Store) QueueConfigure(ctx context.Context, p *store.QueueConfigureParams) (*store.QueueRow, error) {
	if p.Queue == "" {
		return nil, fmt.Errorf("sqlitestore: configure queue: empty queue name")
	}
	if err := p.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("sqlitestore: configure queue %q: %w", p.Queue, err)
	}
	enc, err := encodeSettings(p.Settings)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: configure queue %q: %w", p.Queue, err)
	}
	var out *store.QueueRow
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		if _, err := t.w.stmts.queueConfigure.ExecContext(t.ctx, p.Queue, enc, micros(p.Now)); err != nil {
			return err
		}
		if err := t.queueChanged(); err != nil {
			return err
		}
		// New limits may let more jobs start.
		r.wake(p.Queue)
		out, err = queueRowForWrite(t, p.Queue)
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return nil, fmt.Errorf("sqlitestore: configure queue %q: %w", p.Queue, err)
	}
	return out, nil
}

// QueuePause pauses or resumes p.Queue for every process using the file.
// Resuming signals the queue's watchers in this process.
func (s *Store) QueuePause(ctx context.Context, p *store.QueuePauseParams) (*store.QueueRow, error) {
	if p.Queue == "" {
		return nil, fmt.Errorf("sqlitestore: pause queue: empty queue name")
	}
	var out *store.QueueRow
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		if _, err := t.w.stmts.queuePause.ExecContext(t.ctx, p.Queue, p.Paused, micros(p.Now)); err != nil {
			return err
		}
		if err := t.queueChanged(); err != nil {
			return err
		}
		if !p.Paused {
			r.wake(p.Queue)
		}
		var err error
		out, err = queueRowForWrite(t, p.Queue)
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return nil, fmt.Errorf("sqlitestore: pause queue %q: %w", p.Queue, err)
	}
	return out, nil
}

// QueueDelete deletes an empty queue's settings, pause and rate window in
// one write transaction. See store.Store.
func (s *Store) QueueDelete(ctx context.Context, p *store.QueueDeleteParams) error {
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		var jobs int64
		if err := t.w.conn.QueryRowContext(t.ctx, sqlQueueJobs, p.Queue).Scan(&jobs); err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
		for _, c := range t.counts { // this group's changes not yet counted
			if c.queue == p.Queue {
				jobs += c.n
			}
		}
		if jobs != 0 {
			return store.QueueNotEmptyError(p.Queue, jobs)
		}
		for _, q := range []string{sqlQueueDelete, sqlQueueDeleteStarts} {
			if _, err := t.w.conn.ExecContext(t.ctx, q, p.Queue); err != nil {
				return err
			}
		}
		return t.queueChanged()
	}
	if err := s.do(ctx, r); err != nil {
		return opErr(fmt.Sprintf("delete queue %q", p.Queue), err)
	}
	return nil
}

// QueueGet returns a queue's state; a queue never configured or paused has
// zero settings.
func (s *Store) QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.QueueRow, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	q, err := scanQueue(s.rdb.QueryRowContext(ctx, sqlQueueGet, p.Queue))
	if errNoRows(err) {
		return &store.QueueRow{Name: p.Queue}, nil
	}
	if err != nil {
		return nil, s.readErr(fmt.Sprintf("get queue %q", p.Queue), err)
	}
	return q, nil
}

// QueueList returns every queue that has jobs, settings or a pause, by name.
func (s *Store) QueueList(ctx context.Context, p *store.QueueListParams) ([]*store.QueueRow, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, s.readErr("list queues", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, sqlQueuesAll)
	if err != nil {
		return nil, s.readErr("list queues", err)
	}
	byName := make(map[string]*store.QueueRow)
	var out []*store.QueueRow
	for rows.Next() {
		q, err := scanQueue(rows)
		if err != nil {
			rows.Close()
			return nil, s.readErr("list queues", err)
		}
		byName[q.Name] = q
		out = append(out, q)
	}
	if err := rows.Close(); err != nil {
		return nil, s.readErr("list queues", err)
	}
	rows, err = tx.QueryContext(ctx, sqlQueuesWithJobs)
	if err != nil {
		return nil, s.readErr("list queues", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, s.readErr("list queues", err)
		}
		if byName[name] == nil {
			q := &store.QueueRow{Name: name}
			byName[name] = q
			out = append(out, q)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("list queues", err)
	}
	slices.SortFunc(out, func(a, b *store.QueueRow) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

// PeriodicAdvance moves schedule p.Name from p.From to p.To and enqueues
// p.Jobs in one transaction, only if its last slot is still p.From.
func (s *Store) PeriodicAdvance(ctx context.Context, p *store.PeriodicAdvanceParams) (*store.PeriodicAdvanceResult, error) {
	if p.Name == "" {
		return nil, fmt.Errorf("sqlitestore: advance periodic schedule: empty name")
	}
	ep := &store.JobEnqueueManyParams{Jobs: p.Jobs, Now: p.Now}
	results, args, width, err := encodeJobs(ep)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: advance periodic schedule %q: %w", p.Name, err)
	}
	out := &store.PeriodicAdvanceResult{}
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		*out = store.PeriodicAdvanceResult{}
		var last sql.NullInt64
		err := t.w.stmts.periodicGet.QueryRowContext(t.ctx, p.Name).Scan(&last)
		if err != nil && !errNoRows(err) {
			return fmt.Errorf("read schedule: %w", err)
		}
		cur := fromNullMicros(last)
		if !cur.Equal(p.From) {
			out.Last = cur
			return nil
		}
		var to any
		if !p.To.IsZero() {
			to = micros(p.To)
		}
		if _, err := t.w.stmts.periodicSet.ExecContext(t.ctx, p.Name, to, micros(p.Now)); err != nil {
			return fmt.Errorf("write schedule: %w", err)
		}
		if len(p.Jobs) > 0 {
			if err := enqueue(t, r, ep, args, width, results); err != nil {
				return err
			}
		}
		out.Applied, out.Last, out.Results = true, fromNullMicros(sql.NullInt64{Int64: micros(p.To), Valid: !p.To.IsZero()}), results
		return nil
	}
	if err := s.do(ctx, r); err != nil {
		return nil, fmt.Errorf("sqlitestore: advance periodic schedule %q: %w", p.Name, err)
	}
	if out.Results == nil && out.Applied {
		out.Results = []store.EnqueueResult{}
	}
	return out, nil
}

// PeriodicList returns every periodic schedule's state, by name.
func (s *Store) PeriodicList(ctx context.Context, p *store.PeriodicListParams) ([]store.PeriodicRow, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	rows, err := s.rdb.QueryContext(ctx, sqlPeriodicList)
	if err != nil {
		return nil, s.readErr("list periodic schedules", err)
	}
	defer rows.Close()
	var out []store.PeriodicRow
	for rows.Next() {
		var pr store.PeriodicRow
		var last, updated sql.NullInt64
		if err := rows.Scan(&pr.Name, &last, &updated); err != nil {
			return nil, s.readErr("list periodic schedules", err)
		}
		pr.Last, pr.UpdatedAt = fromNullMicros(last), fromNullMicros(updated)
		out = append(out, pr)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("list periodic schedules", err)
	}
	return out, nil
}
