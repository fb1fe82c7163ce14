package redisstore

import (
	"context"

	"github.com/sortiehq/sortie/store"
)

// JobHistory is not implemented yet.
func (s *Store) JobHistory(ctx context.Context, p *store.JobHistoryParams) ([]store.HistoryRow, error) {
	return nil, store.ErrUnsupported
}

// JobHistoryPrune is not implemented yet.
func (s *Store) JobHistoryPrune(ctx context.Context, p *store.JobHistoryPruneParams) (int, error) {
	return 0, store.ErrUnsupported
}

// QueueLatency is not implemented yet.
func (s *Store) QueueLatency(ctx context.Context, p *store.QueueLatencyParams) ([]store.QueueLatencyRow, error) {
	return nil, store.ErrUnsupported
}
