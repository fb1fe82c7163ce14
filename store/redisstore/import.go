package redisstore

import (
	"context"

	"github.com/sortiehq/sortie/store"
)

// JobImport is not supported yet. See store.Store.
func (s *Store) JobImport(ctx context.Context, p *store.JobImportParams) ([]store.ImportResult, error) {
	return nil, store.ErrUnsupported
}
