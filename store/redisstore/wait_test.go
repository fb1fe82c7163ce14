package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store/redisstore"
)

// waitLogs is a log destination a test can wait on for a line.
type waitLogs struct {
	mu   sync.Mutex
	b    strings.Builder
	line chan struct{}
}

func (w *waitLogs) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.Contains(string(p), "waiting for it") {
		close(w.line)
	}
	return w.b.Write(p)
}

// Open with WaitForServer waits for a server that is down, logging once
// when it starts waiting and once when the server answers; without it,
// Open fails at once, and a server that stays down is given up on after
// the wait, with ErrServerWait.
func TestOpenWaitsForServer(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, nil)
	srv.Down(t, redistest.Term)
	ctx := context.Background()
	start := time.Now()
	if _, err := redisstore.Open(ctx, srv.URL, nil); err == nil {
		t.Fatal("Open() of a server that is down succeeded")
	} else if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Open() without WaitForServer took %s to fail, want at once", took)
	}
	_, err := redisstore.Open(ctx, srv.URL, &redisstore.Options{WaitForServer: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, redisstore.ErrServerWait) {
		t.Fatalf("Open() of a server down past WaitForServer = %v, want ErrServerWait", err)
	}
	logs := &waitLogs{line: make(chan struct{})}
	type opened struct {
		st  *redisstore.Store
		err error
	}
	done := make(chan opened, 1)
	go func() {
		st, err := redisstore.Open(ctx, srv.URL, &redisstore.Options{WaitForServer: time.Minute, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		done <- opened{st, err}
	}()
	select {
	case <-logs.line:
	case <-time.After(10 * time.Second):
		t.Fatal("Open() with WaitForServer logged no wait")
	}
	srv.Up(t)
	o := <-done
	if o.err != nil {
		t.Fatalf("Open() with WaitForServer = %v, want it to wait for the server", o.err)
	}
	o.st.Close()
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if n := strings.Count(logs.b.String(), "level="); n != 2 {
		t.Errorf("Open() waiting logged %d lines, want 2 (waiting, reachable):\n%s", n, logs.b.String())
	}
}
