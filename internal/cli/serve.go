package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/httpapi"
	"github.com/sortiehq/sortie/store"
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
first (sortie migrate), or pass --migrate. On Redis (7 or later, with
maxmemory-policy noeviction) serve loads sortie's Functions library as it
starts; the URL's ?prefix=NAME chooses the key prefix (default sortie).

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
	fs := flagSet("serve", "[--store PATH.db|postgres://URL|redis://URL] [--addr HOST:PORT] [--token TOKEN]", serveDescription)
	fs.StringVar(&storeFlag, "store", "", "the `store`: sqlite:PATH or PATH.db, created when missing, a postgres:// URL,\nor a redis:// URL (default $"+storeEnv+", else "+defaultAdminStore+")")
	fs.StringVar(&schema, "schema", "", schemaFlagHelp)
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
	if wait < 0 {
		return usageError(e, fs, "--wait-for-store must not be negative, got %s", wait)
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, nil))
	// LISTEN on: waiting fetches wake on enqueues.
	st, what, err := openStore(ctx, &openOpts{store: storeOrDefault(storeFlag, defaultAdminStore), schema: schema,
		createFile: true, migrate: migrate, wait: wait, logger: logger})
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer func() { _ = st.Close() }()
	stopping := make(chan struct{})
	opts := &httpapi.Options{Tokens: tokens, MaxBodyBytes: maxBody, Logger: logger, Stopping: stopping}
	if err := serve(ctx, e, st, what, addr, opts, stopping, logger); err != nil {
		fmt.Fprintf(e.stderr, "sortie serve: %v\n", err)
		return exitError
	}
	return exitOK
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
