package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/registry"
)

// ProcessBeat records a beat of p.Process and forgets processes silent
// since p.ForgetBefore, in one statement. See store.Store.
func (s *Store) ProcessBeat(ctx context.Context, p *store.ProcessBeatParams) (*store.ProcessRow, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := store.ValidateProcess(&p.Process); err != nil {
		return nil, fmt.Errorf("pgstore: process beat: %w", err)
	}
	row := p.Process
	row.LastBeat = p.Now
	var forget *time.Time
	if !p.ForgetBefore.IsZero() {
		forget = &p.ForgetBefore
	}
	err := s.pool.QueryRow(ctx, s.q.get(`WITH forgotten AS (
			DELETE FROM {s}.processes WHERE id <> $1 AND $4::timestamptz IS NOT NULL AND last_beat < $4
		)
		INSERT INTO {s}.processes (id, data, last_beat) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET data = excluded.data, last_beat = excluded.last_beat
		RETURNING quiet, stop`), row.ID, registry.Encode(&row), p.Now, forget).Scan(&row.Quiet, &row.Stop)
	if err != nil {
		return nil, s.opErr("process beat", err)
	}
	return &row, nil
}

// ProcessCommand sets a command on a process's row. See store.Store.
func (s *Store) ProcessCommand(ctx context.Context, p *store.ProcessCommandParams) (*store.ProcessRow, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := store.ValidateProcessCommand(p.Command); err != nil {
		return nil, fmt.Errorf("pgstore: process command: %w", err)
	}
	row := &store.ProcessRow{ID: p.ID}
	var data []byte
	err := s.pool.QueryRow(ctx, s.q.get(`UPDATE {s}.processes
		SET quiet = quiet OR $2 = 'quiet', stop = stop OR $2 = 'stop'
		WHERE id = $1 RETURNING data, last_beat, quiet, stop`), p.ID, string(p.Command)).Scan(&data, &row.LastBeat, &row.Quiet, &row.Stop)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, s.opErr(string(p.Command)+" process", err)
	}
	row.LastBeat = row.LastBeat.UTC()
	if err := registry.Decode(data, row); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	return row, nil
}

// ProcessDelete deletes a process's row. See store.Store.
func (s *Store) ProcessDelete(ctx context.Context, p *store.ProcessDeleteParams) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.q.get(`DELETE FROM {s}.processes WHERE id = $1`), p.ID); err != nil {
		return s.opErr("delete process", err)
	}
	return nil
}

// ProcessList returns every registered process, by ID. See store.Store.
func (s *Store) ProcessList(ctx context.Context, _ *store.ProcessListParams) ([]*store.ProcessRow, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rs, err := s.pool.Query(ctx, s.q.get(`SELECT id, data, last_beat, quiet, stop FROM {s}.processes ORDER BY id`))
	if err != nil {
		return nil, s.opErr("list processes", err)
	}
	defer rs.Close()
	var out []*store.ProcessRow
	for rs.Next() {
		row := &store.ProcessRow{}
		var data []byte
		if err := rs.Scan(&row.ID, &data, &row.LastBeat, &row.Quiet, &row.Stop); err != nil {
			return nil, s.opErr("list processes", err)
		}
		row.LastBeat = row.LastBeat.UTC()
		if err := registry.Decode(data, row); err != nil {
			return nil, fmt.Errorf("pgstore: %w", err)
		}
		out = append(out, row)
	}
	if err := rs.Err(); err != nil {
		return nil, s.opErr("list processes", err)
	}
	return out, nil
}
