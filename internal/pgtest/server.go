package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Shutdown modes of a Server (scripts/testpg.sh's MODE).
const (
	// Fast rolls back open transactions, closes connections and writes a
	// checkpoint: a restart by an operator.
	Fast = "fast"
	// Immediate aborts every backend with no checkpoint; the server
	// recovers from its write-ahead log at the next start: a crash.
	Immediate = "immediate"
)

// A Server is a PostgreSQL server of one test's own, started with
// scripts/testpg.sh, for faults that would disturb the tests sharing the
// server in SORTIE_TEST_POSTGRES_URL: a restart, or a server that is down.
type Server struct {
	// URL is the server's URL, as SORTIE_TEST_POSTGRES_URL names the
	// shared one.
	URL string
	// Dir is the directory holding its data, log and state file.
	Dir string
}

// StartServer starts a server for t and stops it (by its PID, through the
// script) when t ends. It skips t where the shared server's tests skip (no
// SORTIE_TEST_POSTGRES_URL) and fails it where they fail (CI=true).
func StartServer(t testing.TB) *Server {
	t.Helper()
	URL(t)
	out, err := runScript(t, 2*time.Minute, "start")
	if err != nil {
		t.Fatalf("pgtest: testpg.sh start: %v", err)
	}
	vars := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		name, value, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || !strings.HasPrefix(line, "export ") {
			t.Fatalf("pgtest: testpg.sh start printed %q, want only export lines", line)
		}
		v, err := unquoteShell(value)
		if err != nil {
			t.Fatalf("pgtest: testpg.sh start: %s: %v", line, err)
		}
		vars[name] = v
	}
	srv := &Server{URL: vars[EnvURL], Dir: vars["SORTIE_TESTPG_DIR"]}
	if srv.URL == "" || srv.Dir == "" {
		t.Fatalf("pgtest: testpg.sh start printed %q, want %s and SORTIE_TESTPG_DIR", out, EnvURL)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgtest: the log of the server in %s:\n%s", srv.Dir, srv.log())
		}
		// Never without a directory: stop would take SORTIE_TESTPG_DIR,
		// the shared server (runScript removes it from the environment too).
		if _, err := runScript(t, time.Minute, "stop", srv.Dir); err != nil {
			t.Errorf("pgtest: testpg.sh stop %s: %v", srv.Dir, err)
		}
	})
	return srv
}

// log returns the server's log, from its first start (the logs of its
// earlier starts are in postgres.old.log, scripts/testpg.sh).
func (s *Server) log() string {
	var b strings.Builder
	for _, name := range []string{"postgres.old.log", "postgres.log"} {
		data, err := os.ReadFile(filepath.Join(s.Dir, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
		b.Write(data)
	}
	return b.String()
}

// Restart shuts the server down in mode (Fast or Immediate), leaves it down
// for down, and starts it again on the same port and data.
func (s *Server) Restart(t testing.TB, down time.Duration, mode string) {
	t.Helper()
	if _, err := runScript(t, 2*time.Minute, "restart", s.Dir, fmt.Sprintf("%.3f", down.Seconds()), mode); err != nil {
		t.Fatalf("pgtest: testpg.sh restart: %v", err)
	}
}

// Down shuts the server down in mode (Fast or Immediate) and leaves it
// down, its port kept for Up.
func (s *Server) Down(t testing.TB, mode string) {
	t.Helper()
	if _, err := runScript(t, time.Minute, "down", s.Dir, mode); err != nil {
		t.Fatalf("pgtest: testpg.sh down: %v", err)
	}
}

// Up starts the server again after Down.
func (s *Server) Up(t testing.TB) {
	t.Helper()
	if _, err := runScript(t, 2*time.Minute, "up", s.Dir); err != nil {
		t.Fatalf("pgtest: testpg.sh up: %v", err)
	}
}

// runScript runs scripts/testpg.sh with args and returns its stdout; its
// stderr goes into the error, and into t's log.
func runScript(t testing.TB, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	script, err := scriptPath()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := osexec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	for _, kv := range os.Environ() {
		// The shared server is not ours to stop or reuse.
		if !strings.HasPrefix(kv, EnvURL+"=") && !strings.HasPrefix(kv, "SORTIE_TESTPG_DIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		t.Logf("testpg.sh %s:\n%s", strings.Join(args, " "), msg)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// scriptPath returns the path of scripts/testpg.sh, found from the working
// directory (a package's directory under go test) up to the module root.
func scriptPath() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "scripts", "testpg.sh"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("pgtest: no go.mod above the working directory, so no scripts/testpg.sh")
		}
		dir = parent
	}
}

// unquoteShell undoes bash's printf %q for the values testpg.sh prints,
// which it quotes with backslashes only.
func unquoteShell(s string) (string, error) {
	if strings.HasPrefix(s, "'") || strings.HasPrefix(s, "$'") || strings.HasPrefix(s, `"`) {
		return "", fmt.Errorf("quoted value %s: want backslash escapes only", s)
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String(), nil
}
