package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/metrics"
)

// listener is one address serve answers on.
type listener struct {
	name, addr string
	h          http.Handler
	srv        *http.Server
	ln         net.Listener
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

// runListeners serves each listener until ctx ends, then stops them
// gracefully: stopping is closed first so long-polling fetches answer.
func runListeners(ctx context.Context, e *env, ls []*listener, c *serveConfig, what string, stopping chan struct{}, logger *slog.Logger) error {
	tlsConf := c.tls
	var err error
	for _, l := range ls {
		if l.ln, err = net.Listen("tcp", l.addr); err != nil {
			closeAll(ls)
			return err
		}
		if tlsConf != nil {
			l.ln = tls.NewListener(l.ln, tlsConf)
		}
		l.srv = &http.Server{
			Handler:           l.h,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
			BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		}
	}
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
		go func() { done <- l.srv.Serve(l.ln) }()
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
