package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// Memory returns the in-memory store as a Target: a new empty memstore per run.
func Memory() Target {
	return Target{
		Name: "memory",
		Open: func(context.Context) (store.Store, func() error, error) {
			st := memstore.New()
			return st, st.Close, nil
		},
	}
}

// SQLite returns the SQLite store as a Target. With path empty each run gets
// a new database in a temporary directory, removed when the run ends (dir
// chooses where the directory goes; empty means os.TempDir). Otherwise every
// run opens the database at path and leaves it in place. opts may be nil.
func SQLite(path, dir string, opts *sqlitestore.Options) Target {
	var o sqlitestore.Options
	if opts != nil {
		o = *opts
	}
	return Target{
		Name:        "sqlite",
		Synchronous: o.Synchronous.String(),
		Open: func(context.Context) (store.Store, func() error, error) {
			if path != "" {
				st, err := sqlitestore.Open(path, &o)
				if err != nil {
					return nil, nil, err
				}
				return st, st.Close, nil
			}
			tmp, err := os.MkdirTemp(dir, "sortie-bench-")
			if err != nil {
				return nil, nil, err
			}
			st, err := sqlitestore.Open(filepath.Join(tmp, "sortie.db"), &o)
			if err != nil {
				_ = os.RemoveAll(tmp)
				return nil, nil, err
			}
			return st, func() error {
				return errors.Join(st.Close(), os.RemoveAll(tmp))
			}, nil
		},
	}
}

// Postgres returns the PostgreSQL store at url as a Target. With schema
// empty each run gets a new schema (sortie_bench_ and a random suffix),
// dropped when the run ends; otherwise every run opens that schema
// (migrating it) and leaves it in place.
func Postgres(url, schema string) Target {
	return Target{
		Name: "postgres",
		Open: func(ctx context.Context) (store.Store, func() error, error) {
			name := schema
			if name == "" {
				var b [4]byte
				if _, err := rand.Read(b[:]); err != nil {
					return nil, nil, err
				}
				name = "sortie_bench_" + hex.EncodeToString(b[:])
			}
			st, err := pgstore.Open(ctx, url, &pgstore.Options{Schema: name, Migrate: true})
			if err != nil {
				return nil, nil, err
			}
			if schema != "" {
				return st, st.Close, nil
			}
			return st, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := st.Pool().Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
				return errors.Join(err, st.Close())
			}, nil
		},
	}
}
