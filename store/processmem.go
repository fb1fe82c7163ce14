package store

import (
	"context"
	"slices"
	"strings"
	"sync"
)

// ProcessTable is the process registry of a store that keeps it in
// memory (memstore, test stores): its methods are the Store's Process
// methods. The zero value is empty and ready.
type ProcessTable struct {
	mu   sync.Mutex
	rows map[string]*ProcessRow
}

// ProcessBeat implements Store.ProcessBeat.
func (t *ProcessTable) ProcessBeat(_ context.Context, p *ProcessBeatParams) (*ProcessRow, error) {
	if err := ValidateProcess(&p.Process); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rows == nil {
		t.rows = map[string]*ProcessRow{}
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

// ProcessCommand implements Store.ProcessCommand.
func (t *ProcessTable) ProcessCommand(_ context.Context, p *ProcessCommandParams) (*ProcessRow, error) {
	if err := ValidateProcessCommand(p.Command); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	row := t.rows[p.ID]
	if row == nil {
		return nil, ErrNotFound
	}
	if p.Command == ProcessQuiet {
		row.Quiet = true
	} else {
		row.Stop = true
	}
	return cloneProcess(row), nil
}

// ProcessDelete implements Store.ProcessDelete.
func (t *ProcessTable) ProcessDelete(_ context.Context, p *ProcessDeleteParams) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.rows, p.ID)
	return nil
}

// ProcessList implements Store.ProcessList.
func (t *ProcessTable) ProcessList(context.Context, *ProcessListParams) ([]*ProcessRow, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*ProcessRow, 0, len(t.rows))
	for _, r := range t.rows {
		out = append(out, cloneProcess(r))
	}
	SortProcesses(out)
	return out, nil
}

// SortProcesses orders rows by ID, as ProcessList returns them.
func SortProcesses(rows []*ProcessRow) {
	slices.SortFunc(rows, func(a, b *ProcessRow) int { return strings.Compare(a.ID, b.ID) })
}

func cloneProcess(r *ProcessRow) *ProcessRow {
	c := *r
	c.Queues, c.Periodic = slices.Clone(r.Queues), slices.Clone(r.Periodic)
	return &c
}
