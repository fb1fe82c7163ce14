package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/combine"
	"github.com/sortiehq/sortie/store"
)

// DefaultSchema is the schema sortie's tables live in unless Options.Schema
// names another.
const DefaultSchema = "sortie"

// Options configure a Store. A nil *Options means all defaults.
type Options struct {
	// Schema is the PostgreSQL schema holding sortie's tables; one database
	// can hold several. Defaults to "sortie".
	Schema string

	// Migrate brings the schema up to this version of sortie at Open,
	// creating it when missing. Otherwise Open refuses a schema that is
	// missing or older, and `sortie migrate` (or Migrate) must run first.
	// Defaults to false.
	Migrate bool

	// DisableListen turns off LISTEN/NOTIFY wake-ups: QueueWatch returns
	// store.ErrUnsupported and workers poll. Set it when connecting through
	// a transaction-mode pooler (PgBouncer pool_mode=transaction), where
	// LISTEN is silently lost. Enqueues still send NOTIFY, which is harmless
	// there. Defaults to false.
	DisableListen bool

	// MaxConns is the size of the pool Open creates, unless the URL sets
	// pool_max_conns. Ignored by New. Defaults to 16.
	MaxConns int32

	// WaitForServer is how long Open keeps trying to reach a server that
	// is not answering (refusing connections, starting up or shutting
	// down, as during a restart), retrying with backoff and logging once
	// when it starts waiting and once when the server answers. Other
	// errors (a bad URL, a refused password, a schema to migrate) fail at
	// once. Ignored by New. Defaults to 0: fail at once.
	WaitForServer time.Duration

	// ConnectTimeout bounds each connection attempt (TCP, TLS and the
	// server's answer to the startup message) when the URL sets no
	// connect_timeout (nor $PGCONNECT_TIMEOUT), so a server that accepts
	// and never answers fails Open with its address instead of hanging.
	// Defaults to 10 s.
	ConnectTimeout time.Duration

	// Logger receives the store's own reports (listener lost and back).
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// defaultConnectTimeout is Options.ConnectTimeout's default.
const defaultConnectTimeout = 10 * time.Second

// connConfig parses url for one connection, with o's connect timeout
// unless the URL sets its own.
func connConfig(url string, o *Options) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse connection string: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = o.ConnectTimeout
	}
	return cfg, nil
}

// Store is a store.Store on PostgreSQL. It is safe for concurrent use, and
// any number of processes may use one database.
type Store struct {
	pool     *pgxpool.Pool
	ownsPool bool
	schema   string
	q        *queries
	log      *slog.Logger
	channel  string // the NOTIFY channel of this schema
	listener *listener
	waits    *waiters
	combine  combine.Combiner[*enqueueReq]
	debounce *debouncer
	closed   atomic.Bool
	closeMu  sync.Mutex
	// conflicts counts statements and transactions run again after a
	// deadlock or serialization failure (retryConflicts, inTx).
	conflicts atomic.Int64
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at url (a postgres:// URL or key=value
// connection string), checks the schema (migrating it when opts.Migrate)
// and returns a Store owning its connection pool.
func Open(ctx context.Context, url string, opts *Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse connection string: %w", err)
	}
	o := withDefaults(opts)
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = o.ConnectTimeout
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = o.MaxConns
	}
	_, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]
	planMode := !set && cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
	if planMode {
		// sortie's statements take arrays and keys whose values do not
		// change the best plan: plan them once per connection, not per
		// execution (PostgreSQL would plan the first five times each, and
		// keeps planning an enqueue: half the single-enqueue rate). Only
		// statements prepared once per connection (pgx's default mode)
		// have plans to keep.
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	s, err := openWaiting(ctx, cfg, o)
	if err != nil && planMode && refusedStartupParam(err, "plan_cache_mode") {
		// A pooler (PgBouncer) refuses startup parameters it does not
		// track. Connect without it, and say how to keep the plans.
		delete(cfg.ConnConfig.RuntimeParams, "plan_cache_mode")
		o.Logger.Warn("pgstore: the server refused the startup parameter plan_cache_mode (a connection pooler?); "+
			"connecting without it, which makes enqueues plan every statement. Set it for the database role instead: "+
			"ALTER ROLE "+cfg.ConnConfig.User+" SET plan_cache_mode = force_generic_plan",
			slog.String("target", fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)))
		s, err = openPool(ctx, cfg, o)
	}
	if err != nil {
		return nil, err
	}
	s.ownsPool = true
	return s, nil
}

// openWaiting is openPool, tried again with backoff for up to
// o.WaitForServer while the server does not answer.
func openWaiting(ctx context.Context, cfg *pgxpool.Config, o Options) (*Store, error) {
	var s *Store
	target := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	err := waitForServer(ctx, &o, target, func() (err error) {
		s, err = openPool(ctx, cfg, o)
		return err
	})
	return s, err
}

// ErrServerWait is wrapped by the error of Open and Version when the server
// did not answer within Options.WaitForServer.
var ErrServerWait = errors.New("gave up waiting for the server")

// waitForServer runs try, and runs it again with backoff for up to
// o.WaitForServer while it fails because the server does not answer,
// logging once when it starts waiting and once when the server answers.
func waitForServer(ctx context.Context, o *Options, target string, try func() error) error {
	err := try()
	if err == nil || o.WaitForServer <= 0 || !unreachable(err) {
		return err
	}
	start := time.Now()
	o.Logger.WarnContext(ctx, "pgstore: server unreachable, waiting for it", slog.String("target", target),
		slog.Duration("wait", o.WaitForServer), slog.String("error", describe(err).Error()))
	wait, tries := 100*time.Millisecond, 1
	for err != nil && unreachable(err) {
		left := o.WaitForServer - time.Since(start)
		if left <= 0 {
			return fmt.Errorf("%w (%w after %s)", err, ErrServerWait, o.WaitForServer.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (stopped waiting for the server: %w)", err, ctx.Err())
		case <-time.After(min(wait, left)):
		}
		wait = min(2*wait, 2*time.Second)
		tries++
		err = try()
	}
	if err == nil {
		o.Logger.InfoContext(ctx, "pgstore: server reachable", slog.String("target", target),
			slog.Duration("waited", time.Since(start).Round(time.Millisecond)), slog.Int("tries", tries))
	}
	return err
}

// unreachable reports whether err means the server did not answer, as
// during a restart: the connection was refused or reset, or the server
// is starting up or shutting down.
func unreachable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "57P") // admin or crash shutdown, cannot connect now
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// openPool creates a pool from cfg and a Store on it, closing the pool if
// the Store cannot start.
func openPool(ctx context.Context, cfg *pgxpool.Config, o Options) (*Store, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	s, err := newStore(ctx, pool, o)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// refusedStartupParam reports whether err is a server refusing the startup
// parameter name, as PgBouncer does for parameters it does not track
// (unless told to ignore them).
func refusedStartupParam(err error, name string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "08P01" && strings.Contains(pe.Message, "unsupported startup parameter: "+name)
}

// New returns a Store using the application's pool, which the caller keeps
// and closes after the Store. The pool must not be a transaction-mode
// pooler unless opts.DisableListen is set.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Store, error) {
	return newStore(ctx, pool, withDefaults(opts))
}

func withDefaults(opts *Options) Options {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 16
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = defaultConnectTimeout
	}
	return o
}

func newStore(ctx context.Context, pool *pgxpool.Pool, o Options) (*Store, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect to %s: %w", connTarget(pool), describe(err))
	}
	defer conn.Release()
	if o.Migrate {
		if _, err := migrate(ctx, conn.Conn(), o.Schema); err != nil {
			return nil, fmt.Errorf("pgstore: migrate: %w", permissionHint(err))
		}
	} else {
		v, err := schemaVersion(ctx, conn, o.Schema)
		if err != nil {
			return nil, fmt.Errorf("pgstore: %w", permissionHint(err))
		}
		switch {
		case v > SchemaVersion:
			return nil, fmt.Errorf("pgstore: %w: schema %q has version %d, this sortie knows up to %d; upgrade sortie",
				store.ErrSchemaNewer, o.Schema, v, SchemaVersion)
		case v < SchemaVersion:
			return nil, fmt.Errorf("pgstore: schema %q is at version %d, this sortie needs %d: run `sortie migrate --store URL --schema %s` or set Options.Migrate",
				o.Schema, v, SchemaVersion, o.Schema)
		}
	}
	if err := checkPrivileges(ctx, conn.Conn(), o.Schema); err != nil {
		return nil, err
	}
	s := &Store{
		pool:    pool,
		schema:  o.Schema,
		q:       buildQueries(o.Schema),
		log:     o.Logger,
		channel: notifyChannel(o.Schema),
		waits:   newWaiters(),
	}
	s.combine.Config = combineConfig
	s.debounce = newDebouncer(clock.Real{}, s.sendNotify)
	if !o.DisableListen {
		s.listener = newListener(pool.Config().ConnConfig, s.channel, s.log)
	}
	return s, nil
}

// Migrate brings the schema at url up to SchemaVersion, creating it when
// missing; running it again does nothing. It refuses a schema written by a
// newer sortie with store.ErrSchemaNewer.
func Migrate(ctx context.Context, url string, opts *Options) (MigrateResult, error) {
	o := withDefaults(opts)
	cfg, err := connConfig(url, &o)
	if err != nil {
		return MigrateResult{}, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return MigrateResult{}, fmt.Errorf("pgstore: connect: %w", describe(err))
	}
	defer conn.Close(ctx)
	res, err := migrate(ctx, conn, o.Schema)
	if err != nil {
		return res, fmt.Errorf("pgstore: migrate: %w", permissionHint(err))
	}
	return res, nil
}

// Version returns the schema version of opts.Schema on the server at url
// without changing anything: 0 when the schema is missing or empty, an
// error wrapping store.ErrNotSortieDatabase when it holds other tables.
// `sortie migrate --check` uses it. It waits for the server as Open does
// (opts.WaitForServer).
func Version(ctx context.Context, url string, opts *Options) (int, error) {
	o := withDefaults(opts)
	cfg, err := connConfig(url, &o)
	if err != nil {
		return 0, err
	}
	var conn *pgx.Conn
	err = waitForServer(ctx, &o, "the server", func() (err error) {
		conn, err = pgx.ConnectConfig(ctx, cfg)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: connect: %w", describe(err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	v, err := schemaVersion(ctx, conn, o.Schema)
	if err != nil {
		return 0, fmt.Errorf("pgstore: %w", permissionHint(err))
	}
	return v, nil
}

// Close stops the listener and, for a Store made by Open, closes the pool.
// It is safe to call more than once.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	if s.listener != nil {
		s.listener.close()
	}
	s.debounce.flushes.Wait() // they see closed and send nothing
	s.waits.closeAll()
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// Pool returns the connection pool the Store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema holding the Store's tables.
func (s *Store) Schema() string { return s.schema }

// connTarget names the server of pool for messages, without the password.
func connTarget(pool *pgxpool.Pool) string {
	c := pool.Config().ConnConfig
	return fmt.Sprintf("%s:%d/%s as %s", c.Host, c.Port, c.Database, c.User)
}

// privilegeHint says what a role that lacks privileges needs.
const privilegeHint = "the database role lacks a privilege sortie needs (CREATE on the database to make the schema; USAGE and CREATE on the schema; SELECT, INSERT, UPDATE, DELETE on its tables; EXECUTE on its functions)"

// permissionHint explains the errors of a role that lacks privileges.
func permissionHint(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return fmt.Errorf("%w: %s", err, privilegeHint)
	}
	return err
}

// sqlMissingPrivileges lists the privileges on sortie's objects in schema
// $1 (tables and sequences $2, functions $3) that the role lacks, so that
// Open fails instead of every later call.
const sqlMissingPrivileges = `SELECT m FROM (
		SELECT c.relname AS o, format('%s on %s', p.priv, c.relname) AS m
		FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		CROSS JOIN LATERAL unnest(CASE
			WHEN c.relkind = 'S' THEN ARRAY['USAGE']
			WHEN c.relname = 'sortie_meta' THEN ARRAY['SELECT']
			ELSE ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE'] END) AS p(priv)
		WHERE n.nspname = $1 AND c.relname = ANY($2::text[])
			AND NOT CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, p.priv) ELSE has_table_privilege(c.oid, p.priv) END
		UNION ALL
		SELECT f.proname, format('EXECUTE on %s()', f.proname)
		FROM pg_catalog.pg_proc f
		JOIN pg_catalog.pg_namespace n ON n.oid = f.pronamespace
		WHERE n.nspname = $1 AND f.proname = ANY($3::text[]) AND NOT has_function_privilege(f.oid, 'EXECUTE')
	) x ORDER BY m`

// pinnedFunctions are the hot-path functions sortie's statements call;
// each pins its plans (planPins).
var pinnedFunctions = []string{"claim_jobs", "finish_jobs", "extend_leases", "claim_limited", "claim_partitioned",
	"partition_heads", "queue_next_at"}

// sortieFunctions are every function sortie's statements call: the pinned
// ones, and history_minute, an expression that SQL inlines (a SET clause
// would stop that).
var sortieFunctions = append(slices.Clip(pinnedFunctions), "history_minute")

// checkPrivileges returns an error naming the privileges on the tables,
// sequences and functions of schema that the role lacks.
func checkPrivileges(ctx context.Context, conn *pgx.Conn, schema string) error {
	names := []string{"job_id_seq", "claim_token_seq"}
	for t := range sortieTables {
		names = append(names, t)
	}
	rows, err := conn.Query(ctx, sqlMissingPrivileges, schema, names, sortieFunctions)
	if err != nil {
		return fmt.Errorf("pgstore: check privileges on schema %q: %w", schema, permissionHint(err))
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("pgstore: check privileges on schema %q: %w", schema, permissionHint(err))
	}
	if len(missing) > 0 {
		return fmt.Errorf("pgstore: permission denied to role %q in schema %q: it lacks %s; %s",
			conn.Config().User, schema, strings.Join(missing, ", "), privilegeHint)
	}
	return nil
}

// opErr wraps err from operation op, mapping a closed pool to
// store.ErrClosed.
func (s *Store) opErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() && !errors.Is(err, store.ErrClosed) {
		return fmt.Errorf("pgstore: %s: %w", op, store.ErrClosed)
	}
	if store.Plain(err) {
		return err
	}
	return fmt.Errorf("pgstore: %s: %w", op, describe(err))
}

// checkOpen returns store.ErrClosed after Close.
func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// retryable reports whether err is a transient conflict that running the
// transaction again resolves: a deadlock or a serialization failure.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// uniqueViolation reports whether err is a unique-index violation.
func uniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// pinnedTx begins a transaction whose statements are planned under
// planSettings (schema.go) for the rest of the transaction, set in the
// same round trip as BEGIN: the store's transactions touch the rows they
// name or read an index in order, whatever the statistics said when a
// connection first planned them.
var pinnedTx = pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL " + strings.Join(planSettings, "; SET LOCAL ")}

// retryConflicts runs fn, a statement outside a transaction, again (up to a
// few times) when PostgreSQL aborts it for a deadlock or serialization
// failure: a conflict between two statements is not an outage, and the
// caller sees it only when it persists.
func (s *Store) retryConflicts(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = fn(); !retryable(err) {
			return err
		}
		s.conflicts.Add(1)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * time.Millisecond):
		}
	}
	return err
}

// inTx runs fn in a transaction of its own, running it again (up to a few
// times) when PostgreSQL aborts it for a deadlock or serialization failure.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = pgx.BeginTxFunc(ctx, s.pool, pinnedTx, fn)
		if !retryable(err) {
			return err
		}
		s.conflicts.Add(1)
		time.Sleep(time.Duration(attempt+1) * time.Millisecond)
	}
	return err
}

// notifyChannel is the NOTIFY channel of schema: one per schema, the
// payload naming the queue.
func notifyChannel(schema string) string {
	ch := "sortie_" + schema
	if len(ch) > 63 {
		ch = ch[:63]
	}
	return ch
}
