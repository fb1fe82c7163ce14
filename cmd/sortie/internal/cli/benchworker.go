package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/redisstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

const benchWorkerDescription = `
Bench-worker is the helper process of 'sortie bench --workload interval',
which starts it: it works the bench's queue on the same SQLite database,
PostgreSQL schema or Redis key prefix for --duration and reports the jobs it
ran on stdout. It is not meant to be run by hand.`

// helperCommand returns bench.Options.HelperCommand for interval: this
// binary's bench-worker on the run's store, the same SQLite file with the
// same durability settings, the same PostgreSQL database (dsn) and schema,
// or the same Redis server (dsn) and key prefix.
func helperCommand(dsn string, sync sqlitestore.Synchronous, relaxedClaims bool) func(store.Store) ([]string, error) {
	return func(st store.Store) ([]string, error) {
		var storeArgs []string
		switch st := st.(type) {
		case *sqlitestore.Store:
			storeArgs = []string{"--store", "sqlite:" + st.Path(), "--synchronous", strings.ToLower(sync.String())}
			if relaxedClaims {
				storeArgs = append(storeArgs, "--relaxed-claims")
			}
		case *pgstore.Store:
			// The run's schema, which may be one made for this run only.
			storeArgs = []string{"--store", dsn, "--schema", st.Schema()}
		case *redisstore.Store:
			// The run's key prefix, which may be one made for this run only.
			u, err := redisURLWithPrefix(dsn, st.Prefix())
			if err != nil {
				return nil, err
			}
			storeArgs = []string{"--store", u}
		default:
			return nil, errors.New("only a SQLite, PostgreSQL or Redis store can be shared with other processes")
		}
		if testing.Testing() {
			// os.Executable is the test binary, which would run the tests
			// again instead of bench-worker.
			return nil, errors.New("a test binary cannot start client processes: build cmd/sortie and run it")
		}
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		return append([]string{exe, "bench-worker"}, storeArgs...), nil
	}
}

func runBenchWorker(ctx context.Context, e *env, args []string) int {
	var (
		a                  bench.HelperArgs
		storeFlag, syncStr string
		schema             string
		relaxedClaims      bool
	)
	fs := flagSet("bench-worker", "--store sqlite:PATH|postgres://URL|redis://URL [--schema NAME] --queue Q --workers C --duration D --id ID", benchWorkerDescription)
	fs.StringVar(&storeFlag, "store", "", "the bench's store, `sqlite:PATH`, a postgres:// URL or a redis:// URL with its ?prefix=")
	fs.StringVar(&schema, "schema", "", "the bench's PostgreSQL `schema` (default sortie)")
	fs.StringVar(&syncStr, "synchronous", "full", "SQLite commit durability, `mode` full or normal")
	fs.BoolVar(&relaxedClaims, "relaxed-claims", false, "SQLite with full: commit claims and outcomes without waiting for the disk")
	a.SetFlags(fs)
	if code := parseFlags(e, fs, args); code >= 0 {
		return code
	}
	spec, err := parseStoreFlag(storeFlag)
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	if !(spec.kind == storeSQLite && spec.path != "" || spec.kind == storePostgres || spec.kind == storeRedis) {
		return usageError(e, fs, "--store must name a SQLite file, sqlite:PATH, or a postgres:// or redis:// URL, got %q", storeFlag)
	}
	if err := schemaFlagErr(spec.kind); err != nil && schema != "" {
		return usageError(e, fs, "%v", err)
	}
	sync, err := parseSynchronous(syncStr)
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	var st interface {
		store.Store
		Close() error
	}
	switch spec.kind {
	case storePostgres:
		// The bench has migrated the schema; a helper only checks it.
		st, err = pgstore.Open(ctx, spec.dsn, &pgstore.Options{Schema: schema})
	case storeRedis:
		st, err = redisstore.Open(ctx, spec.dsn, nil)
	default:
		st, err = sqlitestore.Open(spec.path, &sqlitestore.Options{Synchronous: sync, RelaxedClaims: relaxedClaims})
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "sortie bench-worker: %v\n", err)
		return exitError
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	err = bench.RunHelper(ctx, st, a, e.stdout, logger)
	if cerr := st.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "sortie bench-worker: %v\n", err)
		return exitError
	}
	return exitOK
}
