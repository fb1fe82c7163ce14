package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/redisstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// Kinds of store a --store flag names.
const (
	storeMemory   = "memory"
	storeSQLite   = "sqlite"
	storePostgres = "postgres"
	storeRedis    = "redis"
)

// storeSpec is a parsed --store value.
type storeSpec struct {
	// kind is one of the store* constants.
	kind string
	// path is the SQLite database file; empty means a temporary one.
	path string
	// dsn is the URL of a database server: PostgreSQL's connection
	// string, or a Redis URL with its ?prefix=.
	dsn string
}

// storeFlagHelp describes the values parseStore accepts.
const storeFlagHelp = "the `store`: memory, sqlite (a temporary database),\nsqlite:PATH or PATH.db (that SQLite file), a postgres:// URL,\nor a redis:// or rediss:// URL (key prefix: ?prefix=NAME)"

// parseStore parses a --store value: "memory"; "sqlite" (a temporary
// database, where that makes sense); "sqlite:PATH", or a PATH ending in .db,
// .sqlite or .sqlite3; "postgres://..." (or postgresql://); "redis://..."
// (or rediss://).
func parseStore(s string) (storeSpec, error) {
	lower := strings.ToLower(s)
	switch {
	case s == "":
		return storeSpec{}, errors.New("store is empty: want memory, sqlite, sqlite:PATH, PATH.db, or a postgres:// or redis:// URL")
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
		return storeSpec{kind: storeRedis, dsn: s}, nil
	case strings.HasSuffix(lower, ".db"), strings.HasSuffix(lower, ".sqlite"), strings.HasSuffix(lower, ".sqlite3"):
		return storeSpec{kind: storeSQLite, path: s}, nil
	}
	return storeSpec{}, fmt.Errorf("unknown store %q: want memory, sqlite, sqlite:PATH, PATH.db, or a postgres:// or redis:// URL", s)
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

// parseStoreFlag parses a --store value as parseStore does, checking a
// PostgreSQL or Redis URL too; every command says a bad value with its
// error.
func parseStoreFlag(raw string) (storeSpec, error) {
	spec, err := parseStore(raw)
	if err != nil {
		return spec, fmt.Errorf("--store: %w", err)
	}
	switch spec.kind {
	case storePostgres:
		_, err = pgconn.ParseConfig(spec.dsn)
	case storeRedis:
		_, _, err = redisstore.ParseURL(spec.dsn)
	}
	if err != nil {
		return spec, fmt.Errorf("--store: %w", err)
	}
	return spec, nil
}

// migrationRule is the rule every command's help states.
const migrationRule = `Only 'sortie migrate' creates or upgrades a store's schema, and 'sortie serve'
as it starts: always for a SQLite file (created when missing), for PostgreSQL
with --migrate; 'sortie import' creates a SQLite file that is missing. The
other commands open an existing store at this version of sortie and say to
run 'sortie migrate' otherwise. On Redis, 'sortie migrate' and 'sortie serve'
load sortie's Functions library on a server that holds an older one or none
(as every worker process does); the other commands need this version's.`

// openOpts say how openStore opens a --store value.
type openOpts struct {
	store, schema string
	// createFile creates a missing SQLite file and migrates an old one,
	// and loads sortie's library on a Redis server that holds an older
	// one or none (serve); migrate creates or upgrades a PostgreSQL schema
	// (serve --migrate). Otherwise the store must be at this version.
	createFile, migrate bool
	// wait keeps trying a PostgreSQL server that is down this long.
	wait   time.Duration
	logger *slog.Logger
	// maxConns and noListen size a PostgreSQL pool for one command.
	maxConns int
	noListen bool
}

// closingStore is a store that holds resources its opener releases.
type closingStore interface {
	store.Store
	Close() error
}

// openStore is how every command that works on jobs opens its store, by
// migrationRule: a bad --store value is a usage error (a usageErr) worded
// the same for every command; a store that is missing, older or newer
// than this sortie, or not sortie's, is an error naming it and what to do.
// It returns the store and what it is ("sqlite database x.db"); the caller
// closes it.
func openStore(ctx context.Context, o *openOpts) (closingStore, string, error) {
	spec, err := checkStoreFlags(o)
	if err != nil {
		return nil, "", err
	}
	switch spec.kind {
	case storeSQLite:
		if spec.path == "" {
			return nil, "", usageErr{errors.New("--store sqlite names a temporary database, which keeps no jobs: give a file, sqlite:PATH")}
		}
		st, err := openSQLite(ctx, spec.path, o)
		return st, "sqlite database " + spec.path, err
	case storePostgres:
		if o.schema == "" {
			o.schema = pgstore.DefaultSchema
		}
		st, err := openPostgresStore(ctx, spec.dsn, o)
		return st, "schema " + o.schema, err
	case storeRedis:
		st, err := openRedisWaiting(ctx, spec.dsn, o.wait, o.logger, o.createFile)
		if err != nil {
			return nil, "", err // not a nil *redisstore.Store in a non-nil interface
		}
		return st, redisWhat(spec.dsn), nil
	}
	return nil, "", usageErr{fmt.Errorf("--store %s holds no jobs between runs: give a sqlite file, or a postgres:// or redis:// URL", o.store)}
}

// checkStoreFlags parses o.store and checks the flags that go with it
// (--schema, --migrate), opening nothing: a bad one is a usageErr.
func checkStoreFlags(o *openOpts) (storeSpec, error) {
	spec, err := parseStoreFlag(o.store)
	if err != nil {
		return spec, usageErr{err}
	}
	switch {
	case o.schema != "" && schemaFlagErr(spec.kind) != nil:
		return spec, usageErr{schemaFlagErr(spec.kind)}
	case spec.kind == storeRedis && o.migrate:
		return spec, usageErr{errors.New("--migrate applies to postgres stores only: Redis has no schema, and serve loads sortie's Functions library as it starts")}
	case spec.kind != storePostgres && o.migrate:
		return spec, usageErr{errors.New("--migrate applies to postgres stores only")}
	}
	return spec, nil
}

// openSQLite opens the SQLite file at path: at this version, or with
// o.createFile created or migrated.
func openSQLite(ctx context.Context, path string, o *openOpts) (closingStore, error) {
	if !o.createFile {
		return openSQLiteAdmin(ctx, path)
	}
	v, err := sqliteSchemaVersion(ctx, path)
	if err != nil {
		return nil, explainStoreErr(err, "give --store")
	}
	if v > sqlitestore.SchemaVersion {
		return nil, newerSQLite(path, v)
	}
	st, err := sqlitestore.Open(path, nil)
	if err != nil {
		return nil, explainStoreErr(err, "give --store")
	}
	if v < sqlitestore.SchemaVersion && o.logger != nil {
		o.logger.Info("sqlite database migrated", "path", path, "from", v, "to", sqlitestore.SchemaVersion)
	}
	return st, nil
}

// openPostgresStore opens o.schema on the server at dsn: at this version,
// or with o.migrate created or upgraded.
func openPostgresStore(ctx context.Context, dsn string, o *openOpts) (closingStore, error) {
	opts := &pgstore.Options{Schema: o.schema, Migrate: o.migrate, Logger: o.logger, WaitForServer: o.wait,
		MaxConns: int32(o.maxConns), DisableListen: o.noListen}
	if o.migrate {
		st, err := pgstore.Open(ctx, dsn, opts)
		if err != nil {
			return nil, explainPostgresErr(err, dsn)
		}
		return st, nil
	}
	st, err := openPostgres(ctx, dsn, opts)
	if errors.Is(err, errNeedsMigrate) && o.createFile {
		return nil, fmt.Errorf("%w (or pass --migrate)", err)
	}
	if err != nil {
		return nil, err
	}
	return st, nil
}

// newerSQLite is the error of a SQLite file at schema version v, newer than
// this sortie's.
func newerSQLite(path string, v int) error {
	return fmt.Errorf("%s: %w: it has version %d, this sortie knows up to %d; upgrade sortie", path, store.ErrSchemaNewer, v, sqlitestore.SchemaVersion)
}
