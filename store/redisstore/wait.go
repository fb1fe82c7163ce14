package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// ErrServerWait is wrapped by Open's error when the server did not
// answer within Options.WaitForServer.
var ErrServerWait = errors.New("gave up waiting for the server")

// openWaiting runs open, and runs it again with backoff for up to
// o.WaitForServer while it fails because the server does not answer
// (refused connections, timeouts, LOADING while Redis reads its files),
// logging once when it starts waiting and once when the server answers.
func openWaiting(ctx context.Context, o *Options, target string, open func() error) error {
	err := open()
	if err == nil || o.WaitForServer <= 0 || !unreachable(err) {
		return err
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	start := time.Now()
	log.WarnContext(ctx, "redisstore: server unreachable, waiting for it", slog.String("target", target),
		slog.Duration("wait", o.WaitForServer), slog.String("error", err.Error()))
	wait, tries := 100*time.Millisecond, 1
	for err != nil && unreachable(err) {
		left := o.WaitForServer - time.Since(start)
		if left <= 0 {
			return fmt.Errorf("%w (%w after %s)", err, ErrServerWait, o.WaitForServer.Round(time.Millisecond))
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (stopped waiting for the server: %w)", err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
		tries++
		err = open()
	}
	if err == nil {
		log.InfoContext(ctx, "redisstore: server reachable", slog.String("target", target),
			slog.Duration("waited", time.Since(start).Round(time.Millisecond)), slog.Int("tries", tries))
	}
	return err
}

// unreachable reports whether err says the server did not answer: a
// network error, a refused or reset connection, or a server still loading
// its data (LOADING) or not yet serving (a cluster whose slots are not
// all covered yet).
func unreachable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"LOADING", "CLUSTERDOWN", "connection refused", "i/o timeout", "MASTERDOWN", "TRYAGAIN"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// quietDials makes go-redis drop its own line for each failed dial (81 in
// a 10 s outage), once per process: the client logs an outage once when
// it starts and once when it ends. go-redis's logger is the process's, so
// Options.KeepDialLogs leaves it alone.
var quietDials sync.Once

func silenceDialLogs() {
	quietDials.Do(func() {
		redis.SetLogger(logging.NewBlacklistLogger([]string{"failed to dial", "failed to get a usable connection"}))
	})
}
