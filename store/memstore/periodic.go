package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sortiehq/sortie/store"
)

// PeriodicAdvance moves a periodic schedule's last slot and enqueues its
// jobs in one step, if the last slot is still p.From. See store.Store.
func (s *Store) PeriodicAdvance(ctx context.Context, p *store.PeriodicAdvanceParams) (*store.PeriodicAdvanceResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, fmt.Errorf("advance periodic schedule: name is empty")
	}
	jobs, deps, err := build(nil, p.Jobs, p.Now)
	if err != nil {
		return nil, fmt.Errorf("advance periodic %q: %w", p.Name, err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	row := s.periodic[p.Name]
	if row != nil && !row.Last.Equal(p.From) || row == nil && !p.From.IsZero() {
		var last store.PeriodicRow
		if row != nil {
			last = *row
		}
		s.mu.Unlock()
		return &store.PeriodicAdvanceResult{Last: last.Last}, nil
	}
	var qs queueSet
	res := make([]store.EnqueueResult, len(jobs))
	err = s.enqueue(jobs, p.Jobs, res, deps, p.Now, false, &qs)
	if err == nil {
		if s.periodic == nil {
			s.periodic = make(map[string]*store.PeriodicRow)
		}
		s.periodic[p.Name] = &store.PeriodicRow{Name: p.Name, Last: p.To, UpdatedAt: p.Now}
	}
	s.mu.Unlock()
	s.notify(qs)
	if err != nil {
		return nil, fmt.Errorf("advance periodic %q: %w", p.Name, err)
	}
	return &store.PeriodicAdvanceResult{Applied: true, Last: p.To, Results: res}, nil
}

// PeriodicList returns every periodic schedule's state, by name. See
// store.Store.
func (s *Store) PeriodicList(ctx context.Context, _ *store.PeriodicListParams) ([]store.PeriodicRow, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	out := make([]store.PeriodicRow, 0, len(s.periodic))
	for _, r := range s.periodic {
		out = append(out, *r)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b store.PeriodicRow) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
