package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/auth"
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
give tokens. Named tokens with scopes come from --tokens-file (read again
when the file changes, and on SIGHUP: rotation without a restart) and
$SORTIE_TOKENS, one per line, NAME SCOPES SECRET:

	ops        admin         <secret>   # everything, the dashboard's actions
	dashboard  read          <secret>   # GET endpoints, /metrics, the pages
	billing    enqueue       <secret>   # POST /api/v1/jobs
	worker-eu  work          <secret>   # fetch, heartbeat, report outcomes

--token (or $SORTIE_TOKEN, several separated by commas) adds tokens with
every scope. API requests send Authorization: Bearer SECRET; the dashboard
asks for a read or admin token once. An address that sends ten tokens that
are not accepted in a row gets 429, then one more try every 6 seconds.

GET /metrics serves Prometheus metrics (--metrics-addr moves it to an
address of its own). Logs go to stderr, a line per API request and per job
a remote worker starts or finishes (--log-format json, --log-level warn to
quiet them). --tls-cert and --tls-key serve HTTPS. SIGINT or SIGTERM stops
it gracefully, and so does a stop command for its own process (sortie
processes --stop ID; its own API and dashboard refuse to stop it).`

// Environment variables serve reads.
const (
	// tokenEnv holds plain tokens (every scope), separated by commas.
	tokenEnv = "SORTIE_TOKEN"
	// tokensEnv holds named tokens with scopes, in the token file's format
	// (lines, or entries separated by semicolons).
	tokensEnv = "SORTIE_TOKENS"
)

// serveShutdown bounds a graceful stop: requests in flight (a long-poll
// fetch included) get this long to finish.
const serveShutdown = 10 * time.Second

// serveConfig is serve's command line.
type serveConfig struct {
	store, schema, addr, token, tokensFile string
	tlsCert, tlsKey                        string
	metricsAddr, logFormat, logLevel       string
	migrate, metrics                       bool
	maxBody                                int64
	wait                                   time.Duration
	// tls is loaded from tlsCert and tlsKey before the store is opened.
	tls *tls.Config
}

func runServe(ctx context.Context, e *env, args []string) int {
	var (
		c   serveConfig
		err error
	)
	fs := flagSet("serve", "[--store PATH.db|postgres://URL|redis://URL] [--addr HOST:PORT] [--tokens-file FILE]", serveDescription)
	fs.StringVar(&c.store, "store", "", "the `store`: sqlite:PATH or PATH.db, created when missing, a postgres:// URL,\nor a redis:// URL (default $"+storeEnv+", else "+defaultAdminStore+")")
	fs.StringVar(&c.schema, "schema", "", schemaFlagHelp)
	fs.BoolVar(&c.migrate, "migrate", false, "PostgreSQL: create or upgrade the schema at start (SQLite files always are)")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "the `address` to listen on")
	fs.StringVar(&c.tokensFile, "tokens-file", "", "a `file` of named tokens with scopes, one per line: NAME SCOPES SECRET\n(scopes: enqueue, work, read, admin); read again when it changes and on SIGHUP")
	fs.StringVar(&c.token, "token", "", "a bearer `token` with every scope; several separated by commas (default $"+tokenEnv+");\nvisible to other users in ps: prefer --tokens-file or $"+tokensEnv)
	fs.StringVar(&c.tlsCert, "tls-cert", "", "serve HTTPS with this certificate `file` (PEM, with its chain); needs --tls-key")
	fs.StringVar(&c.tlsKey, "tls-key", "", "the private key `file` (PEM) of --tls-cert")
	fs.BoolVar(&c.metrics, "metrics", true, "serve Prometheus metrics at GET /metrics (tokens with the read scope)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve /metrics on this `address` instead of --addr (same tokens)")
	fs.StringVar(&c.logFormat, "log-format", "text", "log `format`: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "the least `level` logged: debug, info (a line per request and per remote job), warn or error")
	fs.Int64Var(&c.maxBody, "max-body", 1<<20, "the largest request body, in `bytes`")
	fs.DurationVar(&c.wait, "wait-for-store", 0, "keep trying this `long` (e.g. 60s) to reach a PostgreSQL or Redis server that is down, restarting\nor still loading its data, with backoff, before giving up (default: give up at once;\nSQLite and memory stores have no server to wait for)")
	if code := parseFlags(e, fs, args); code >= 0 {
		return code
	}
	if msg := c.check(); msg != "" {
		return usageError(e, fs, "%s", msg)
	}
	logger := newLogger(e.stderr, c.logFormat, c.logLevel)
	if c.tls, err = c.tlsConfig(); err != nil {
		return usageError(e, fs, "%v", err)
	}
	keys, watcher, err := c.keyring(logger)
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	if keys == nil && !isLoopback(hostOf(c.addr)) {
		return usageError(e, fs, "--addr %s without a token would let anyone who reaches it enqueue, cancel and delete jobs: give --tokens-file (or $%s, or --token), or listen on 127.0.0.1", c.addr, tokensEnv)
	}
	// LISTEN on: waiting fetches wake on enqueues.
	oo := &openOpts{store: storeOrDefault(c.store, defaultAdminStore), schema: c.schema,
		createFile: true, migrate: c.migrate, wait: c.wait, logger: logger}
	if _, err := checkStoreFlags(oo); err != nil {
		return adminFail(e, fs, err)
	}
	// The addresses before the store: a busy port fails before the store
	// is opened, so it leaves no new SQLite file behind.
	ls, err := c.listen()
	if err != nil {
		fmt.Fprintf(e.stderr, "sortie serve: %v\n", err)
		return exitError
	}
	if c.wait > 0 {
		serveWaiting(ctx, ls, c.wait, logger)
	}
	st, what, err := openStore(ctx, oo)
	if err != nil {
		closeAll(ls)
		return adminFail(e, fs, err)
	}
	defer func() { _ = st.Close() }()
	if watcher != nil {
		stopWatch := watchTokens(ctx, watcher)
		defer stopWatch()
	}
	stopping := make(chan struct{})
	opts := &httpapi.Options{Keyring: keys, Throttle: &auth.Throttle{}, MaxBodyBytes: c.maxBody, Logger: logger,
		RequestLog: logger, Stopping: stopping}
	if err := serve(ctx, e, st, what, &c, ls, opts, stopping, logger); err != nil {
		fmt.Fprintf(e.stderr, "sortie serve: %v\n", err)
		return exitError
	}
	return exitOK
}

// check returns what is wrong with the flags, or "".
func (c *serveConfig) check() string {
	if _, _, err := net.SplitHostPort(c.addr); err != nil {
		return fmt.Sprintf("--addr %q: %v", c.addr, err)
	}
	if c.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.metricsAddr); err != nil {
			return fmt.Sprintf("--metrics-addr %q: %v", c.metricsAddr, err)
		}
		if !c.metrics {
			return "--metrics-addr with --metrics=false: choose one"
		}
	}
	switch {
	case c.maxBody < 1024:
		return fmt.Sprintf("--max-body must be at least 1024 bytes, got %d", c.maxBody)
	case c.wait < 0:
		return fmt.Sprintf("--wait-for-store must not be negative, got %s", c.wait)
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return "--tls-cert and --tls-key go together: give both or neither"
	case c.logFormat != "text" && c.logFormat != "json":
		return fmt.Sprintf("--log-format must be text or json, got %q", c.logFormat)
	}
	if _, ok := logLevels[c.logLevel]; !ok {
		return fmt.Sprintf("--log-level must be debug, info, warn or error, got %q", c.logLevel)
	}
	return ""
}

// logLevels are the --log-level values.
var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// newLogger returns serve's logger (flags already checked).
func newLogger(w io.Writer, format, level string) *slog.Logger {
	o := &slog.HandlerOptions{Level: logLevels[level]}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// keyring returns the tokens of the flags and the environment (nil when
// there are none) and, with --tokens-file, the watcher that reloads it.
func (c *serveConfig) keyring(logger *slog.Logger) (*auth.Keyring, *auth.Watcher, error) {
	var base []auth.Token
	plain := c.token
	if plain == "" {
		plain = os.Getenv(tokenEnv)
	}
	for t := range strings.SplitSeq(plain, ",") {
		if t = strings.TrimSpace(t); t != "" {
			base = append(base, auth.Token{Name: fmt.Sprintf("token-%d", len(base)+1), Secret: t, Scopes: []auth.Scope{auth.ScopeAdmin}})
		}
	}
	if env := os.Getenv(tokensEnv); env != "" {
		named, err := auth.Parse("$"+tokensEnv, strings.ReplaceAll(env, ";", "\n"))
		if err != nil {
			return nil, nil, err
		}
		base = append(base, named...)
	}
	if c.tokensFile == "" {
		if len(base) == 0 {
			return nil, nil, nil
		}
		return auth.NewKeyring(base), nil, nil
	}
	keys := auth.NewKeyring(nil)
	w := auth.NewWatcher(c.tokensFile, keys, base, logger)
	if err := w.Load(); err != nil {
		return nil, nil, fmt.Errorf("--tokens-file: %w", err)
	}
	return keys, w, nil
}

// watchTokens runs w until the returned function is called, and reloads
// it on SIGHUP.
func watchTokens(ctx context.Context, w *auth.Watcher) func() {
	ctx, cancel := context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				w.Reload()
			}
		}
	}()
	go w.Run(ctx)
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}

// hostOf is the host of a checked HOST:PORT.
func hostOf(addr string) string {
	host, _, _ := net.SplitHostPort(addr)
	return host
}

// serve runs the API on the listeners ls (c.listen's) until ctx ends, with
// a client that rescues and prunes. It closes ls.
func serve(ctx context.Context, e *env, st store.Store, what string, c *serveConfig, ls []*listener, opts *httpapi.Options, stopping chan struct{}, logger *slog.Logger) error {
	client, err := sortie.NewClient(st, &sortie.Config{Logger: logger})
	if err == nil {
		err = client.Start(ctx)
	}
	if err != nil {
		closeAll(ls)
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serveShutdown)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()
	// A stop command for this server's client (sortie processes --stop, or
	// another server's API: its own refuses) stops the whole server, as
	// SIGTERM does, rather than leave it answering without rescue and
	// retention.
	ctx, stopServing := context.WithCancel(ctx)
	watched := make(chan struct{})
	defer func() { stopServing(); <-watched }()
	go func() {
		defer close(watched)
		select {
		case <-client.StopRequested():
			logger.Warn("a stop command reached this server's client: shutting down", slog.String("client_id", client.ID()))
			stopServing()
		case <-ctx.Done():
		}
	}()
	dash := web.New(client, &web.Options{Keyring: opts.Keyring, Throttle: opts.Throttle, Logger: logger})
	defer dash.Close()
	mux := http.NewServeMux()
	mux.Handle("/api/", httpapi.New(client, opts))
	mux.Handle("/", dash)
	ls[0].h = mux
	if c.metrics {
		m := metricsHandler(client, logger)
		defer m.close()
		h := httpapi.Protect(m, auth.ScopeRead, opts)
		if c.metricsAddr == "" {
			mux.Handle("GET /metrics", h)
		} else {
			ls[1].h = h
		}
	}
	return runListeners(ctx, e, ls, c, what, stopping, logger)
}

// isLoopback reports whether host names only this machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
