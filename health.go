package sortie

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// health logs a repeating store failure once when it starts and once when
// it clears, instead of on every retry.
type health struct {
	logger *slog.Logger
	what   string

	mu      sync.Mutex
	failing bool
	since   time.Time
}

func (h *health) fail(ctx context.Context, op string, err error) {
	h.mu.Lock()
	first := !h.failing
	if first {
		h.failing = true
		h.since = time.Now()
	}
	h.mu.Unlock()
	if first {
		h.logger.WarnContext(ctx, h.what+" unreachable, backing off", slog.String("op", op), slog.String(logKeyError, err.Error()))
	}
}

func (h *health) ok(ctx context.Context) {
	h.mu.Lock()
	was := h.failing
	since := h.since
	h.failing = false
	h.mu.Unlock()
	if was {
		h.logger.InfoContext(ctx, h.what+" reachable again", slog.Duration(logKeyDuration, time.Since(since)))
	}
}

// backoff returns the wait before retry n (1-based) of a failing store call:
// 50ms doubling up to 5s, with jitter.
func backoff(n int) time.Duration {
	d := 50 * time.Millisecond << min(n-1, 7)
	d = min(d, 5*time.Second)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// sleepCtx waits d or until done is closed or ctx ends; it reports whether
// the full wait passed.
func sleepCtx(ctx context.Context, done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	case <-ctx.Done():
		return false
	}
}
