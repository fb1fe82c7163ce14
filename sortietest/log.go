package sortietest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// testLogger returns a logger writing Info and above to t.Log, silent once
// the test has ended (goroutines may still log while stopping).
func testLogger(t testing.TB) *slog.Logger {
	h := &tHandler{t: t, mu: &sync.Mutex{}}
	t.Cleanup(func() { h.mu.Lock(); h.done = true; h.mu.Unlock() })
	return slog.New(h)
}

type tHandler struct {
	t     testing.TB
	mu    *sync.Mutex
	done  bool
	attrs []slog.Attr
}

func (h *tHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *tHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteString(" ")
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		h.t.Log(b.String())
	}
	return nil
}

func (h *tHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &n
}

func (h *tHandler) WithGroup(string) slog.Handler { return h }
