package peers

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/internal/testkit/delayproxy"
	"github.com/sortiehq/sortie/internal/testkit/netns"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// hostsRoundsEnv turns on the full form of TestDrainAcrossHostsAgainstRiver:
// that many interleaved rounds at 0.2, 1 and 5 ms (default: one round at
// 1 ms); hostsJobsEnv sets the jobs of each run (default 10,000).
const (
	hostsRoundsEnv = "SORTIE_HOSTS_ROUNDS"
	hostsJobsEnv   = "SORTIE_HOSTS_JOBS"
)

// sortie and River drain the same PostgreSQL from the same 4 worker
// hosts (network namespaces, internal/testkit/netns), each host's processes
// reaching the database through a proxy on its link that holds every byte
// back half the round trip, with the same workers per host; the runs
// interleave, sortie then River, and the log gives the medians and their
// ratio. Each run checks that every job ran exactly once. Needs root and
// a PostgreSQL server ($SORTIE_TEST_POSTGRES_URL).
func TestDrainAcrossHostsAgainstRiver(t *testing.T) {
	if err := netns.Check(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skipf("SKIPPED: %v", err)
	}
	dsn := postgresURL(t)
	rounds, rtts := 1, []time.Duration{time.Millisecond}
	if s := os.Getenv(hostsRoundsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of rounds", hostsRoundsEnv, s)
		}
		rounds, rtts = n, []time.Duration{200 * time.Microsecond, time.Millisecond, 5 * time.Millisecond}
	}
	const hostCount, workersPerHost = 4, 50
	jobs := 10000
	if s := os.Getenv(hostsJobsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 {
			t.Fatalf("%s=%q: want a number of jobs, at least 100", hostsJobsEnv, s)
		}
		jobs = n
	}
	// sortie is built in its own module, peerbench in this one.
	sortieExe := buildCommand(t, "../..", "./cmd/sortie")
	peerExe := buildCommand(t, ".", "./cmd/peerbench")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	hosts, err := netns.Create(ctx, hostCount)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := hosts.Close(); err != nil {
			t.Errorf("remove the hosts: %v", err)
		}
	}()
	var proxies []*delayproxy.Proxy
	var sortieCmds []func(store.Store) ([]string, error)
	var riverCmds []func(schema string) []string
	for _, h := range hosts.Hosts {
		p, err := delayproxy.StartOn(net.JoinHostPort(h.Gateway, "0"), u.Host, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		proxies = append(proxies, p)
		via := *u
		via.Host = p.Addr()
		sortieCmds = append(sortieCmds, func(st store.Store) ([]string, error) {
			return append(h.Prefix(), sortieExe, "bench-worker", "--store", via.String(), "--schema", st.(*pgstore.Store).Schema()), nil
		})
		riverCmds = append(riverCmds, riverWorkerCommand(h.Prefix(), peerExe, via.String(), RiverBench))
	}
	logger := slog.New(slog.DiscardHandler)
	for _, rtt := range rtts {
		for _, p := range proxies {
			p.SetDelay(rtt / 2)
		}
		var ours, theirs []float64
		for range rounds {
			res, err := bench.DrainProcesses(ctx, bench.Postgres(dsn, ""), &bench.ProcessDrainOptions{
				Jobs: jobs, Workers: workersPerHost, Commands: sortieCmds})
			if err != nil {
				t.Fatalf("sortie at %s: %v", rtt, err)
			}
			ours = append(ours, res.JobsPerSec)
			rres, err := RiverDrainProcesses(ctx, dsn, jobs, workersPerHost, riverCmds, logger)
			if err != nil {
				t.Fatalf("river at %s: %v", rtt, err)
			}
			theirs = append(theirs, rres.JobsPerSec)
		}
		o, r := median(ours), median(theirs)
		t.Logf("%d hosts x %d workers, %5s round trip, %d jobs: sortie %8.0f jobs/s, River (river-bench) %8.0f jobs/s: %.2fx (medians of %d; sortie %v, River %v)",
			hostCount, workersPerHost, rtt, jobs, o, r, o/r, rounds, round(ours), round(theirs))
	}
}

// buildCommand builds the command of package pkg (relative to dir) into
// a temporary directory and returns the binary's path.
func buildCommand(t *testing.T, dir, pkg string) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), filepath.Base(pkg))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", exe, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return exe
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func round(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strings.Join(parts, " ")
}
