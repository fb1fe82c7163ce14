package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sortiehq/sortie/store/sqlitestore"
)

// Kinds of store a --store flag names.
const (
	storeMemory   = "memory"
	storeSQLite   = "sqlite"
	storePostgres = "postgres"
	storeRedis    = "redis"
)

// errStoreNotSupported is returned for stores that later releases add.
var errStoreNotSupported = errors.New("store not supported yet")

// storeSpec is a parsed --store value.
type storeSpec struct {
	// kind is one of the store* constants.
	kind string
	// path is the SQLite database file; empty means a temporary one.
	path string
	// dsn is the connection string of a database server.
	dsn string
}

// storeFlagHelp describes the values parseStore accepts.
const storeFlagHelp = "the `store`: memory, sqlite (a temporary database),\nsqlite:PATH or PATH.db (that SQLite file), or a postgres:// URL"

// parseStore parses a --store value: "memory"; "sqlite" (a temporary
// database, where that makes sense); "sqlite:PATH", or a PATH ending in .db,
// .sqlite or .sqlite3; "postgres://..." (or postgresql://); "redis://..."
// (not supported yet).
func parseStore(s string) (storeSpec, error) {
	lower := strings.ToLower(s)
	switch {
	case s == "":
		return storeSpec{}, errors.New("store is empty: want memory, sqlite, sqlite:PATH or PATH.db")
	case lower == "memory":
		return storeSpec{kind: storeMemory}, nil
	case lower == "sqlite":
		return storeSpec{kind: storeSQLite}, nil
	case strings.HasPrefix(lower, "sqlite:"):
		path := strings.TrimPrefix(s[len("sqlite:"):], "//")
		if path == "" {
			return storeSpec{}, fmt.Errorf("store %q names no file: want sqlite:PATH", s)
		}
		return storeSpec{kind: storeSQLite, path: path}, nil
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return storeSpec{kind: storePostgres, dsn: s}, nil
	case strings.HasPrefix(lower, "redis://"), strings.HasPrefix(lower, "rediss://"):
		// TODO(issue: Redis store): open redisstore here.
		return storeSpec{kind: storeRedis, dsn: s}, fmt.Errorf("redis %w (use memory, sqlite or postgres)", errStoreNotSupported)
	case strings.HasSuffix(lower, ".db"), strings.HasSuffix(lower, ".sqlite"), strings.HasSuffix(lower, ".sqlite3"):
		return storeSpec{kind: storeSQLite, path: s}, nil
	}
	return storeSpec{}, fmt.Errorf("unknown store %q: want memory, sqlite, sqlite:PATH, PATH.db, or a postgres:// URL", s)
}

// parseSynchronous parses a --synchronous value: full or normal.
func parseSynchronous(s string) (sqlitestore.Synchronous, error) {
	switch strings.ToLower(s) {
	case "full":
		return sqlitestore.SynchronousFull, nil
	case "normal":
		return sqlitestore.SynchronousNormal, nil
	}
	return 0, fmt.Errorf("--synchronous must be full or normal, got %q", s)
}
