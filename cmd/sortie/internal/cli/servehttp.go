package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/metrics"
)

// listener is one address serve answers on.
type listener struct {
	flag, addr string // the flag that gave addr: --addr or --metrics-addr
	h          http.Handler
	srv        *http.Server
	ln         net.Listener
	// now is the handler srv serves: waitingHandler's until the store is
	// open, then h.
	now    atomic.Pointer[http.Handler]
	served chan error // Serve's end
}

// start serves l with h, from now until its server is shut down; set
// changes the handler.
func (l *listener) start(ctx context.Context, h http.Handler, logger *slog.Logger) {
	l.set(h)
	l.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*l.now.Load()).ServeHTTP(w, r) }),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	l.served = make(chan error, 1)
	go func() { l.served <- l.srv.Serve(l.ln) }()
}

// set makes h the handler of l's requests from now on.
func (l *listener) set(h http.Handler) { l.now.Store(&h) }

// serveWaiting serves ls with waitingHandler while serve waits for its
// store (--wait-for-store): a health probe then gets its answer, 503,
// instead of a connection that hangs. runListeners serves them on.
func serveWaiting(ctx context.Context, ls []*listener, wait time.Duration, logger *slog.Logger) {
	h := waitingHandler(wait)
	for _, l := range ls {
		l.start(ctx, h, logger)
	}
}

// waitingHandler answers every request with 503 and Retry-After, saying
// that serve is starting and may wait for its store: in JSON under /api/,
// as the API's errors are, else in plain text. No token is needed to be
// told so; nothing else is answered.
func waitingHandler(wait time.Duration) http.Handler {
	msg := fmt.Sprintf("sortie serve is starting: it waits up to %s (--wait-for-store) for its store to answer; try again shortly", wait)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		if !strings.HasPrefix(r.URL.Path, "/api/") {
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
	})
}

// listen binds serve's addresses: --addr first, then --metrics-addr when
// given. A busy port or an address not of this machine fails here, naming
// the flag, before anything else is done.
func (c *serveConfig) listen() ([]*listener, error) {
	ls := []*listener{{flag: "--addr", addr: c.addr}}
	if c.metrics && c.metricsAddr != "" {
		ls = append(ls, &listener{flag: "--metrics-addr", addr: c.metricsAddr})
	}
	for _, l := range ls {
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			closeAll(ls)
			var oe *net.OpError
			if errors.As(err, &oe) {
				err = oe.Err
			}
			return nil, fmt.Errorf("%s %s: %w", l.flag, l.addr, err)
		}
		if c.tls != nil {
			ln = tls.NewListener(ln, c.tls)
		}
		l.ln = ln
	}
	return ls, nil
}

// metricsServer is serve's /metrics: the client's collector, with the Go
// runtime's and process's metrics gathered from a registry of their own.
type metricsServer struct {
	http.Handler
	col *metrics.Collector
}

func (m *metricsServer) close() { m.col.Close() }

func metricsHandler(client *sortie.Client, logger *slog.Logger) *metricsServer {
	col := metrics.New(client, &metrics.Options{Logger: logger})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &metricsServer{Handler: col.Handler(reg), col: col}
}

// runListeners serves each listener (bound by listen) until ctx ends, then
// stops them gracefully: stopping is closed first so long-polling fetches
// answer.
func runListeners(ctx context.Context, e *env, ls []*listener, c *serveConfig, what string, stopping chan struct{}, logger *slog.Logger) error {
	tlsConf := c.tls
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
	}
	fmt.Fprintf(e.stdout, "sortie serve: dashboard on %s://%s/, API on %s://%s/api/v1, %s\n", scheme, ls[0].ln.Addr(), scheme, ls[0].ln.Addr(), what)
	if len(ls) > 1 {
		fmt.Fprintf(e.stdout, "sortie serve: metrics on %s://%s/metrics\n", scheme, ls[1].ln.Addr())
	}
	done := make(chan error, len(ls))
	for _, l := range ls {
		if l.srv == nil {
			l.start(ctx, l.h, logger)
		} else {
			l.set(l.h) // served since serveWaiting
		}
		go func() { done <- <-l.served }()
	}
	select {
	case err := <-done:
		closeAll(ls)
		return err
	case <-ctx.Done():
	}
	close(stopping) // long-polling fetches answer now
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serveShutdown)
	defer cancel()
	for _, l := range ls {
		if err := l.srv.Shutdown(stopCtx); err != nil {
			closeAll(ls)
			return fmt.Errorf("stop: %w", err)
		}
	}
	for range ls {
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	fmt.Fprintln(e.stdout, "sortie serve: stopped")
	return nil
}

func closeAll(ls []*listener) {
	for _, l := range ls {
		if l.srv != nil {
			_ = l.srv.Close()
		} else if l.ln != nil {
			_ = l.ln.Close()
		}
	}
}

// tlsConfig loads --tls-cert and --tls-key; nil without them.
func (c *serveConfig) tlsConfig() (*tls.Config, error) {
	if c.tlsCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", c.tlsCert, c.tlsKey, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
