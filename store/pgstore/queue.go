package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
)

// settingsJSON is how QueueSettings are stored (durations in nanoseconds).
type settingsJSON struct {
	MaxRunning          int   `json:"max_running,omitempty"`
	RateLimit           int   `json:"rate_limit,omitempty"`
	RatePeriod          int64 `json:"rate_period,omitempty"`
	PartitionMaxRunning int   `json:"partition_max_running,omitempty"`
	PartitionRateLimit  int   `json:"partition_rate_limit,omitempty"`
	PartitionRatePeriod int64 `json:"partition_rate_period,omitempty"`
	MaxDepth            int   `json:"max_depth,omitempty"`
	Overflow            int   `json:"overflow,omitempty"`
}

func encodeSettings(s store.QueueSettings) ([]byte, error) {
	return json.Marshal(settingsJSON{
		MaxRunning: s.MaxRunning, RateLimit: s.RateLimit, RatePeriod: int64(s.RatePeriod),
		PartitionMaxRunning: s.PartitionMaxRunning, PartitionRateLimit: s.PartitionRateLimit,
		PartitionRatePeriod: int64(s.PartitionRatePeriod), MaxDepth: s.MaxDepth, Overflow: int(s.Overflow),
	})
}

func decodeSettings(raw []byte) (store.QueueSettings, error) {
	if raw == nil {
		return store.QueueSettings{}, nil
	}
	var v settingsJSON
	if err := json.Unmarshal(raw, &v); err != nil {
		return store.QueueSettings{}, fmt.Errorf("decode queue settings: %w", err)
	}
	return store.QueueSettings{
		MaxRunning: v.MaxRunning, RateLimit: v.RateLimit, RatePeriod: time.Duration(v.RatePeriod),
		PartitionMaxRunning: v.PartitionMaxRunning, PartitionRateLimit: v.PartitionRateLimit,
		PartitionRatePeriod: time.Duration(v.PartitionRatePeriod), MaxDepth: v.MaxDepth, Overflow: store.Overflow(v.Overflow),
	}, nil
}

// limitsFetch reports whether s limits claims (fetches then lock the queue).
func limitsFetch(s store.QueueSettings) bool {
	return s.MaxRunning > 0 || s.RateLimit > 0 || s.PartitionMaxRunning > 0 || s.PartitionRateLimit > 0
}

const queueCols = `name, paused, settings, dropped, updated_at`

func scanQueue(row pgx.Row) (*store.QueueRow, error) {
	var q store.QueueRow
	var raw []byte
	var updated *time.Time
	if err := row.Scan(&q.Name, &q.Paused, &raw, &q.Dropped, &updated); err != nil {
		return nil, err
	}
	st, err := decodeSettings(raw)
	if err != nil {
		return nil, err
	}
	q.Settings, q.UpdatedAt = st, utc(updated)
	return &q, nil
}

// QueueConfigure replaces a queue's settings.
func (s *Store) QueueConfigure(ctx context.Context, p *store.QueueConfigureParams) (*store.QueueRow, error) {
	if err := p.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: configure queue %q: %w", p.Queue, err)
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	raw, err := encodeSettings(p.Settings)
	if err != nil {
		return nil, err
	}
	var q *store.QueueRow
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		q, err = scanQueue(tx.QueryRow(ctx, s.q.get(`INSERT INTO {s}.queues (name, settings, limited, max_depth, updated_at)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (name) DO UPDATE SET settings = excluded.settings, limited = excluded.limited,
				max_depth = excluded.max_depth, updated_at = excluded.updated_at
			RETURNING `+queueCols), p.Queue, raw, limitsFetch(p.Settings), p.Settings.MaxDepth, p.Now))
		if err != nil {
			return err
		}
		return s.notify(ctx, tx, []string{p.Queue})
	})
	if err != nil {
		return nil, s.opErr(fmt.Sprintf("configure queue %q", p.Queue), err)
	}
	return q, nil
}

// QueueDelete deletes an empty queue's row and rate window in one
// transaction. The queue's counters, all zero, stay: QueueList skips zeros,
// and the counters fold deltas in by queue and state. See store.Store.
func (s *Store) QueueDelete(ctx context.Context, p *store.QueueDeleteParams) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var jobs int64
		if err := tx.QueryRow(ctx, s.q.get(`SELECT coalesce(sum(n), 0) FROM (
				SELECT n FROM {s}.job_counts WHERE queue = $1
				UNION ALL
				SELECT n FROM {s}.job_count_deltas WHERE queue = $1
			) c`), p.Queue).Scan(&jobs); err != nil {
			return err
		}
		if jobs != 0 {
			return store.QueueNotEmptyError(p.Queue, jobs)
		}
		if _, err := tx.Exec(ctx, s.q.get(`DELETE FROM {s}.queues WHERE name = $1`), p.Queue); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, s.q.get(`DELETE FROM {s}.rate_starts WHERE queue = $1`), p.Queue)
		return err
	})
	return s.opErr(fmt.Sprintf("delete queue %q", p.Queue), err)
}

// QueueGet returns a queue's state.
func (s *Store) QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.QueueRow, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	q, err := scanQueue(s.pool.QueryRow(ctx, s.q.get(`SELECT `+queueCols+` FROM {s}.queues WHERE name = $1`), p.Queue))
	if errors.Is(err, pgx.ErrNoRows) {
		return &store.QueueRow{Name: p.Queue}, nil
	}
	if err != nil {
		return nil, s.opErr(fmt.Sprintf("get queue %q", p.Queue), err)
	}
	return q, nil
}

// QueueList returns every queue with jobs, settings or a pause.
func (s *Store) QueueList(ctx context.Context, p *store.QueueListParams) ([]*store.QueueRow, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rs, err := s.pool.Query(ctx, s.q.get(`SELECT n.name, COALESCE(q.paused, false), q.settings, COALESCE(q.dropped, 0), q.updated_at
		FROM (
			SELECT name FROM {s}.queues
			UNION
			SELECT queue FROM (
				SELECT queue, state, n FROM {s}.job_counts
				UNION ALL
				SELECT queue, state, n FROM {s}.job_count_deltas
			) c GROUP BY queue, state HAVING sum(n) <> 0
		) n LEFT JOIN {s}.queues q ON q.name = n.name
		ORDER BY n.name`))
	if err != nil {
		return nil, s.opErr("list queues", err)
	}
	defer rs.Close()
	out := []*store.QueueRow{}
	for rs.Next() {
		q, err := scanQueue(rs)
		if err != nil {
			return nil, s.opErr("list queues", err)
		}
		out = append(out, q)
	}
	if err := rs.Err(); err != nil {
		return nil, s.opErr("list queues", err)
	}
	return out, nil
}

// QueuePause pauses or resumes a queue for every process.
func (s *Store) QueuePause(ctx context.Context, p *store.QueuePauseParams) (*store.QueueRow, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var q *store.QueueRow
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		q, err = scanQueue(tx.QueryRow(ctx, s.q.get(`INSERT INTO {s}.queues (name, paused, updated_at) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
			RETURNING `+queueCols), p.Queue, p.Paused, p.Now))
		if err != nil || p.Paused {
			return err
		}
		return s.notify(ctx, tx, []string{p.Queue})
	})
	if err != nil {
		return nil, s.opErr(fmt.Sprintf("pause queue %q", p.Queue), err)
	}
	return q, nil
}

// QueueWatch returns a Watch signalled by NOTIFY from any process; without
// a listener (Options.DisableListen) it returns store.ErrUnsupported.
func (s *Store) QueueWatch(ctx context.Context, p *store.QueueWatchParams) (*store.Watch, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if s.listener == nil {
		return nil, fmt.Errorf("pgstore: watch queue %q: LISTEN is disabled (Options.DisableListen): %w", p.Queue, store.ErrUnsupported)
	}
	return s.listener.watch(p.Queue), nil
}

// PeriodicAdvance moves a schedule's last slot and enqueues its jobs in
// one transaction, only if the slot is still p.From.
func (s *Store) PeriodicAdvance(ctx context.Context, p *store.PeriodicAdvanceParams) (*store.PeriodicAdvanceResult, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var b *batch
	if len(p.Jobs) > 0 {
		var err error
		b, err = newBatch(&store.JobEnqueueManyParams{Jobs: p.Jobs, Now: p.Now})
		if err != nil {
			return nil, fmt.Errorf("pgstore: advance periodic %q: %w", p.Name, err)
		}
	}
	var res *store.PeriodicAdvanceResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.q.get(`INSERT INTO {s}.periodic (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`), p.Name); err != nil {
			return err
		}
		var last *time.Time
		if err := tx.QueryRow(ctx, s.q.get(`SELECT last FROM {s}.periodic WHERE name = $1 FOR UPDATE`), p.Name).Scan(&last); err != nil {
			return err
		}
		cur := utc(last)
		if !cur.Equal(p.From) {
			res = &store.PeriodicAdvanceResult{Applied: false, Last: cur}
			return nil
		}
		if _, err := tx.Exec(ctx, s.q.get(`UPDATE {s}.periodic SET last = $2, updated_at = $3 WHERE name = $1`), p.Name, nullTime(p.To), p.Now); err != nil {
			return err
		}
		res = &store.PeriodicAdvanceResult{Applied: true, Last: p.To}
		if b != nil {
			if err := s.enqueueTx(ctx, tx, b); err != nil {
				return err
			}
			res.Results = b.results
		}
		return nil
	})
	if err != nil {
		return nil, s.opErr(fmt.Sprintf("advance periodic %q", p.Name), err)
	}
	return res, nil
}

// PeriodicList returns every schedule's state.
func (s *Store) PeriodicList(ctx context.Context, p *store.PeriodicListParams) ([]store.PeriodicRow, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rs, err := s.pool.Query(ctx, s.q.get(`SELECT name, last, updated_at FROM {s}.periodic ORDER BY name`))
	if err != nil {
		return nil, s.opErr("list periodic", err)
	}
	defer rs.Close()
	out := []store.PeriodicRow{}
	for rs.Next() {
		var r store.PeriodicRow
		var last, updated *time.Time
		if err := rs.Scan(&r.Name, &last, &updated); err != nil {
			return nil, s.opErr("list periodic", err)
		}
		r.Last, r.UpdatedAt = utc(last), utc(updated)
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, s.opErr("list periodic", err)
	}
	return out, nil
}
