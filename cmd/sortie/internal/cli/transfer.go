package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

const exportDescription = `
Export writes every job of the store, in every state, with its attempts,
errors, result, unique key, dependencies and workflow, and the queues'
settings and pause states and the periodic schedules' last slots, as JSON
lines: to --out, or to standard output. sortie import reads it into any
store. Stop the workers and the applications that enqueue first: the jobs
are read a page at a time, not in one snapshot.`

const importDescription = `
Import reads what sortie export wrote (from FILE, or standard input when
FILE is - or missing) into the store. A SQLite file that does not exist is
created (--dry-run checks against an empty store and creates nothing); a
PostgreSQL schema must exist (sortie migrate creates it). Jobs keep their
IDs and states; --id-offset N adds N to every ID and to the IDs jobs name,
to import next to jobs that would collide.

The whole stream is read and checked before anything is written: a bad or
truncated stream is refused with its line number, and so are jobs that
conflict with the store (an ID holding a different job, a unique key held
by another pending job), unless --skip-conflicts leaves them (and the jobs
depending on them) out. Running the same import again adds nothing, so an
import cut short is resumed by running it again. --dry-run checks and
writes nothing.`

func runExport(ctx context.Context, e *env, args []string) int {
	var (
		a   adminFlags
		out string
	)
	fs := flagSet("export", "[--store sqlite:PATH|postgres://URL|redis://URL] [--schema NAME] [--out FILE]", exportDescription)
	fs.StringVar(&a.store, "store", "", "the `store` to export: sqlite:PATH or PATH.db, a postgres:// URL,\nor a redis:// URL (default $"+storeEnv+", else "+defaultAdminStore+")")
	fs.StringVar(&a.schema, "schema", "", schemaFlagHelp)
	fs.StringVar(&out, "out", "-", "write to `FILE` instead of standard output (-)")
	if code := parseFlags(e, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(e, fs, "unexpected argument %q (write to a file with --out)", fs.Arg(0))
	}
	c, closeStore, err := a.open(ctx)
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer closeStore()
	w, closeOut, err := createOut(out)
	if err != nil {
		fmt.Fprintf(e.stderr, "export: --out: %v\n", err)
		return exitError
	}
	start := time.Now()
	p := newProgress(e.stderr, "export")
	res, err := c.Export(ctx, w, func(n int) { p.note("exported", n) })
	if cerr := closeOut(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "%s\n", say(err))
		return exitError
	}
	fmt.Fprintf(e.stderr, "export: %d jobs, %d queue settings, %d periodic slots in %s\n",
		res.Jobs, res.Queues, res.Periodic, time.Since(start).Round(time.Millisecond))
	return exitOK
}

// createOut opens the export's destination: standard output for "-".
func createOut(path string) (io.Writer, func() error, error) {
	if path == "-" {
		return os.Stdout, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	return bw, func() error {
		if err := bw.Flush(); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}, nil
}

func runImport(ctx context.Context, e *env, args []string) int {
	var (
		a    adminFlags
		opts sortie.ImportOpts
	)
	fs := flagSet("import", "[--store sqlite:PATH|postgres://URL|redis://URL] [--schema NAME] [--id-offset N] [--skip-conflicts] [--dry-run] [FILE|-]", importDescription)
	fs.StringVar(&a.store, "store", "", "the `store` to import into: sqlite:PATH or PATH.db, a postgres:// URL,\nor a redis:// URL (default $"+storeEnv+", else "+defaultAdminStore+")")
	fs.StringVar(&a.schema, "schema", "", schemaFlagHelp)
	fs.Int64Var(&opts.IDOffset, "id-offset", 0, "add `N` to every job ID and to the IDs jobs name")
	fs.BoolVar(&opts.Skip, "skip-conflicts", false, "leave out the jobs that conflict with the store, and their dependents")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "read and check everything, write nothing")
	fs.IntVar(&opts.Batch, "batch", 2000, "jobs written per store call, each batch in one step (`N`, 1 to 50000)")
	files, code := parseInterleaved(e, fs, args)
	if code >= 0 {
		return code
	}
	if len(files) > 1 {
		return usageError(e, fs, "one FILE at most, got %d", len(files))
	}
	if opts.IDOffset < 0 {
		return usageError(e, fs, "--id-offset must not be negative, got %d", opts.IDOffset)
	}
	if opts.Batch < 1 || opts.Batch > 50000 {
		return usageError(e, fs, "--batch must be 1 to 50000, got %d", opts.Batch)
	}
	var in io.Reader = os.Stdin
	if len(files) == 1 && files[0] != "-" {
		name := files[0]
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(e.stderr, "import: %v\n", err)
			return exitError
		}
		defer f.Close()
		in = f
	}
	c, closeStore, err := a.openForImport(ctx, opts.DryRun)
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer closeStore()
	start := time.Now()
	p := newProgress(e.stderr, "import")
	opts.Progress = func(phase string, n int) {
		verb := "checked"
		if phase == "write" {
			verb = "wrote"
		}
		p.note(verb, n)
	}
	rep, err := c.Import(ctx, in, &opts)
	var ce *sortie.ImportConflictError
	switch {
	case errors.As(err, &ce):
		fmt.Fprintf(e.stderr, "import: %d jobs conflict with the store; nothing was imported:\n", ce.Count)
		for _, x := range ce.Conflicts {
			fmt.Fprintf(e.stderr, "  %s\n", x)
		}
		if ce.Count > len(ce.Conflicts) {
			fmt.Fprintf(e.stderr, "  ... and %d more\n", ce.Count-len(ce.Conflicts))
		}
		fmt.Fprintln(e.stderr, "import: leave them out with --skip-conflicts, or import next to them with --id-offset")
		return exitError
	case err != nil:
		fmt.Fprintf(e.stderr, "%s\n", say(err))
		return exitError
	}
	for _, x := range rep.Skipped {
		fmt.Fprintf(e.stderr, "import: skipped %s\n", x)
	}
	what := "imported"
	if opts.DryRun {
		what = "dry run, nothing written; would import"
	}
	fmt.Fprintf(e.stdout, "%s %d of %d jobs (%d already there, %d skipped), %d queue settings, %d periodic slots in %s\n",
		what, rep.Added, rep.Jobs, rep.Present, rep.Jobs-rep.Added-rep.Present, rep.Queues, rep.Periodic, time.Since(start).Round(time.Millisecond))
	return exitOK
}

// progress prints a line on w at most every second while a long command
// runs.
type progress struct {
	w    io.Writer
	name string
	last time.Time
}

func newProgress(w io.Writer, name string) *progress {
	return &progress{w: w, name: name, last: time.Now()}
}

func (p *progress) note(verb string, n int) {
	if time.Since(p.last) < time.Second {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "%s: %s %d jobs\n", p.name, verb, n)
}

// openForImport opens the store to import into as every command does, but
// makes a SQLite file that does not exist yet: moving jobs into a new file
// is what import is for. With dryRun it makes nothing and checks against
// an empty store in a temporary directory instead.
func (a *adminFlags) openForImport(ctx context.Context, dryRun bool) (*sortie.Client, func(), error) {
	spec, err := parseStoreFlag(storeOrDefault(a.store, defaultAdminStore))
	if err != nil || spec.kind != storeSQLite || spec.path == "" {
		return a.open(ctx) // which reports a bad --store as every command does
	}
	if _, err := os.Stat(spec.path); !errors.Is(err, fs.ErrNotExist) {
		return a.open(ctx)
	}
	path, cleanup := spec.path, func() {}
	if dryRun {
		dir, err := os.MkdirTemp("", "sortie-import-")
		if err != nil {
			return nil, nil, err
		}
		path, cleanup = filepath.Join(dir, "dry-run.db"), func() { _ = os.RemoveAll(dir) }
	}
	st, err := sqlitestore.Open(path, nil)
	if err != nil {
		cleanup()
		return nil, nil, explainStoreErr(err, "give --store")
	}
	closeStore := func() { _ = st.Close(); cleanup() }
	c, err := sortie.NewClient(st, &sortie.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return c, closeStore, nil
}
