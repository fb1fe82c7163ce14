package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// storeEnv names the environment variable the admin commands read their
// store from when --store is not given.
const storeEnv = "SORTIE_STORE"

// defaultAdminStore is the store of the admin commands when neither
// --store nor SORTIE_STORE names one: the embedded default's file.
const defaultAdminStore = "sortie.db"

// storeOrDefault returns the --store value given, else $SORTIE_STORE, else
// fallback.
func storeOrDefault(flagValue, fallback string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := os.Getenv(storeEnv); v != "" {
		return v
	}
	return fallback
}

// adminFlags are the flags every admin command (jobs, queues, enqueue,
// retry, cancel, delete, pause, resume) shares.
type adminFlags struct {
	store, schema string
	json          bool
}

func (a *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.store, "store", "", "the `store`: sqlite:PATH or PATH.db (an existing SQLite file), a postgres:// URL,\nor a redis:// URL (default $"+storeEnv+", else "+defaultAdminStore+")")
	fs.StringVar(&a.schema, "schema", "", schemaFlagHelp)
	fs.BoolVar(&a.json, "json", false, "print JSON instead of text")
}

// adminSynopsis is the flags part of every admin command's synopsis.
const adminSynopsis = "[--store sqlite:PATH|postgres://URL|redis://URL] [--schema NAME] [--json]"

// adminConns sizes an admin command's PostgreSQL pool: an --all action
// (Client.JobsBulk) reads the next page while one store call acts on the
// last.
const adminConns = 2

// open opens the store the flags name, without creating or migrating
// anything (see openStore). The client it returns enqueues and inspects;
// it runs no workers.
func (a *adminFlags) open(ctx context.Context) (*sortie.Client, func(), error) {
	st, _, err := openStore(ctx, &openOpts{store: storeOrDefault(a.store, defaultAdminStore), schema: a.schema,
		maxConns: adminConns, noListen: true})
	if err != nil {
		return nil, nil, err
	}
	closeStore := func() { _ = st.Close() }
	c, err := sortie.NewClient(st, &sortie.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return c, closeStore, nil
}

// openSQLiteAdmin opens an existing SQLite database at the current schema
// version.
func openSQLiteAdmin(ctx context.Context, path string) (*sqlitestore.Store, error) {
	v, err := sqliteSchemaVersion(ctx, path)
	switch {
	case err != nil:
		return nil, explainStoreErr(err, "give --store")
	case v == 0:
		return nil, fmt.Errorf("no sortie database at %s: give --store (or $%s), or create it with sortie migrate --store %s", path, storeEnv, path)
	case v < sqlitestore.SchemaVersion:
		return nil, fmt.Errorf("sqlite database %s is at version %d, this sortie needs version %d: run sortie migrate --store %s", path, v, sqlitestore.SchemaVersion, path)
	case v > sqlitestore.SchemaVersion:
		return nil, newerSQLite(path, v)
	}
	st, err := sqlitestore.Open(path, nil)
	if err != nil {
		return nil, explainStoreErr(err, "give --store")
	}
	return st, nil
}

// errNeedsMigrate marks an error of openPostgres that sortie migrate (or
// serve --migrate) resolves. Its text is empty: the message says it.
var errNeedsMigrate = errors.New("")

// openPostgres opens opts.Schema on the server at dsn after checking that
// it is at the current schema version, without migrating it.
func openPostgres(ctx context.Context, dsn string, opts *pgstore.Options) (*pgstore.Store, error) {
	v, err := pgstore.Version(ctx, dsn, &pgstore.Options{Schema: opts.Schema, WaitForServer: opts.WaitForServer, Logger: opts.Logger})
	switch {
	case errors.Is(err, pgstore.ErrServerWait):
		return nil, fmt.Errorf("%w (gave up waiting for it after %s)", explainPostgresErr(err, dsn), opts.WaitForServer)
	case err != nil:
		return nil, explainPostgresErr(err, dsn)
	case v == 0:
		return nil, fmt.Errorf("schema %s has no sortie tables: give --schema, or create them with sortie migrate%w", opts.Schema, errNeedsMigrate)
	case v < pgstore.SchemaVersion:
		return nil, fmt.Errorf("schema %s is at version %d, this sortie needs version %d: run sortie migrate%w", opts.Schema, v, pgstore.SchemaVersion, errNeedsMigrate)
	}
	st, err := pgstore.Open(ctx, dsn, opts)
	if err != nil {
		return nil, explainPostgresErr(err, dsn)
	}
	return st, nil
}

// usageErr is a bad command line found after parsing: exit status 2.
type usageErr struct{ err error }

func (u usageErr) Error() string { return u.err.Error() }

// adminFail reports err from an admin command and returns its exit status.
func adminFail(e *env, fs *flag.FlagSet, err error) int {
	var u usageErr
	if errors.As(err, &u) {
		return usageError(e, fs, "%v", u.err)
	}
	fmt.Fprintf(e.stderr, "%s: %s\n", fs.Name(), say(err))
	return exitError
}

// say words a library error for the command line: without the library's
// "sortie: " prefix, and a missing job as "job 42 not found".
func say(err error) string {
	msg := strings.TrimPrefix(err.Error(), "sortie: ")
	if errors.Is(err, sortie.ErrNotFound) {
		msg = strings.Replace(msg, ": "+sortie.ErrNotFound.Error(), " not found", 1)
	}
	return msg
}

// parseInterleaved parses args as fs's flags mixed with positional
// arguments, in any order ("retry 12 --store x.db" as well as "retry
// --store x.db 12"), and returns the positional ones. "--" ends the flags.
func parseInterleaved(e *env, fs *flag.FlagSet, args []string) (positional []string, code int) {
	for {
		if code := parseFlagsOnly(e, fs, args); code >= 0 {
			return nil, code
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, -1
		}
		// fs stopped at a positional argument, or after "--".
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), -1
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// oneLine shortens s to its first line, at most n runes, for a table cell.
func oneLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}
