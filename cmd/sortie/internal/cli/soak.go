package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

const soakDescription = `
Soak holds a steady stream of jobs on a store for a long time, as a day of
production would, and reports each window: 90% of the jobs succeed, 8% fail
once and then succeed, 2% fail twice and end dead; 10% are scheduled a few
seconds ahead; 1% of the enqueues ask for a unique key a pending job holds.
Finished jobs are pruned after --retention. Each window prints the
throughput, the enqueue-to-start percentiles of first attempts, the memory
of this process, the store's jobs by state and its size. At the end it
waits for the pending jobs and checks that every job finished once, in the
state it should, and that the store's counts agree with its listing: exit
status 1 otherwise.

The store must exist (sortie migrate creates it); use a store of its own,
as the soak prunes finished jobs.`

func runSoak(ctx context.Context, e *env, args []string) int {
	var (
		storeFlag, schema string
		o                 bench.SoakOptions
	)
	fs := flagSet("soak", "--store sqlite:PATH|postgres://URL|redis://URL [--schema NAME] [--rate N] [--duration D] [--window D]", soakDescription)
	fs.StringVar(&storeFlag, "store", "", "the `store` to soak: sqlite:PATH or PATH.db, a postgres:// URL, or a redis:// URL")
	fs.StringVar(&schema, "schema", "", schemaFlagHelp)
	fs.Float64Var(&o.Rate, "rate", 3000, "jobs enqueued per second (`N`)")
	fs.DurationVar(&o.Duration, "duration", 30*time.Minute, "how long jobs are enqueued (`D`)")
	fs.DurationVar(&o.Window, "window", 5*time.Minute, "the length of one reported window (`D`)")
	fs.IntVar(&o.Workers, "workers", bench.DefaultWorkers, "worker goroutines (`N`)")
	fs.DurationVar(&o.Retention, "retention", 2*time.Minute, "how long finished jobs are kept (`D`)")
	if code := parseFlags(e, fs, args); code >= 0 {
		return code
	}
	switch {
	case storeFlag == "":
		return usageError(e, fs, "--store is required: the soak prunes finished jobs, so give it a store of its own")
	case o.Rate <= 0 || o.Duration <= 0 || o.Window <= 0 || o.Workers < 1 || o.Retention <= 0:
		return usageError(e, fs, "--rate, --duration, --window, --workers and --retention must be positive")
	}
	st, _, err := openStore(ctx, &openOpts{store: storeFlag, schema: schema, logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer st.Close()
	o.Sizes = storeSizes(st, schema)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "window\tseconds\tjobs/s\tp50 ms\tp99 ms\tmax ms\theap MiB\tGo MiB\tRSS MiB\tpending\tfinished\tstore MiB\tsteal %%\t\n")
	tw.Flush()
	o.OnWindow = func(w bench.SoakWindow) {
		printWindow(tw, w)
		tw.Flush()
	}
	rep, err := bench.Soak(ctx, st, &o)
	if err != nil {
		fmt.Fprintf(e.stderr, "soak: %v\n", err)
		return exitError
	}
	fmt.Fprintf(e.stdout, "enqueued %d jobs (%d unique conflicts refused)\n", rep.Enqueued, rep.Duplicates)
	if err := rep.Err(); err != nil {
		fmt.Fprintf(e.stderr, "%v\n", err)
		return exitError
	}
	fmt.Fprintln(e.stdout, "every job finished once, as it should; the counts agree with the listing")
	return exitOK
}

func printWindow(w io.Writer, x bench.SoakWindow) {
	var pending, finished int64
	for st, n := range x.Rows {
		if st.Finished() {
			finished += n
		} else {
			pending += n
		}
	}
	var size int64
	for _, n := range x.Sizes {
		size += n
	}
	steal := "-"
	if x.StealPct >= 0 {
		steal = fmt.Sprintf("%.1f", x.StealPct)
	}
	fmt.Fprintf(w, "%d\t%.0f-%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%.1f\t%s\t\n", x.Index, x.From, x.To, x.JobsPerSec,
		x.P50ms, x.P99ms, x.MaxMs, x.HeapMB, x.GoMB, x.RSSMB, pending, finished, float64(size)/(1<<20), steal)
}

// storeSizes returns how to read the size of st: its files for SQLite,
// its tables with their indexes for PostgreSQL; nil for other stores.
func storeSizes(st store.Store, schema string) func(context.Context) (map[string]int64, error) {
	switch s := st.(type) {
	case *sqlitestore.Store:
		return func(context.Context) (map[string]int64, error) {
			sizes := make(map[string]int64)
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if fi, err := os.Stat(s.Path() + suffix); err == nil {
					sizes["file"+suffix] = fi.Size()
				}
			}
			return sizes, nil
		}
	case *pgstore.Store:
		if schema == "" {
			schema = "sortie"
		}
		return func(ctx context.Context) (map[string]int64, error) {
			rows, err := s.Pool().Query(ctx, `SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c
				JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, schema)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			sizes := make(map[string]int64)
			for rows.Next() {
				var name string
				var n int64
				if err := rows.Scan(&name, &n); err != nil {
					return nil, err
				}
				sizes[name] = n
			}
			return sizes, rows.Err()
		}
	}
	return nil
}
