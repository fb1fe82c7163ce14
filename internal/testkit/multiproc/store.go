// Package multiproc tests sortie across several operating-system processes
// that share one store: the test binary re-executes itself as worker
// processes, kills one of them with SIGKILL in the middle of a run, and
// checks from journals the processes write and from the store's records
// that delivery stayed at-least-once with a single run per job unless its
// lease expired, and that the queues' global limits held across processes.
//
// The store is named by a URL (see openStore), so the same test runs on
// every store that several processes can share.
package multiproc

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/redisstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// openStore opens the store named by rawURL and returns it with the function
// that closes it:
//
//   - a path ending in .db: that SQLite file, created if missing; several
//     processes may open the same file;
//   - postgres:// or postgresql://: a PostgreSQL database, in the schema
//     named by the sortie_schema query parameter (see withSchema);
//   - redis:// or rediss://: a Redis server, under the key prefix named by
//     the prefix query parameter (see redisstore.Open).
func openStore(ctx context.Context, rawURL string) (store.Store, func() error, error) {
	switch {
	case strings.HasSuffix(rawURL, ".db"):
		st, err := sqlitestore.Open(rawURL, &sqlitestore.Options{
			// Four processes share the write lock; a write waits for it
			// rather than fail while another process commits.
			BusyTimeout: 10 * time.Second,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("open sqlite store %s: %w", rawURL, err)
		}
		return st, st.Close, nil
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		dsn, schema, err := pgtest.SplitSchema(rawURL)
		if err != nil {
			return nil, nil, err
		}
		// Every process migrates: Migrate is idempotent and serialized by
		// an advisory lock, so whichever opens first creates the tables.
		st, err := pgstore.Open(ctx, dsn, &pgstore.Options{Schema: schema, Migrate: true})
		if err != nil {
			return nil, nil, fmt.Errorf("open postgres store (schema %q): %w", schema, err)
		}
		return st, st.Close, nil
	case strings.HasPrefix(rawURL, "redis://"), strings.HasPrefix(rawURL, "rediss://"):
		st, err := redisstore.Open(ctx, rawURL, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("open redis store: %w", err)
		}
		return st, st.Close, nil
	}
	return nil, nil, fmt.Errorf("unknown store %q: want a path ending in .db, a postgres:// URL or a redis:// URL", rawURL)
}
