// Package registry holds what the Go backends share about the process
// registry (store.Store.ProcessBeat and its siblings): the JSON a store keeps
// for a process beside its ID, beat and commands, the order ProcessList
// returns, and Table, the registry of a store that keeps it in memory.
// Only the backends import this package.
package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Table is the process registry of a store that keeps it in
// memory (memstore, test stores): its methods are the store.Store's Process
// methods. The zero value is empty and ready.
type Table struct {
	mu   sync.Mutex
	rows map[string]*store.ProcessRow
}

// ProcessBeat implements store.Store.ProcessBeat.
func (t *Table) ProcessBeat(_ context.Context, p *store.ProcessBeatParams) (*store.ProcessRow, error) {
	if err := store.ValidateProcess(&p.Process); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rows == nil {
		t.rows = map[string]*store.ProcessRow{}
	}
	row := p.Process
	row.Queues, row.Periodic = slices.Clone(row.Queues), slices.Clone(row.Periodic)
	row.LastBeat = p.Now
	row.Quiet, row.Stop = false, false
	if old := t.rows[row.ID]; old != nil {
		row.Quiet, row.Stop = old.Quiet, old.Stop
	}
	t.rows[row.ID] = &row
	if !p.ForgetBefore.IsZero() {
		for id, r := range t.rows {
			if id != row.ID && r.LastBeat.Before(p.ForgetBefore) {
				delete(t.rows, id)
			}
		}
	}
	return cloneProcess(&row), nil
}

// ProcessCommand implements store.Store.ProcessCommand.
func (t *Table) ProcessCommand(_ context.Context, p *store.ProcessCommandParams) (*store.ProcessRow, error) {
	if err := store.ValidateProcessCommand(p.Command); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	row := t.rows[p.ID]
	if row == nil {
		return nil, store.ErrNotFound
	}
	if p.Command == store.ProcessQuiet {
		row.Quiet = true
	} else {
		row.Stop = true
	}
	return cloneProcess(row), nil
}

// ProcessDelete implements store.Store.ProcessDelete.
func (t *Table) ProcessDelete(_ context.Context, p *store.ProcessDeleteParams) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.rows, p.ID)
	return nil
}

// ProcessList implements store.Store.ProcessList.
func (t *Table) ProcessList(context.Context, *store.ProcessListParams) ([]*store.ProcessRow, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*store.ProcessRow, 0, len(t.rows))
	for _, r := range t.rows {
		out = append(out, cloneProcess(r))
	}
	Sort(out)
	return out, nil
}

// Sort orders rows by ID, as ProcessList returns them.
func Sort(rows []*store.ProcessRow) {
	slices.SortFunc(rows, func(a, b *store.ProcessRow) int { return strings.Compare(a.ID, b.ID) })
}

func cloneProcess(r *store.ProcessRow) *store.ProcessRow {
	c := *r
	c.Queues, c.Periodic = slices.Clone(r.Queues), slices.Clone(r.Periodic)
	return &c
}

// processData is the part of a store.ProcessRow a store keeps as one JSON value
// (the rest, LastBeat and the commands, it keeps apart: a beat replaces
// the data and keeps the commands).
type processData struct {
	Host      string                  `json:"host,omitempty"`
	PID       int                     `json:"pid,omitempty"`
	Version   string                  `json:"version,omitempty"`
	Queues    []processQueue          `json:"queues,omitempty"`
	Busy      int                     `json:"busy"`
	StartedAt time.Time               `json:"started_at"`
	Periodic  []store.ProcessSchedule `json:"periodic,omitempty"`
}

type processQueue struct {
	Queue   string `json:"queue"`
	Workers int    `json:"workers"`
}

// Encode returns the JSON a store keeps for p, besides its ID,
// LastBeat, Quiet and Stop.
func Encode(p *store.ProcessRow) []byte {
	d := processData{Host: p.Host, PID: p.PID, Version: p.Version, Busy: p.Busy, StartedAt: p.StartedAt.UTC(), Periodic: p.Periodic}
	for _, q := range p.Queues {
		d.Queues = append(d.Queues, processQueue(q))
	}
	b, _ := json.Marshal(d) // plain fields: cannot fail
	return b
}

// Decode fills p from what Encode wrote.
func Decode(b []byte, p *store.ProcessRow) error {
	var d processData
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("process %s: stored data: %w", p.ID, err)
	}
	p.Host, p.PID, p.Version, p.Busy, p.StartedAt, p.Periodic = d.Host, d.PID, d.Version, d.Busy, d.StartedAt, d.Periodic
	p.Queues = nil
	for _, q := range d.Queues {
		p.Queues = append(p.Queues, store.ProcessQueue(q))
	}
	return nil
}
