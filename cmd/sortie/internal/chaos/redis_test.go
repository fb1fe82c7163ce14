package chaos

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// The Redis helpers of the scenarios, in one place: stores on the shared
// test server (internal/testkit/redistest) and a server of a test's own that can
// be crashed and restarted. (redistest.StartServer does the latter through
// scripts/testredis.sh; the scenarios still start theirs directly.)

func openRedis(ctx context.Context, u string, _ *slog.Logger) (store.Store, error) {
	return redisstore.Open(ctx, u, nil)
}

// newRedisStoreAt makes an empty store at u (with its prefix) for t.
func newRedisStoreAt(t *testing.T, u string) *target {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := openRedis(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	closeWith(t, st)
	return &target{url: u, st: st}
}

// newRedisStore makes a store under a key prefix of its own on the test
// server, whose keys are deleted when t ends.
func newRedisStore(t *testing.T) *target {
	return newRedisStoreAt(t, redistest.StoreURL(t))
}

// newPrivateRedis makes a store on a redis-server of the test's own, which
// the outage kills with SIGKILL (a crash) and starts again on the same
// port and directory, replaying its append-only file.
func newPrivateRedis(t *testing.T) *target {
	srv := startRedisServer(t)
	tg := newRedisStoreAt(t, "redis://"+srv.addr+"/0?prefix=sortie-chaos")
	tg.outage = &redisOutage{srv: srv}
	return tg
}

// redisOutage crashes a private Redis server.
type redisOutage struct{ srv *redisServer }

func (o *redisOutage) begin(t *testing.T) { o.srv.down(t) }
func (o *redisOutage) end(t *testing.T)   { o.srv.up(t) }
func (*redisOutage) kind() faultKind      { return faultServer }

// restart crashes the server, leaves it down for down, and starts it
// again.
func (o *redisOutage) restart(t *testing.T, down time.Duration) {
	o.srv.down(t)
	<-time.After(down) // the length of the outage, not a wait for an event
	o.srv.up(t)
}

// A redisServer is a redis-server of one test's own.
type redisServer struct {
	addr string
	// args are its command line, the same at every start: the port, the
	// directory, and an append-only file synced at every write, so a crash
	// loses no acknowledged write and a lost job is sortie's fault.
	args []string
	bin  string

	mu sync.Mutex // guards the fields below
	// cmd is the running server; nil while it is down.
	cmd    *exec.Cmd
	exited chan struct{}
	// log is the output of every start.
	log lockedLog
}

// startRedisServer starts a server for t, killed by its PID when t ends.
// It skips t where the tests on the shared server skip, or when
// redis-server is not installed.
func startRedisServer(t *testing.T) *redisServer {
	t.Helper()
	redistest.URL(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed: the scenarios with a Redis server of their own do not run")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	s := &redisServer{addr: addr, bin: bin, args: []string{
		"--port", port, "--bind", "127.0.0.1", "--dir", t.TempDir(), "--save", "",
		"--appendonly", "yes", "--appendfsync", "always",
	}}
	t.Cleanup(func() {
		s.down(t)
		if t.Failed() {
			t.Logf("the log of redis-server %s:\n%s", s.addr, s.log.String())
		}
	})
	s.up(t)
	return s
}

// up starts the server and returns once it accepts connections: after it
// has replayed its append-only file.
func (s *redisServer) up(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		t.Fatalf("redis-server %s is already up", s.addr)
	}
	ready := s.log.watch("Ready to accept connections")
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = &s.log, &s.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	select {
	case <-ready:
	case <-exited:
		s.cmd = nil
		t.Fatalf("redis-server %q exited as it started:\n%s", s.args, s.log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("redis-server %q was not ready within 30s:\n%s", s.args, s.log.String())
	}
}

// down kills the server with SIGKILL, by its PID, and returns once it has
// exited. A server that is down stays down.
func (s *redisServer) down(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Errorf("kill redis-server (pid %d): %v", s.cmd.Process.Pid, err)
	}
	<-s.exited
	s.cmd = nil
}

// lockedLog holds a server's output, and tells when a line appears.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
	// check, when set, runs after each write.
	check func()
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if l.check != nil {
		l.check()
	}
	return len(p), nil
}

// watch returns a channel closed when text appears in what is written
// from now on.
func (l *lockedLog) watch(text string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := make(chan struct{})
	from := l.b.Len()
	l.check = func() {
		if strings.Contains(l.b.String()[from:], text) {
			close(seen)
			l.check = nil
		}
	}
	return seen
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
