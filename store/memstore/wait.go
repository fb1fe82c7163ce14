package memstore

import (
	"context"
	"fmt"

	"github.com/sortiehq/sortie/store"
)

// JobWait returns the job once it is finished. A waiter sleeps on a channel
// of the job's own, closed when the job finishes or is deleted (or the store
// closes), so nothing polls. See store.Store.
func (s *Store) JobWait(ctx context.Context, p *store.JobWaitParams) (*store.JobRow, error) {
	for {
		if err := s.lock(ctx); err != nil {
			return nil, fmt.Errorf("wait for job %d: %w", p.ID, err)
		}
		j := s.jobs.get(p.ID)
		if j == nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("wait for job %d: %w", p.ID, store.ErrNotFound)
		}
		if !isPending(j.st) {
			row := j.row
			s.mu.Unlock()
			return deepenOne(row), nil
		}
		if s.waiters == nil {
			s.waiters = make(map[int64]chan struct{})
		}
		c := s.waiters[p.ID]
		if c == nil {
			c = make(chan struct{})
			s.waiters[p.ID] = c
		}
		s.mu.Unlock()
		select {
		case <-c:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for job %d: %w", p.ID, ctx.Err())
		}
	}
}
