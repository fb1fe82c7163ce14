package redisstore

import (
	"context"

	"github.com/sortiehq/sortie/store"
)

func (s *Store) JobImport(ctx context.Context, p *store.JobImportParams) ([]store.ImportResult, error) {
	return nil, store.ErrUnsupported
}
