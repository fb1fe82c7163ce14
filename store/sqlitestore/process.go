package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/registry"
)

// The process registry: one row per client process (see schemaV5).
const (
	sqlProcessBeat = `INSERT INTO processes (id, data, last_beat) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET data = excluded.data, last_beat = excluded.last_beat
		RETURNING quiet, stop`
	sqlProcessForget  = `DELETE FROM processes WHERE id <> ? AND last_beat < ?`
	sqlProcessQuiet   = `UPDATE processes SET quiet = 1 WHERE id = ? RETURNING data, last_beat, quiet, stop`
	sqlProcessStop    = `UPDATE processes SET stop = 1 WHERE id = ? RETURNING data, last_beat, quiet, stop`
	sqlProcessDelete  = `DELETE FROM processes WHERE id = ?`
	sqlProcessListAll = `SELECT id, data, last_beat, quiet, stop FROM processes ORDER BY id`
)

// ProcessBeat records a beat of p.Process and forgets processes silent
// since p.ForgetBefore, in one transaction. See store.Store.
func (s *Store) ProcessBeat(ctx context.Context, p *store.ProcessBeatParams) (*store.ProcessRow, error) {
	if err := store.ValidateProcess(&p.Process); err != nil {
		return nil, fmt.Errorf("sqlitestore: process beat: %w", err)
	}
	row := p.Process
	row.LastBeat = p.Now
	data := registry.Encode(&row)
	r := &request{}
	r.op = func(t *txn, _ *request) error {
		if err := t.w.conn.QueryRowContext(t.ctx, sqlProcessBeat, row.ID, data, micros(p.Now)).Scan(&row.Quiet, &row.Stop); err != nil {
			return fmt.Errorf("write process: %w", err)
		}
		if !p.ForgetBefore.IsZero() {
			if _, err := t.w.conn.ExecContext(t.ctx, sqlProcessForget, row.ID, micros(p.ForgetBefore)); err != nil {
				return fmt.Errorf("forget processes: %w", err)
			}
		}
		return nil
	}
	if err := s.do(ctx, r); err != nil {
		return nil, fmt.Errorf("sqlitestore: process beat: %w", err)
	}
	return &row, nil
}

// ProcessCommand sets a command on a process's row. See store.Store.
func (s *Store) ProcessCommand(ctx context.Context, p *store.ProcessCommandParams) (*store.ProcessRow, error) {
	if err := store.ValidateProcessCommand(p.Command); err != nil {
		return nil, fmt.Errorf("sqlitestore: process command: %w", err)
	}
	q := sqlProcessQuiet
	if p.Command == store.ProcessStop {
		q = sqlProcessStop
	}
	var row *store.ProcessRow
	r := &request{durable: true}
	r.op = func(t *txn, _ *request) error {
		var err error
		row, err = scanProcess(t.w.conn.QueryRowContext(t.ctx, q, p.ID), p.ID)
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return nil, fmt.Errorf("sqlitestore: %s process %s: %w", p.Command, p.ID, err)
	}
	return row, nil
}

// ProcessDelete deletes a process's row. See store.Store.
func (s *Store) ProcessDelete(ctx context.Context, p *store.ProcessDeleteParams) error {
	r := &request{durable: true}
	r.op = func(t *txn, _ *request) error {
		_, err := t.w.conn.ExecContext(t.ctx, sqlProcessDelete, p.ID)
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return fmt.Errorf("sqlitestore: delete process %s: %w", p.ID, err)
	}
	return nil
}

// ProcessList returns every registered process, by ID. See store.Store.
func (s *Store) ProcessList(ctx context.Context, _ *store.ProcessListParams) ([]*store.ProcessRow, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	rows, err := s.rdb.QueryContext(ctx, sqlProcessListAll)
	if err != nil {
		return nil, s.readErr("list processes", err)
	}
	defer rows.Close()
	var out []*store.ProcessRow
	for rows.Next() {
		var id string
		var data []byte
		var beat int64
		row := &store.ProcessRow{}
		if err := rows.Scan(&id, &data, &beat, &row.Quiet, &row.Stop); err != nil {
			return nil, s.readErr("list processes", err)
		}
		row.ID, row.LastBeat = id, fromMicros(beat)
		if err := registry.Decode(data, row); err != nil {
			return nil, fmt.Errorf("sqlitestore: list processes: %w", err)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("list processes", err)
	}
	return out, nil
}

// scanProcess reads a process row returned by a command's RETURNING.
func scanProcess(sc *sql.Row, id string) (*store.ProcessRow, error) {
	var data []byte
	var beat int64
	row := &store.ProcessRow{ID: id}
	if err := sc.Scan(&data, &beat, &row.Quiet, &row.Stop); err != nil {
		if errNoRows(err) {
			return nil, store.ErrNotFound
		}
		return nil, err
	}
	row.LastBeat = fromMicros(beat)
	return row, registry.Decode(data, row)
}
