package pgstore_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// logBuffer collects log lines; it is safe for concurrent writers.
type logBuffer struct{ testkit.LogBuffer }

// lines returns the lines containing sub.
func (l *logBuffer) lines(sub string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), sub) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// waitLine waits until a line containing sub is logged.
func (l *logBuffer) waitLine(t *testing.T, sub string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for len(l.lines(sub)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no log line %q within %s; the log:\n%s", sub, timeout, l.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newLogger returns a logger writing text lines at Info and above into l,
// leaving out the lines with the messages in skip (one per job).
func newLogger(l *logBuffer, skip ...string) *slog.Logger {
	h := slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo})
	return slog.New(&skipHandler{Handler: h, skip: skip})
}

// skipHandler drops the records whose message is in skip.
type skipHandler struct {
	slog.Handler
	skip []string
}

func (h *skipHandler) Handle(ctx context.Context, r slog.Record) error {
	for _, m := range h.skip {
		if r.Message == m {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *skipHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &skipHandler{Handler: h.Handler.WithAttrs(attrs), skip: h.skip}
}

func (h *skipHandler) WithGroup(name string) slog.Handler {
	return &skipHandler{Handler: h.Handler.WithGroup(name), skip: h.skip}
}

// randomSuffix returns 12 random hex digits, for names of roles and
// schemas that parallel tests must not share.
func randomSuffix(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// connect opens a connection of the test's own to the server at u, closed
// when t ends.
func connect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// withURL returns u with its user or database replaced (when not empty).
func withURL(t *testing.T, u, user, database string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatalf("parse %s: %v", u, err)
	}
	if user != "" {
		p.User = url.User(user)
	}
	if database != "" {
		p.Path = "/" + database
	}
	return p.String()
}

// openStore opens a Store on schema of the server at u, closed when t ends.
func openStore(t *testing.T, u string, opts *pgstore.Options) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := pgstore.Open(ctx, u, opts)
	if err != nil {
		t.Fatalf("Open(schema %s) error: %v", opts.Schema, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// enqueueOne enqueues one job into queue through st.
func enqueueOne(t *testing.T, st store.Store, queue string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{
		Jobs: []*store.NewJob{{Kind: "fault", Queue: queue, Priority: 2, MaxAttempts: 1}},
		Now:  time.Now(),
	})
	if err != nil {
		t.Fatalf("JobEnqueueMany() error: %v", err)
	}
}

// faultProxy forwards TCP connections to a server until cut, which closes
// them all and turns new ones away until restore: a network outage between
// one Store and the server, leaving other tests' connections alone.
type faultProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex // guards down and conns
	down  bool
	conns map[net.Conn]bool
}

// newFaultProxy forwards to the host:port of the server at u; it stops
// when t ends.
func newFaultProxy(t *testing.T, u string) *faultProxy {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatalf("parse %s: %v", u, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fp := &faultProxy{ln: ln, target: p.Host, conns: map[net.Conn]bool{}}
	fp.wg.Add(1)
	go fp.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		fp.cut()
		fp.wg.Wait()
	})
	return fp
}

// url returns u with its host replaced by the proxy's.
func (fp *faultProxy) url(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatalf("parse %s: %v", u, err)
	}
	p.Host = fp.ln.Addr().String()
	return p.String()
}

func (fp *faultProxy) accept() {
	defer fp.wg.Done()
	for {
		c, err := fp.ln.Accept()
		if err != nil {
			return
		}
		fp.mu.Lock()
		down := fp.down
		fp.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", fp.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !fp.track(c, s) {
			continue
		}
		fp.wg.Add(2)
		go fp.pipe(c, s)
		go fp.pipe(s, c)
	}
}

// track records a forwarded pair, or closes it when the proxy went down
// meanwhile.
func (fp *faultProxy) track(c, s net.Conn) bool {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.down {
		_ = c.Close()
		_ = s.Close()
		return false
	}
	fp.conns[c], fp.conns[s] = true, true
	return true
}

func (fp *faultProxy) pipe(dst, src net.Conn) {
	defer fp.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	fp.mu.Lock()
	delete(fp.conns, dst)
	delete(fp.conns, src)
	fp.mu.Unlock()
}

// cut closes every forwarded connection and turns new ones away.
func (fp *faultProxy) cut() {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	fp.down = true
	for c := range fp.conns {
		_ = c.Close()
	}
}

// restore forwards new connections again.
func (fp *faultProxy) restore() {
	fp.mu.Lock()
	fp.down = false
	fp.mu.Unlock()
}

// listenQuery is what pg_stat_activity shows for the listener of schema
// once it listens: its last statement.
func listenQuery(schema string) string {
	return `LISTEN "sortie_` + schema + `"`
}

// listenerPID waits until the listener of schema (and only that one: other
// tests' listeners run on the same server) listens, and returns its
// backend's PID. A PID in not is one that must have gone away.
func listenerPID(t *testing.T, conn *pgx.Conn, schema string, not int32, timeout time.Duration) int32 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var pid int32
		err := conn.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE application_name = 'sortie-listener' AND query = $1 AND pid <> $2`, listenQuery(schema), not).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("read pg_stat_activity: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listener of schema %s (other than backend %d) within %s", schema, not, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drain empties w.C of the signals that arrive within d.
func drain(w *store.Watch, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-w.C:
		case <-t.C:
			return
		}
	}
}

// expectSignal fails t unless w is signalled within d, and returns how
// long it took.
func expectSignal(t *testing.T, w *store.Watch, d time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-w.C:
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("%s: no watch signal within %s", what, d)
		return 0
	}
}

// expectQuiet fails t if w is signalled within d.
func expectQuiet(t *testing.T, w *store.Watch, d time.Duration, what string) {
	t.Helper()
	select {
	case <-w.C:
		t.Fatalf("%s: watch signalled with nothing enqueued, want no signal for %s", what, d)
	case <-time.After(d):
	}
}
