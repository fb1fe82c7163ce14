package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/httpapi"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
	"github.com/sortiehq/sortie/web"
)

const serveDescription = `
Serve runs sortie's dashboard (at /) and HTTP API (JSON under /api/v1) on a
store. The dashboard shows the queues and jobs and retries, cancels and
deletes jobs and pauses queues. Through the API, programs in any language
enqueue jobs, inspect and administer them, and run them as remote workers
(fetch, then complete, fail, snooze, release or heartbeat, one job a request
or many reports in one). It also rescues the jobs
of workers that died and prunes finished jobs past their retention.

The store defaults to sortie.db in the working directory, created when
missing: one file, no other server. A PostgreSQL schema must be migrated
first (sortie migrate), or pass --migrate.

Without a token it listens on loopback only; to listen on other addresses,
give --token (or $SORTIE_TOKEN, several separated by commas): API requests
send Authorization: Bearer TOKEN, and the dashboard asks for it once. SIGINT
or SIGTERM stops it gracefully.`

// tokenEnv names the environment variable serve reads its tokens from.
const tokenEnv = "SORTIE_TOKEN"

// serveShutdown bounds a graceful stop: requests in flight (a long-poll
// fetch included) get this long to finish.
const serveShutdown = 10 * time.Second

func runServe(ctx context.Context, e *env, args []string) int {
	var (
		storeFlag, schema, addr, token string
		migrate                        bool
		maxBody                        int64
		wait                           time.Duration
	)
	fs := flagSet("serve", "[--store PATH.db|postgres://URL] [--addr HOST:PORT] [--token TOKEN]", serveDescription)
	fs.StringVar(&storeFlag, "store", "", "the `store`: sqlite:PATH or PATH.db, created when missing, or a postgres:// URL\n(default $"+storeEnv+", else "+defaultAdminStore+")")
	fs.StringVar(&schema, "schema", "", "PostgreSQL `schema` holding sortie's tables (default sortie)")
	fs.BoolVar(&migrate, "migrate", false, "PostgreSQL: create or upgrade the schema at start (SQLite files always are)")
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "the `address` to listen on")
	fs.StringVar(&token, "token", "", "the bearer `token` requests must carry; several separated by commas (default $"+tokenEnv+")")
	fs.Int64Var(&maxBody, "max-body", 1<<20, "the largest request body, in `bytes`")
	fs.DurationVar(&wait, "wait-for-store", 0, "PostgreSQL: keep trying this `long` (e.g. 60s) to reach a server that is down or restarting,\nwith backoff, before giving up (default: give up at once)")
	if code := parseFlags(e, fs, args); code >= 0 {
		return code
	}
	if token == "" {
		token = os.Getenv(tokenEnv)
	}
	var tokens []string
	for t := range strings.SplitSeq(token, ",") {
		if t = strings.TrimSpace(t); t != "" {
			tokens = append(tokens, t)
		}
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError(e, fs, "--addr %q: %v", addr, err)
	}
	if len(tokens) == 0 && !isLoopback(host) {
		return usageError(e, fs, "--addr %s without a token would let anyone who reaches it enqueue, cancel and delete jobs: give --token (or $%s), or listen on 127.0.0.1", addr, tokenEnv)
	}
	if maxBody < 1024 {
		return usageError(e, fs, "--max-body must be at least 1024 bytes, got %d", maxBody)
	}
	spec, err := parseStore(storeOrDefault(storeFlag, defaultAdminStore))
	if err != nil {
		return usageError(e, fs, "--store: %v", err)
	}
	if spec.kind != storePostgres && (schema != "" || migrate || wait != 0) {
		return usageError(e, fs, "--schema, --migrate and --wait-for-store apply to postgres stores only")
	}
	if wait < 0 {
		return usageError(e, fs, "--wait-for-store must not be negative, got %s", wait)
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, nil))
	st, what, err := openServeStore(ctx, spec, schema, migrate, wait, logger)
	if err != nil {
		var u usageErr
		if errors.As(err, &u) {
			return usageError(e, fs, "%v", u.err)
		}
		fmt.Fprintf(e.stderr, "sortie serve: %v\n", err)
		return exitError
	}
	defer func() {
		if c, ok := st.(io.Closer); ok {
			_ = c.Close()
		}
	}()
	stopping := make(chan struct{})
	opts := &httpapi.Options{Tokens: tokens, MaxBodyBytes: maxBody, Logger: logger, Stopping: stopping}
	if err := serve(ctx, e, st, what, addr, opts, stopping, logger); err != nil {
		fmt.Fprintf(e.stderr, "sortie serve: %v\n", err)
		return exitError
	}
	return exitOK
}

// openServeStore opens the store serve runs on, and says which it is.
func openServeStore(ctx context.Context, spec storeSpec, schema string, migrate bool, wait time.Duration, logger *slog.Logger) (store.Store, string, error) {
	switch spec.kind {
	case storeSQLite:
		if spec.path == "" {
			return nil, "", usageErr{errors.New("--store sqlite names a temporary database, gone when serve stops: give a file, sqlite:PATH")}
		}
		v, err := sqliteSchemaVersion(ctx, spec.path)
		if err != nil {
			return nil, "", explainStoreErr(err, "give --store")
		}
		st, err := sqlitestore.Open(spec.path, nil)
		if err != nil {
			return nil, "", explainStoreErr(err, "give --store")
		}
		if v < sqlitestore.SchemaVersion {
			logger.Info("sqlite database migrated", "path", spec.path, "from", v, "to", sqlitestore.SchemaVersion)
		}
		return st, "sqlite database " + spec.path, nil
	case storePostgres:
		if _, err := pgconn.ParseConfig(spec.dsn); err != nil {
			return nil, "", usageErr{err}
		}
		if schema == "" {
			schema = pgstore.DefaultSchema
		}
		// LISTEN on: waiting fetches wake on enqueues.
		opts := &pgstore.Options{Schema: schema, Migrate: migrate, Logger: logger, WaitForServer: wait}
		if !migrate {
			st, err := openPostgres(ctx, spec.dsn, opts)
			if errors.Is(err, errNeedsMigrate) {
				return nil, "", fmt.Errorf("%w (or pass --migrate)", err)
			}
			if err != nil {
				return nil, "", err
			}
			return st, "schema " + schema, nil
		}
		st, err := pgstore.Open(ctx, spec.dsn, opts)
		if err != nil {
			return nil, "", explainPostgresErr(err, spec.dsn)
		}
		return st, "schema " + schema, nil
	}
	return nil, "", usageErr{fmt.Errorf("--store %s holds no jobs between runs: give a sqlite file or a postgres:// URL", spec.kind)}
}

// serve runs the API on addr until ctx ends, with a client that rescues
// and prunes.
func serve(ctx context.Context, e *env, st store.Store, what, addr string, opts *httpapi.Options, stopping chan struct{}, logger *slog.Logger) error {
	client, err := sortie.NewClient(st, &sortie.Config{Logger: logger})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serveShutdown)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	dash := web.New(client, &web.Options{Tokens: opts.Tokens, Logger: logger})
	defer dash.Close()
	mux := http.NewServeMux()
	mux.Handle("/api/", httpapi.New(client, opts))
	mux.Handle("/", dash)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	fmt.Fprintf(e.stdout, "sortie serve: dashboard on http://%s/, API on http://%s/api/v1, %s\n", ln.Addr(), ln.Addr(), what)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	close(stopping) // long-polling fetches answer now
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serveShutdown)
	defer cancel()
	if err := srv.Shutdown(stopCtx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("stop: %w", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	fmt.Fprintln(e.stdout, "sortie serve: stopped")
	return nil
}

// isLoopback reports whether host names only this machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
