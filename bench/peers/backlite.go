package peers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/mikestefanello/backlite"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
)

// Backlite settings. backlite's README opens the database with WAL and a
// 5 s busy timeout and gives ReleaseAfter 10 minutes in its example;
// synchronous FULL is SQLite's default and what `sortie bench --store
// sqlite` uses, so a commit survives a power cut on both sides.
const (
	backliteQueue        = "peerbench"
	backliteReleaseAfter = 10 * time.Minute
	backliteBusyTimeout  = 5000 // ms
	backliteSynchronous  = "FULL"
)

// Config tells backlite the queue of a benchmark job: no retention, so a
// completed task is deleted in the transaction that records its success
// (backlite's default when Retention is nil).
func (jobArgs) Config() backlite.QueueConfig {
	return backlite.QueueConfig{Name: backliteQueue, MaxAttempts: 25}
}

// Backlite runs the workloads on backlite with the modernc.org/sqlite
// driver.
type Backlite struct {
	// path is the database file, or empty for a new temporary one per run.
	path   string
	sqlite string
	logger *slog.Logger
}

var _ Peer = (*Backlite)(nil)

// OpenBacklite returns backlite on the SQLite file at path, created if
// need be; it must hold no task. With path empty each run gets a new
// database in a temporary directory, removed after the run. logger
// receives backlite's logs, among them the errors it logs and carries on
// from (a task whose success could not be recorded stays claimed).
func OpenBacklite(path string, logger *slog.Logger) (*Backlite, error) {
	p := &Backlite{path: path, sqlite: "unknown", logger: logger}
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	_ = db.QueryRow("SELECT sqlite_version()").Scan(&p.sqlite)
	return p, nil
}

// Name returns "backlite".
func (p *Backlite) Name() string { return "backlite" }

// Config returns "".
func (p *Backlite) Config() string { return "" }

// Version returns backlite's, the driver's and SQLite's versions.
func (p *Backlite) Version() string {
	return fmt.Sprintf("backlite %s, modernc.org/sqlite %s, SQLite %s",
		moduleVersion("github.com/mikestefanello/backlite"), moduleVersion("modernc.org/sqlite"), p.sqlite)
}

// Settings lists the client's and the database's settings for a run.
func (p *Backlite) Settings(w bench.Workload, o Options) string {
	o, _ = withDefaults(p.options(w, o), w)
	s := fmt.Sprintf("NumWorkers=%d ReleaseAfter=%s Retention=none journal_mode=WAL synchronous=%s busy_timeout=%dms",
		o.Workers, backliteReleaseAfter, backliteSynchronous, backliteBusyTimeout)
	switch w {
	case bench.EnqueueBatch:
		s += fmt.Sprintf(" Add(%d tasks).Save producers=%d", o.BatchSize, o.Producers)
	case bench.EnqueueSingle:
		s += fmt.Sprintf(" Add(1 task).Save producers=%d", o.Producers)
	}
	return s
}

func (p *Backlite) options(w bench.Workload, o Options) Options {
	if o.Jobs == 0 && w == bench.EnqueueSingle {
		o.Jobs = bench.DefaultSQLiteSingleJobs // as sortie bench's on SQLite: a commit per enqueue
	}
	return o
}

// Close does nothing: each run closes its database.
func (p *Backlite) Close() error { return nil }

// open opens the run's database and installs backlite's schema.
func (p *Backlite) open() (db *sql.DB, closeDB func() error, err error) {
	path, dir := p.path, ""
	if path == "" {
		dir, err = os.MkdirTemp("", "peerbench-backlite-")
		if err != nil {
			return nil, nil, err
		}
		path = filepath.Join(dir, "backlite.db")
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", backliteBusyTimeout))
	q.Add("_pragma", "synchronous("+backliteSynchronous+")")
	db, err = sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err == nil {
		err = db.Ping()
	}
	closeDB = func() error {
		var errs []error
		if db != nil {
			errs = append(errs, db.Close())
		}
		if dir != "" {
			errs = append(errs, os.RemoveAll(dir))
		}
		return errors.Join(errs...)
	}
	if err != nil {
		return nil, nil, errors.Join(err, closeDB())
	}
	return db, closeDB, nil
}

// Run runs w once on an empty database.
func (p *Backlite) Run(ctx context.Context, w bench.Workload, opts Options) (res bench.Result, err error) {
	o, err := withDefaults(p.options(w, opts), w)
	if err != nil {
		return res, err
	}
	db, closeDB, err := p.open()
	if err != nil {
		return res, fmt.Errorf("backlite: open database: %w", err)
	}
	defer func() {
		if cerr := closeDB(); cerr != nil && err == nil {
			err = fmt.Errorf("backlite: close database: %w", cerr)
		}
	}()
	client, err := backlite.NewClient(backlite.ClientConfig{
		DB:           db,
		Logger:       p.logger,
		NumWorkers:   o.Workers,
		ReleaseAfter: backliteReleaseAfter,
	})
	if err != nil {
		return res, fmt.Errorf("backlite: %w", err)
	}
	if err := client.Install(); err != nil {
		return res, fmt.Errorf("backlite: install schema: %w", err)
	}
	st := &backliteState{db: db, n: o.Jobs}
	if left, err := st.left(ctx); err != nil {
		return res, err
	} else if left != 0 {
		return res, fmt.Errorf("backlite: the database holds %d tasks already", left)
	}
	rec := bench.NewRecorder(o.Jobs, w == bench.Latency)
	client.Register(backlite.NewQueue(func(_ context.Context, a jobArgs) error {
		rec.Record(a.Seq, a.At)
		return nil
	}))

	// The dispatcher runs until Stop, or until its context ends.
	dctx, cancelDispatcher := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelDispatcher()
	// Save returns the tasks' IDs; the run checks them.
	ids := make([]string, o.Jobs)
	r := &clientRun{
		peer: "backlite",
		o:    o,
		rec:  rec,
		st:   st,
		start: func(context.Context) error {
			client.Start(dctx)
			return nil
		},
		stop: func(ctx context.Context) error {
			if !client.Stop(ctx) {
				return errors.New("backlite: workers still busy at stop")
			}
			return nil
		},
		insert: func(ctx context.Context, a jobArgs) error {
			got, err := client.Add(a).Ctx(ctx).Save()
			if err == nil {
				ids[a.Seq] = got[0]
			}
			return err
		},
		insertMany: func(ctx context.Context, lo, hi int64) error {
			tasks := make([]backlite.Task, hi-lo)
			for i := range tasks {
				tasks[i] = jobArgs{Seq: lo + int64(i)}
			}
			got, err := client.Add(tasks...).Ctx(ctx).Save()
			if err == nil {
				copy(ids[lo:hi], got)
			}
			return err
		},
		idProblems: func() []string { return idCheck(ids) },
	}
	return r.run(ctx, w)
}

// backliteState reads backlite's task table. Without retention a task
// leaves the table when it succeeds, so the run's finished tasks are the
// ones no longer in it.
type backliteState struct {
	db *sql.DB
	n  int
}

func (s *backliteState) left(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM backlite_tasks").Scan(&n); err != nil {
		return 0, fmt.Errorf("backlite: count tasks: %w", err)
	}
	return n, nil
}

func (s *backliteState) finished(ctx context.Context) (int64, error) {
	left, err := s.left(ctx)
	return int64(s.n) - left, err
}

// counts names a task still in the table running when claimed, available
// otherwise, and the tasks gone completed; failed tasks would also leave
// the table, but then the handler ran more than once or the retained
// table holds them, and the check reports that.
func (s *backliteState) counts(ctx context.Context) ([]store.QueueStateCount, error) {
	var available, running, failed int64
	err := s.db.QueryRowContext(ctx, `SELECT
		coalesce(sum(claimed_at IS NULL), 0), coalesce(sum(claimed_at IS NOT NULL), 0),
		(SELECT count(*) FROM backlite_tasks_completed WHERE error IS NOT NULL)
		FROM backlite_tasks`).Scan(&available, &running, &failed)
	if err != nil {
		return nil, fmt.Errorf("backlite: count tasks: %w", err)
	}
	return []store.QueueStateCount{
		{Queue: backliteQueue, State: store.JobStateAvailable, Count: available},
		{Queue: backliteQueue, State: store.JobStateRunning, Count: running},
		{Queue: backliteQueue, State: store.JobStateDead, Count: failed},
		{Queue: backliteQueue, State: store.JobStateCompleted, Count: int64(s.n) - available - running - failed},
	}, nil
}
