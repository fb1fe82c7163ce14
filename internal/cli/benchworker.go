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
	"github.com/sortiehq/sortie/store/sqlitestore"
)

const benchWorkerDescription = `
Bench-worker is the helper process of 'sortie bench --workload interval',
which starts it: it works the bench's queue on the same SQLite database for
--duration and reports the jobs it ran on stdout. It is not meant to be run
by hand.`

// helperCommand returns bench.Options.HelperCommand for interval: this
// binary's bench-worker on the run's SQLite file, with the same durability
// settings.
func helperCommand(sync sqlitestore.Synchronous, relaxedClaims bool) func(store.Store) ([]string, error) {
	return func(st store.Store) ([]string, error) {
		sq, ok := st.(*sqlitestore.Store)
		if !ok {
			return nil, errors.New("only a SQLite store can be shared with other processes")
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
		args := []string{exe, "bench-worker", "--store", "sqlite:" + sq.Path(), "--synchronous", strings.ToLower(sync.String())}
		if relaxedClaims {
			args = append(args, "--relaxed-claims")
		}
		return args, nil
	}
}

func runBenchWorker(ctx context.Context, e *env, args []string) int {
	var (
		a                  bench.HelperArgs
		storeFlag, syncStr string
		relaxedClaims      bool
	)
	fs := flagSet("bench-worker", "--store sqlite:PATH --queue Q --workers C --duration D --id ID", benchWorkerDescription)
	fs.StringVar(&storeFlag, "store", "", "the SQLite database, `sqlite:PATH`")
	fs.StringVar(&syncStr, "synchronous", "full", "SQLite commit durability, `mode` full or normal")
	fs.BoolVar(&relaxedClaims, "relaxed-claims", false, "SQLite with full: commit claims and outcomes without waiting for the disk")
	a.SetFlags(fs)
	if code := parseFlags(e, fs, args); code >= 0 {
		return code
	}
	spec, err := parseStore(storeFlag)
	if err != nil {
		return usageError(e, fs, "--store: %v", err)
	}
	if spec.kind != storeSQLite || spec.path == "" {
		return usageError(e, fs, "--store must name a SQLite file, sqlite:PATH, got %q", storeFlag)
	}
	var sync sqlitestore.Synchronous
	switch strings.ToLower(syncStr) {
	case "full":
		sync = sqlitestore.SynchronousFull
	case "normal":
		sync = sqlitestore.SynchronousNormal
	default:
		return usageError(e, fs, "--synchronous must be full or normal, got %q", syncStr)
	}
	st, err := sqlitestore.Open(spec.path, &sqlitestore.Options{Synchronous: sync, RelaxedClaims: relaxedClaims})
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
