package redistest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
)

// Shutdown modes of a Server (scripts/testredis.sh's MODE).
const (
	// Term is SIGTERM, which Redis handles like SHUTDOWN: it writes and
	// fsyncs its append-only file and exits: a restart by an operator.
	Term = "term"
	// Kill is SIGKILL: the process dies at once, with what it had not yet
	// written to its append-only file; the next start replays the file: a
	// crash.
	Kill = "kill"
)

// Append-only file policies of a Server (ServerOptions.Fsync).
const (
	// Always writes and fsyncs the append-only file before Redis replies:
	// a write Redis acknowledged survives a crash.
	Always = "always"
	// Everysec fsyncs once a second: a crash may lose up to about two
	// seconds of acknowledged writes.
	Everysec = "everysec"
)

// The variables scripts/testredis.sh prints besides EnvURL and EnvCluster.
const (
	envDir        = "SORTIE_TESTREDIS_DIR"
	envClusterDir = "SORTIE_TESTREDIS_CLUSTER_DIR"
	envFsync      = "SORTIE_TESTREDIS_FSYNC"
)

// ServerOptions configures StartServer. A nil *ServerOptions means all
// defaults.
type ServerOptions struct {
	// Fsync is the server's appendfsync: Always or Everysec. Defaults to
	// Everysec, as the shared servers run.
	Fsync string
	// Cluster starts a Redis Cluster of three primaries, no replicas,
	// instead of a standalone server. Defaults to false.
	Cluster bool
	// Preload is a shared object every start of the server runs with
	// (LD_PRELOAD), such as PowerCutShim's. Defaults to none.
	Preload string
}

// script runs scripts/testredis.sh without the shared servers' variables;
// a Server's options say how its own runs.
var script = &testkit.Script{Name: "testredis.sh", Shared: []string{EnvURL, EnvCluster, envDir, envClusterDir, envFsync}}

// A Server is a Redis server (or cluster) of one test's own, started with
// scripts/testredis.sh, for faults that would disturb the tests sharing the
// servers in SORTIE_TEST_REDIS_URL and SORTIE_TEST_REDIS_CLUSTER: a crash, a
// restart, or a server that is down.
type Server struct {
	// URL is a standalone server's URL, as SORTIE_TEST_REDIS_URL names the
	// shared one; empty for a cluster.
	URL string
	// Addrs are a cluster's primaries (host:port), as
	// SORTIE_TEST_REDIS_CLUSTER names the shared ones; nil for a
	// standalone server.
	Addrs []string
	// Dir is the directory holding the state file and, in node1 (and
	// node2, node3 for a cluster), each server's configuration,
	// append-only file and log.
	Dir string
	// env is what the script runs with besides the environment.
	env []string
}

// StartServer starts a server for t and stops it (by its PID, through the
// script) when t ends. It skips t where the tests of the shared server (or
// cluster, with opts.Cluster) skip, and fails it where they fail (CI=true).
// A server that Down or Kill left down is stopped all the same.
func StartServer(t testing.TB, opts *ServerOptions) *Server {
	t.Helper()
	if opts == nil {
		opts = &ServerOptions{}
	}
	fsync := opts.Fsync
	if fsync == "" {
		fsync = Everysec
	}
	if fsync != Always && fsync != Everysec {
		t.Fatalf("redistest: ServerOptions.Fsync must be %q or %q, got %q", Always, Everysec, fsync)
	}
	args := []string{"--fsync", fsync}
	if opts.Cluster {
		ClusterAddrs(t)
		args = append(args, "--cluster")
	} else {
		URL(t)
	}
	var env []string
	if opts.Preload != "" {
		env = []string{"SORTIE_TESTREDIS_PRELOAD=" + opts.Preload}
	}
	vars := script.Start(t, 3*time.Minute, env, args...)
	srv := &Server{URL: vars[EnvURL], Dir: vars[envDir], env: env}
	if opts.Cluster {
		srv.Dir = vars[envClusterDir]
		if v := vars[EnvCluster]; v != "" {
			srv.Addrs = strings.Split(v, ",")
		}
	}
	if srv.Dir == "" || (srv.URL == "") == (len(srv.Addrs) == 0) {
		t.Fatalf("redistest: testredis.sh start %s printed %v, want a URL or addresses, and a directory", strings.Join(args, " "), vars)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("redistest: the logs of the server(s) in %s:\n%s", srv.Dir, srv.log())
		}
		// Never without a directory: stop would take the shared servers'
		// (the script runs without their variables too).
		if _, err := script.Run(t, time.Minute, nil, "stop", srv.Dir); err != nil {
			t.Errorf("redistest: testredis.sh stop %s: %v", srv.Dir, err)
		}
	})
	return srv
}

// log returns the logs of the server's nodes, each from its first start
// (the logs of earlier starts are in redis.old.log, scripts/testredis.sh).
func (s *Server) log() string {
	var b strings.Builder
	nodes, _ := filepath.Glob(filepath.Join(s.Dir, "node*"))
	for _, node := range nodes {
		fmt.Fprintf(&b, "== %s\n", filepath.Base(node))
		testkit.AppendFiles(&b, filepath.Join(node, "redis.old.log"), filepath.Join(node, "redis.log"))
	}
	return b.String()
}

// Kill kills the server (every node of a cluster) with SIGKILL, as a crash,
// and leaves it down, its ports kept for Up. Down(t, Kill) does the same.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.Down(t, Kill)
}

// Down shuts the server (every node of a cluster) down in mode (Term or
// Kill) and leaves it down, its ports kept for Up.
func (s *Server) Down(t testing.TB, mode string) {
	t.Helper()
	if _, err := script.Run(t, time.Minute, nil, "down", s.Dir, mode); err != nil {
		t.Fatalf("redistest: testredis.sh down: %v", err)
	}
}

// Up starts the server again after Down or Kill, on the same ports and
// files: it replays its append-only file before it answers, and a cluster
// is back in state ok on every node when Up returns.
func (s *Server) Up(t testing.TB) {
	t.Helper()
	if _, err := script.Run(t, 2*time.Minute, s.env, "up", s.Dir); err != nil {
		t.Fatalf("redistest: testredis.sh up: %v", err)
	}
}

// Restart shuts the server down in mode (Term or Kill), leaves it down for
// down, and starts it again as Up does.
func (s *Server) Restart(t testing.TB, down time.Duration, mode string) {
	t.Helper()
	if _, err := script.Run(t, 3*time.Minute, s.env, "restart", s.Dir, fmt.Sprintf("%.3f", down.Seconds()), mode); err != nil {
		t.Fatalf("redistest: testredis.sh restart: %v", err)
	}
}
