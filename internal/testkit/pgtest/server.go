package pgtest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
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

// script runs scripts/testpg.sh without the shared server's variables.
var script = &testkit.Script{Name: "testpg.sh", Shared: []string{EnvURL, "SORTIE_TESTPG_DIR"}}

// StartServer starts a server for t and stops it (by its PID, through the
// script) when t ends. It skips t where the shared server's tests skip (no
// SORTIE_TEST_POSTGRES_URL) and fails it where they fail (CI=true).
func StartServer(t testing.TB) *Server {
	t.Helper()
	URL(t)
	vars := script.Start(t, 2*time.Minute, nil)
	srv := &Server{URL: vars[EnvURL], Dir: vars["SORTIE_TESTPG_DIR"]}
	if srv.URL == "" || srv.Dir == "" {
		t.Fatalf("pgtest: testpg.sh start printed %v, want %s and SORTIE_TESTPG_DIR", vars, EnvURL)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgtest: the log of the server in %s:\n%s", srv.Dir, srv.log())
		}
		// Never without a directory: stop would take SORTIE_TESTPG_DIR,
		// the shared server (the script runs without it too).
		if _, err := script.Run(t, time.Minute, nil, "stop", srv.Dir); err != nil {
			t.Errorf("pgtest: testpg.sh stop %s: %v", srv.Dir, err)
		}
	})
	return srv
}

// log returns the server's log, from its first start (the logs of its
// earlier starts are in postgres.old.log, scripts/testpg.sh).
func (s *Server) log() string {
	var b strings.Builder
	testkit.AppendFiles(&b, filepath.Join(s.Dir, "postgres.old.log"), filepath.Join(s.Dir, "postgres.log"))
	return b.String()
}

// Restart shuts the server down in mode (Fast or Immediate), leaves it down
// for down, and starts it again on the same port and data.
func (s *Server) Restart(t testing.TB, down time.Duration, mode string) {
	t.Helper()
	if _, err := script.Run(t, 2*time.Minute, nil, "restart", s.Dir, fmt.Sprintf("%.3f", down.Seconds()), mode); err != nil {
		t.Fatalf("pgtest: testpg.sh restart: %v", err)
	}
}

// Down shuts the server down in mode (Fast or Immediate) and leaves it
// down, its port kept for Up.
func (s *Server) Down(t testing.TB, mode string) {
	t.Helper()
	if _, err := script.Run(t, time.Minute, nil, "down", s.Dir, mode); err != nil {
		t.Fatalf("pgtest: testpg.sh down: %v", err)
	}
}

// Up starts the server again after Down.
func (s *Server) Up(t testing.TB) {
	t.Helper()
	if _, err := script.Run(t, 2*time.Minute, nil, "up", s.Dir); err != nil {
		t.Fatalf("pgtest: testpg.sh up: %v", err)
	}
}
