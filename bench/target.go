package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
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
