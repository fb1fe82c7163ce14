package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	_ "modernc.org/sqlite" // the "sqlite" driver, to read a file's version without migrating it

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

const migrateDescription = `
Migrate creates the store's schema, or brings it up to this version of sortie,
and prints what it did. Running it again does nothing. On PostgreSQL the
tables live in one schema (--schema, default sortie); several processes may
run migrate at once. A SQLite file is created when missing. Redis has no
schema: migrate checks the server (Redis 7 or later, maxmemory-policy
noeviction) and loads sortie's Functions library on it, which every sortie
process using the server also does as it starts.

With --check it changes nothing: the exit status is 0 when the schema is up to
date and 1 when it needs migrating (or cannot be read).

A schema written by a newer sortie is refused: upgrade sortie instead. So is a
schema or file holding tables that are not sortie's.`

// errNeedsMigration is the failure of --check on a schema that is older
// than this sortie (or missing).
var errNeedsMigration = errors.New("needs migrating")

func runMigrate(ctx context.Context, e *env, args []string) int {
	var (
		storeFlag, schema string
		check             bool
	)
	fs := flagSet("migrate", "--store sqlite:PATH|postgres://URL|redis://URL [--schema NAME] [--check]", migrateDescription)
	fs.StringVar(&storeFlag, "store", "", "the `store` to migrate: sqlite:PATH or PATH.db (that SQLite file),\na postgres:// URL, or a redis:// URL (default $"+storeEnv+")")
	fs.StringVar(&schema, "schema", "", schemaFlagHelp)
	fs.BoolVar(&check, "check", false, "change nothing: exit 0 when the schema is up to date, 1 when it needs migrating")
	if code := parseFlags(e, fs, args); code >= 0 {
		return code
	}
	if storeFlag = storeOrDefault(storeFlag, ""); storeFlag == "" {
		return usageError(e, fs, "--store is required (or $%s)", storeEnv)
	}
	spec, err := parseStoreFlag(storeFlag)
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	if err := schemaFlagErr(spec.kind); err != nil && schema != "" {
		return usageError(e, fs, "%v", err)
	}
	var (
		m   migration
		msg string
	)
	switch {
	case spec.kind == storeMemory:
		return usageError(e, fs, "--store memory: nothing to migrate (the memory store keeps no schema)")
	case spec.kind == storeSQLite && spec.path == "":
		return usageError(e, fs, "--store sqlite names a temporary database: give a file, sqlite:PATH")
	case spec.kind == storeSQLite:
		m, err = migrateSQLite(ctx, spec.path, check)
	case spec.kind == storePostgres:
		if schema == "" {
			schema = pgstore.DefaultSchema
		}
		m, err = migratePostgres(ctx, spec.dsn, schema, check)
	case spec.kind == storeRedis:
		m, err = migrateRedis(ctx, spec.dsn, check)
	default:
		return usageError(e, fs, "--store %s: not supported by migrate", spec.kind)
	}
	switch {
	case errors.Is(err, errNeedsMigration):
		state := fmt.Sprintf("is at version %d", m.from)
		if m.from == 0 {
			state = m.absent
		}
		fmt.Fprintf(e.stderr, "sortie migrate: %s %s, this sortie needs version %d: run sortie migrate without --check\n", m.what, state, m.to)
		return exitError
	case err != nil:
		fmt.Fprintf(e.stderr, "sortie migrate: %v\n", err)
		return exitError
	case check:
		msg = fmt.Sprintf("up to date at version %d", m.to)
	case m.from == m.to:
		msg = fmt.Sprintf("already at version %d", m.to)
	default:
		msg = fmt.Sprintf("migrated from version %d to %d", m.from, m.to)
	}
	fmt.Fprintf(e.stdout, "%s: %s\n", m.what, msg)
	return exitOK
}

// migration is what migrate found or did: the schema, file or library it
// worked on ("schema sortie", "sqlite database /x.db"), its versions before
// and after, and how to say version 0 ("has no sortie tables yet").
type migration struct {
	what     string
	from, to int
	absent   string
}

// noTables is migration.absent of a SQLite file or PostgreSQL schema.
const noTables = "has no sortie tables yet"

// migrateSQLite migrates the SQLite database at path, or with check only
// reads its version, returning errNeedsMigration when it is older.
func migrateSQLite(ctx context.Context, path string, check bool) (migration, error) {
	m := migration{what: "sqlite database " + path, absent: noTables, to: sqlitestore.SchemaVersion}
	from, err := sqliteSchemaVersion(ctx, path)
	if err != nil {
		return m, explainStoreErr(err, "use another file")
	}
	m.from = from
	if from > sqlitestore.SchemaVersion {
		return m, newerSQLite(path, from)
	}
	if check {
		if from < sqlitestore.SchemaVersion {
			return m, errNeedsMigration
		}
		return m, nil
	}
	st, err := sqlitestore.Open(path, nil)
	if err != nil {
		return m, explainStoreErr(err, "use another file")
	}
	if err := st.Close(); err != nil {
		return m, err
	}
	return m, nil
}

// sqliteSchemaVersion reads the schema version of the SQLite database at
// path without changing it: 0 when the file is missing or empty.
func sqliteSchemaVersion(ctx context.Context, path string) (int, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return 0, err
	}
	if fi, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, err
	} else if fi.IsDir() {
		return 0, fmt.Errorf("%s is a directory, not a database file: give a file path such as %s", path, filepath.Join(path, "sortie.db"))
	}
	u := url.URL{Scheme: "file", Path: abs, OmitHost: true, RawQuery: "mode=ro"}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	defer db.Close()
	var tables []string
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`)
	if err != nil {
		if strings.Contains(err.Error(), "not a database") {
			return 0, fmt.Errorf("%s: %w: the file is not an SQLite database", path, store.ErrNotSortieDatabase)
		}
		if strings.Contains(err.Error(), "malformed") { // SQLITE_CORRUPT
			return 0, fmt.Errorf("%s is corrupt: %w; restore it from a backup", path, err)
		}
		return 0, fmt.Errorf("%s: read tables: %w", path, err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return 0, fmt.Errorf("%s: read tables: %w", path, err)
		}
		tables = append(tables, name)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, fmt.Errorf("%s: read tables: %w", path, err)
	}
	if len(tables) == 0 {
		return 0, nil
	}
	var version int
	err = db.QueryRowContext(ctx, `SELECT value FROM sortie_meta WHERE key = 'schema_version'`).Scan(&version)
	if err != nil {
		return 0, fmt.Errorf("%s: %w: it has tables %q but no sortie schema version (%v)",
			path, store.ErrNotSortieDatabase, tables, err)
	}
	return version, nil
}

// migratePostgres migrates schema on the server at dsn, or with check only
// reads its version, returning errNeedsMigration when it is older.
func migratePostgres(ctx context.Context, dsn, schema string, check bool) (migration, error) {
	m := migration{what: "schema " + schema, absent: noTables, to: pgstore.SchemaVersion}
	if check {
		from, err := pgstore.Version(ctx, dsn, &pgstore.Options{Schema: schema})
		m.from = from
		switch {
		case err != nil:
			return m, explainPostgresErr(err, dsn)
		case from > pgstore.SchemaVersion:
			return m, fmt.Errorf("%w: schema %q has version %d, this sortie knows up to %d; upgrade sortie",
				store.ErrSchemaNewer, schema, from, pgstore.SchemaVersion)
		case from < pgstore.SchemaVersion:
			return m, errNeedsMigration
		}
		return m, nil
	}
	res, err := pgstore.Migrate(ctx, dsn, &pgstore.Options{Schema: schema})
	m.from, m.to = res.From, res.To
	if err != nil {
		return m, explainPostgresErr(err, dsn)
	}
	return m, nil
}

// explainStoreErr adds what to do about a schema that is newer or not
// sortie's; other is how to choose another schema or file.
func explainStoreErr(err error, other string) error {
	switch {
	case errors.Is(err, store.ErrSchemaNewer) && !strings.Contains(err.Error(), "upgrade sortie"):
		return fmt.Errorf("%w; upgrade sortie", err)
	case errors.Is(err, store.ErrNotSortieDatabase):
		return fmt.Errorf("%w (sortie will not touch what it did not create: %s)", err, other)
	}
	return err
}

// explainPostgresErr says in words what went wrong talking to the server at
// dsn, naming the server (never the password): unreachable, refused
// credentials, missing database or privileges; otherwise as explainStoreErr.
func explainPostgresErr(err error, dsn string) error {
	server := "the PostgreSQL server"
	user, database := "", ""
	if cfg, perr := pgconn.ParseConfig(dsn); perr == nil {
		server = fmt.Sprintf("the PostgreSQL server at %s", net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)))
		user, database = cfg.User, cfg.Database
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "28P01" || pe.Code == "28000": // invalid_password, invalid_authorization_specification
			return fmt.Errorf("authentication failed: %s refused user %q (check the user and password in --store): %s", server, user, pe.Message)
		case pe.Code == "3D000": // invalid_catalog_name
			return fmt.Errorf("database %q does not exist on %s: create it, or fix the URL: %s", database, server, pe.Message)
		case pe.Code == "42501": // insufficient_privilege
			return fmt.Errorf("permission denied for user %q on %s: %w", user, server, err)
		}
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		var ne net.Error
		switch {
		case pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("cannot reach %s: timed out connecting (database %q, user %q)", server, database, user)
		case errors.As(err, &ne):
			return fmt.Errorf("cannot reach %s (database %q, user %q): %v", server, database, user, ne)
		}
		return fmt.Errorf("cannot connect to %s: %w", server, err)
	}
	return explainStoreErr(err, "choose another schema with --schema")
}
