package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sortiehq/sortie/internal/notify"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/ratelimit"
)

var _ store.Store = (*Store)(nil)

// Synchronous is how hard a commit waits for the disk.
type Synchronous int

// The synchronous modes of Options.Synchronous.
const (
	// SynchronousFull syncs the write-ahead log at every commit: a job whose
	// enqueue returned survives a power cut. The default.
	SynchronousFull Synchronous = iota
	// SynchronousNormal does not sync at commit. A committed job survives a
	// crash of the process, but the last commits before a power cut or an
	// operating-system crash may be lost (the database stays consistent).
	SynchronousNormal
)

// String returns "FULL" or "NORMAL".
func (s Synchronous) String() string {
	switch s {
	case SynchronousFull:
		return "FULL"
	case SynchronousNormal:
		return "NORMAL"
	}
	return "Synchronous(" + strconv.Itoa(int(s)) + ")"
}

// Options configure a Store. A nil *Options means all defaults; a zero field
// means that field's default.
type Options struct {
	// Synchronous is the durability of commits. Defaults to SynchronousFull.
	Synchronous Synchronous

	// RelaxedClaims, with SynchronousFull, commits transactions that hold
	// only claims, lease extensions, outcomes, rescues and prunes with
	// synchronous=NORMAL, without waiting for the disk. Enqueues and admin
	// changes (retry, cancel, delete) still wait for a full sync, and that
	// sync also makes every earlier commit durable, because the write-ahead
	// log is replayed in order. A power cut can lose only the relaxed commits
	// made since the last full one: such a job runs again, which
	// at-least-once delivery allows. Defaults to false.
	RelaxedClaims bool

	// BusyTimeout is how long a write waits for another process holding the
	// database's write lock before failing. Defaults to 5 seconds.
	BusyTimeout time.Duration

	// ReadConns is the number of read-only connections serving JobGet,
	// JobList, JobCounts and a short JobFetch's NextAt. Defaults to 4.
	ReadConns int

	// MaxPageCount, when positive, caps the database size in pages (PRAGMA
	// max_page_count; a page is 4096 bytes). A write that would grow past it
	// fails as if the disk were full. Defaults to 0: no cap.
	MaxPageCount int64

	// WALSizeLimit is the size in bytes the write-ahead log (the -wal file
	// beside the database) is kept under: the store copies the log into the
	// database every quarter of it and then restarts it from its
	// beginning. Only a read transaction held open for long (in this or
	// another process) can pin the log past the limit, or one write
	// larger than it (a batch of a hundred thousand jobs); the file is cut
	// back to the limit at the next restart. At least 1 MiB. Defaults to
	// DefaultWALSizeLimit, 64 MiB.
	WALSizeLimit int64
}

// withDefaults validates o and fills in defaults.
func (o *Options) withDefaults() (Options, error) {
	var v Options
	if o != nil {
		v = *o
	}
	switch v.Synchronous {
	case SynchronousFull, SynchronousNormal:
	default:
		return v, fmt.Errorf("sqlitestore: Options.Synchronous must be SynchronousFull or SynchronousNormal, got %d", int(v.Synchronous))
	}
	if v.BusyTimeout < 0 {
		return v, fmt.Errorf("sqlitestore: Options.BusyTimeout must not be negative, got %s", v.BusyTimeout)
	}
	if v.BusyTimeout == 0 {
		v.BusyTimeout = 5 * time.Second
	}
	if v.ReadConns < 0 {
		return v, fmt.Errorf("sqlitestore: Options.ReadConns must not be negative, got %d", v.ReadConns)
	}
	if v.ReadConns == 0 {
		v.ReadConns = 4
	}
	if v.MaxPageCount < 0 {
		return v, fmt.Errorf("sqlitestore: Options.MaxPageCount must not be negative, got %d", v.MaxPageCount)
	}
	if v.WALSizeLimit == 0 {
		v.WALSizeLimit = DefaultWALSizeLimit
	}
	if v.WALSizeLimit < minWALSizeLimit {
		return v, fmt.Errorf("sqlitestore: Options.WALSizeLimit must be at least %d (1 MiB), got %d", minWALSizeLimit, v.WALSizeLimit)
	}
	return v, nil
}

// Store is a store.Store on one SQLite file. It is safe for concurrent use.
// See the package documentation for its limits.
type Store struct {
	path string
	opts Options
	hub  notify.Hub
	jobs jobHub

	wdb *sql.DB // holds the one write connection
	w   *writer

	rdb   *sql.DB // read-only pool
	reads readStmts
	// waker holds one more read-only connection, for wake-ups from other
	// processes. pollWakes makes it poll even where file events work
	// (tests).
	waker     *waker
	pollWakes bool

	// prunePace sizes JobPrune's chunks.
	prunePace prunePacer

	closed atomic.Bool
}

// readStmts are the prepared statements of the read pool (database/sql
// prepares each on a connection the first time it runs there).
type readStmts struct {
	get, counts, countsQueue, nextRunAt, queueSettings *sql.Stmt
	history, latency                                   *sql.Stmt
}

// close closes the statements prepared so far.
func (r *readStmts) close() error {
	var errs []error
	for _, st := range []*sql.Stmt{r.get, r.counts, r.countsQueue, r.nextRunAt, r.queueSettings, r.history, r.latency} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// Open opens the sortie database at path with opts (nil means all
// defaults), creating it when it does not exist and migrating an older
// schema. The file must be a sortie database:
// a file holding other tables, or no SQLite database at all, returns an
// error wrapping store.ErrNotSortieDatabase; one from a newer sortie returns
// store.ErrSchemaNewer. The directory must be writable (SQLite keeps the
// -wal and -shm files beside the database).
func Open(path string, opts *Options) (*Store, error) {
	return open(path, opts, false)
}

// open is Open; pollWakes makes the store poll for other processes'
// commits instead of listening for file events (see waker).
func open(path string, opts *Options, pollWakes bool) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, errDirectory(path))
	}
	if err := checkWritable(abs); err != nil {
		return nil, err
	}
	s := &Store{path: abs, opts: o, pollWakes: pollWakes}
	// Setup and the writer goroutine run under a context of their own: no
	// caller's context may cut a group transaction short.
	ctx := context.Background()
	if err := s.openWriter(ctx); err != nil {
		_ = s.closeDBs()
		return nil, err
	}
	if err := s.openReaders(ctx); err != nil {
		_ = s.closeDBs()
		return nil, err
	}
	// A log left by a process that did not close the store (or by an older
	// sortie, which let it grow) goes into the database now.
	s.w.ckpt.truncate(ctx)
	s.w.waker = s.waker
	go s.w.ckpt.loop(ctx)
	go s.waker.loop(ctx)
	go s.w.loop(ctx)
	return s, nil
}

// errDirectory is the error of a database path that names a directory.
func errDirectory(path string) error {
	return fmt.Errorf("it is a directory, not a database file: give a file path such as %s", filepath.Join(path, "sortie.db"))
}

// checkWritable gives a clear error for a database file or directory this
// process cannot write, before SQLite reports it as "unable to open".
func checkWritable(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("sqlitestore: open %s: cannot open the database file for writing: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	return nil
}

// dsn returns the driver's name for the file with the given pragmas.
func (s *Store) dsn(pragmas ...string) string {
	u := url.URL{Scheme: "file", Path: s.path, OmitHost: true}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(s.opts.BusyTimeout.Milliseconds(), 10)+")")
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func (s *Store) openWriter(ctx context.Context) error {
	c, err := sqlite.NewConnector(s.dsn())
	if err != nil {
		return fmt.Errorf("sqlitestore: open %s: %w", s.path, err)
	}
	s.wdb = sql.OpenDB(c)
	s.wdb.SetMaxOpenConns(2) // the writer's and the checkpointer's
	s.wdb.SetConnMaxIdleTime(0)
	s.wdb.SetConnMaxLifetime(0)
	conn, err := s.wdb.Conn(ctx)
	if err != nil {
		return wrapOpenErr(s.path, err)
	}
	if err := s.setUpWriteConn(ctx, conn); err != nil {
		_ = conn.Close()
		return err
	}
	stmts, err := prepareWrite(ctx, conn)
	if err != nil {
		_ = stmts.close()
		_ = conn.Close()
		return wrapOpenErr(s.path, err)
	}
	// The writer waits for other processes' writes itself (writer.begin),
	// and the checkpointer for readers (checkpointAll).
	_, err = conn.ExecContext(ctx, `PRAGMA busy_timeout = 0`)
	var cconn *sql.Conn
	if err == nil {
		cconn, err = s.wdb.Conn(ctx)
	}
	if err == nil {
		_, err = cconn.ExecContext(ctx, `PRAGMA busy_timeout = 0`)
	}
	if err != nil {
		_ = stmts.close()
		_ = conn.Close()
		if cconn != nil {
			_ = cconn.Close()
		}
		return wrapOpenErr(s.path, err)
	}
	s.w = &writer{
		ckpt:        newCheckpointer(cconn, s.path, s.opts.WALSizeLimit),
		conn:        conn,
		busyTimeout: s.opts.BusyTimeout,
		stmts:       stmts,
		hub:         &s.hub,
		jobs:        &s.jobs,
		path:        s.path,

		queuesVersion: -1,
		fullSync:      s.opts.Synchronous == SynchronousFull,
		relaxed:       s.opts.RelaxedClaims,
		syncFull:      s.opts.Synchronous == SynchronousFull,
		wake:          make(chan struct{}, 1),
		exited:        make(chan struct{}),
	}
	return nil
}

// setUpWriteConn checks that the writer's connection holds a sortie
// database (or none yet), switches it to WAL with the store's pragmas and
// migrates it. The caller closes conn on an error.
func (s *Store) setUpWriteConn(ctx context.Context, conn *sql.Conn) error {
	// The schema check comes first: it is what fails on a file that is not
	// an SQLite database, before any pragma writes to it.
	if _, err := schemaVersion(ctx, conn, s.path); err != nil {
		return wrapOpenErr(s.path, err)
	}
	if err := checkIntegrity(ctx, conn, s.path); err != nil {
		return wrapOpenErr(s.path, err)
	}
	var mode string
	if err := conn.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode); err != nil {
		return wrapOpenErr(s.path, err)
	}
	if mode != "wal" {
		return fmt.Errorf("sqlitestore: open %s: cannot switch to WAL mode (journal_mode is %q)", s.path, mode)
	}
	// The checkpointer, not the commit, copies the log into the file; the
	// commit after a restart cuts the file back to the limit.
	setup := []string{sqlSyncFull, `PRAGMA foreign_keys = OFF`, `PRAGMA wal_autocheckpoint = 0`,
		`PRAGMA journal_size_limit = ` + strconv.FormatInt(s.opts.WALSizeLimit, 10)}
	if s.opts.Synchronous == SynchronousNormal {
		setup[0] = sqlSyncNormal
	}
	if s.opts.MaxPageCount > 0 {
		setup = append(setup, `PRAGMA max_page_count = `+strconv.FormatInt(s.opts.MaxPageCount, 10))
	}
	for _, q := range setup {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return wrapOpenErr(s.path, err)
		}
	}
	if err := migrate(ctx, conn, s.path); err != nil {
		return wrapOpenErr(s.path, err)
	}
	return nil
}

func (s *Store) openReaders(ctx context.Context) error {
	c, err := sqlite.NewConnector(s.dsn("query_only(1)"))
	if err != nil {
		return fmt.Errorf("sqlitestore: open %s: %w", s.path, err)
	}
	s.rdb = sql.OpenDB(c)
	// One more for the waker, which keeps its connection.
	s.rdb.SetMaxOpenConns(s.opts.ReadConns + 1)
	s.rdb.SetMaxIdleConns(s.opts.ReadConns + 1)
	s.rdb.SetConnMaxIdleTime(0)
	s.rdb.SetConnMaxLifetime(0)
	prep := func(q string) (*sql.Stmt, error) {
		st, err := s.rdb.PrepareContext(ctx, q)
		if err != nil {
			return nil, wrapOpenErr(s.path, fmt.Errorf("prepare %q: %w", q, err))
		}
		return st, nil
	}
	if s.reads.get, err = prep(sqlGetAny); err != nil {
		return err
	}
	if s.reads.counts, err = prep(sqlCounts); err != nil {
		return err
	}
	if s.reads.countsQueue, err = prep(sqlCountsQueue); err != nil {
		return err
	}
	if s.reads.nextRunAt, err = prep(sqlNextRunAt); err != nil {
		return err
	}
	if s.reads.queueSettings, err = prep(sqlQueueSettings); err != nil {
		return err
	}
	if s.reads.history, err = prep(sqlHistory); err != nil {
		return err
	}
	if s.reads.latency, err = prep(sqlLatency); err != nil {
		return err
	}
	conn, err := s.rdb.Conn(ctx)
	if err != nil {
		return wrapOpenErr(s.path, err)
	}
	if s.waker, err = newWaker(ctx, &s.hub, conn, s.path+"-wal", s.pollWakes); err != nil {
		_ = conn.Close()
		return wrapOpenErr(s.path, err)
	}
	return nil
}

// Close waits for the writes already queued, copies the write-ahead log
// into the database and truncates it (unless another process is reading or
// writing the file), then closes the database. Calls made after Close
// return store.ErrClosed. Close is safe to call more than once.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.w.close()
	s.w.ckpt.close()
	s.waker.stopLoop()
	s.w.ckpt.truncate(context.Background())
	return s.closeDBs()
}

func (s *Store) closeDBs() error {
	var errs []error
	if s.w != nil {
		errs = append(errs, s.w.stmts.close(), s.w.conn.Close(), s.w.ckpt.conn.Close())
	}
	if s.waker != nil {
		errs = append(errs, s.waker.close())
	}
	if s.rdb != nil {
		errs = append(errs, s.reads.close(), s.rdb.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlitestore: close %s: %w", s.path, err)
	}
	return nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// do runs a write request through the writer.
func (s *Store) do(ctx context.Context, r *request) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return s.w.do(ctx, r)
}

// readErr maps an error of the read pool.
func (s *Store) readErr(op string, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("sqlitestore: %s: %w", op, store.ErrClosed)
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, wrapRunErr(s.path, err))
}

// opErr wraps the error of a write method.
func opErr(op string, err error) error {
	if store.Plain(err) {
		return err
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}

// sqliteCode returns the primary SQLite result code in err, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

// wrapErr explains the SQLite errors a caller can act on, naming the file.
func wrapErr(path string, err error) error {
	if _, ok := errors.AsType[*corruptError](err); ok {
		return err
	}
	switch sqliteCode(err) {
	case sqlite3.SQLITE_FULL:
		return store.FullError(path+": no room to write (delete or prune finished jobs, or free disk space)", err)
	case sqlite3.SQLITE_READONLY:
		return fmt.Errorf("%s: database is read-only: %w", path, err)
	case sqlite3.SQLITE_BUSY:
		return fmt.Errorf("%s: database is locked by another connection past the busy timeout: %w", path, err)
	case sqlite3.SQLITE_CANTOPEN:
		return fmt.Errorf("%s: cannot open the database or its -wal/-shm files (is the directory writable?): %w", path, err)
	case sqlite3.SQLITE_NOTADB:
		return fmt.Errorf("%s: %w: the file is not an SQLite database (%w)", path, store.ErrNotSortieDatabase, err)
	case sqlite3.SQLITE_CORRUPT:
		return &corruptError{path: path, err: err}
	case sqlite3.SQLITE_IOERR:
		return fmt.Errorf("%s: disk I/O error: %w", path, err)
	}
	return err
}

// wrapRunErr is wrapErr for the errors of an open store: there a file
// that is not a database any more (SQLITE_NOTADB) was damaged too.
func wrapRunErr(path string, err error) error {
	if _, ok := errors.AsType[*corruptError](err); !ok && sqliteCode(err) == sqlite3.SQLITE_NOTADB {
		return &corruptError{path: path, err: err}
	}
	return wrapErr(path, err)
}

// corruptError is SQLite finding the database file damaged. It wraps
// store.ErrCorrupt and the driver's error.
type corruptError struct {
	path string
	err  error
}

func (e *corruptError) Error() string {
	return fmt.Sprintf("%s is corrupt: %v; restore it from a backup", e.path, e.err)
}

func (e *corruptError) Unwrap() []error { return []error{store.ErrCorrupt, e.err} }

// wrapOpenErr wraps an error of Open.
func wrapOpenErr(path string, err error) error {
	if errors.Is(err, store.ErrNotSortieDatabase) || errors.Is(err, store.ErrSchemaNewer) {
		return err
	}
	if err = wrapErr(path, err); errors.Is(err, store.ErrCorrupt) {
		return fmt.Errorf("sqlitestore: %w", err) // "PATH is corrupt: ..."
	}
	return fmt.Errorf("sqlitestore: open %w", err)
}

// JobGet returns one job with its error history, or store.ErrNotFound.
func (s *Store) JobGet(ctx context.Context, p *store.JobGetParams) (*store.JobRow, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	j, err := scanJob(s.reads.get.QueryRowContext(ctx, p.ID))
	if errNoRows(err) {
		return nil, fmt.Errorf("sqlitestore: get job %d: %w", p.ID, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readErr(fmt.Sprintf("get job %d", p.ID), err)
	}
	if err := withSteps(ctx, s.rdb, []*store.JobRow{j}); err != nil {
		return nil, s.readErr(fmt.Sprintf("get job %d", p.ID), err)
	}
	return j, nil
}

// JobCounts returns the number of jobs per queue and state from counters
// kept in the same transaction as every change, ordered by queue and then
// state in life-cycle order.
func (s *Store) JobCounts(ctx context.Context, p *store.JobCountsParams) ([]store.QueueStateCount, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	var rows *sql.Rows
	var err error
	if p.Queue != "" {
		rows, err = s.reads.countsQueue.QueryContext(ctx, p.Queue)
	} else {
		rows, err = s.reads.counts.QueryContext(ctx)
	}
	if err != nil {
		return nil, s.readErr("count jobs", err)
	}
	defer rows.Close()
	var out []store.QueueStateCount
	for rows.Next() {
		var c store.QueueStateCount
		var state string
		if err := rows.Scan(&c.Queue, &state, &c.Count); err != nil {
			return nil, s.readErr("count jobs", err)
		}
		c.State = store.JobState(state)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("count jobs", err)
	}
	slices.SortFunc(out, func(a, b store.QueueStateCount) int {
		if c := strings.Compare(a.Queue, b.Queue); c != 0 {
			return c
		}
		return slices.Index(store.JobStates, a.State) - slices.Index(store.JobStates, b.State)
	})
	return out, nil
}

// nextAt returns a short fetch's NextAt (see store.Store.JobFetch): the
// earliest RunAt among the scheduled and retrying jobs of queue, or the
// time the queue's RateLimit next allows a start when that is earlier and
// the limit holds back available jobs at now.
func (s *Store) nextAt(ctx context.Context, queue string, now time.Time) (time.Time, error) {
	var v sql.NullInt64
	if err := s.reads.nextRunAt.QueryRowContext(ctx, queue).Scan(&v); err != nil {
		return time.Time{}, fmt.Errorf("next run time: %w", err)
	}
	next := fromNullMicros(v)
	free, err := s.rateFreeAt(ctx, queue, micros(now))
	if err != nil {
		return time.Time{}, fmt.Errorf("next run time: %w", err)
	}
	if !free.IsZero() && (next.IsZero() || free.Before(next)) {
		next = free
	}
	return next, nil
}

// rateFreeAt returns when the rate limit of queue next allows a start, if it
// holds back available jobs at now; the zero time otherwise. A queue without
// a rate limit costs one primary-key probe.
func (s *Store) rateFreeAt(ctx context.Context, queue string, now int64) (time.Time, error) {
	var settings sql.NullString
	err := s.reads.queueSettings.QueryRowContext(ctx, queue).Scan(&settings)
	if errNoRows(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	qs, err := decodeSettings(settings)
	if err != nil || qs.RateLimit <= 0 {
		return time.Time{}, err
	}
	from := now - qs.RatePeriod.Microseconds()
	var started int64
	if err := s.rdb.QueryRowContext(ctx, sqlRateCount, queue, "", from).Scan(&started); err != nil {
		return time.Time{}, err
	}
	if started < int64(qs.RateLimit) {
		return time.Time{}, nil
	}
	var waiting bool
	if err := s.rdb.QueryRowContext(ctx, sqlHasAvailable, queue, now).Scan(&waiting); err != nil || !waiting {
		return time.Time{}, err
	}
	return s.rateFree(ctx, queue, ratelimit.Queue(qs), from)
}

// rateFree returns when the queue-wide window w, full at the time its
// window starts from, next allows a start (ratelimit.Window.FreeAt).
func (s *Store) rateFree(ctx context.Context, queue string, w ratelimit.Window, from int64) (time.Time, error) {
	rows, err := s.rdb.QueryContext(ctx, sqlRateStarts, queue, "", from)
	if err != nil {
		return time.Time{}, err
	}
	defer rows.Close()
	var starts []ratelimit.Start
	for rows.Next() {
		var at, n int64
		if err := rows.Scan(&at, &n); err != nil {
			return time.Time{}, err
		}
		starts = append(starts, ratelimit.Start{At: fromMicros(at), N: n})
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, err
	}
	return w.FreeAt(starts), nil
}
