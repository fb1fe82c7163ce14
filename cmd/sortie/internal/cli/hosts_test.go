package cli

import (
	"context"
	"net"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/internal/testkit/delayproxy"
	"github.com/sortiehq/sortie/internal/testkit/netns"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/redisstore"
)

// hostsJobsEnv sets the jobs of each drain of TestDrainAcrossHosts and
// turns on its full form (make drain-hosts): 1, 2, 4 and 8 hosts at 0.2,
// 1 and 5 ms round trip.
const hostsJobsEnv = "SORTIE_HOSTS_JOBS"

// Worker hosts drain a store over links of their own: each host is a
// network namespace (internal/testkit/netns) whose bench-worker process reaches
// PostgreSQL or Redis through a proxy on its link's far end that holds
// every byte back half the round trip (the machine's kernel has no netem).
// Each run's jobs all run exactly once, across the hosts; the log gives
// the throughput per number of hosts and round trip. Locally it skips
// without root; under CI=true it runs its short form (2 hosts, 1 ms).
//
// Not parallel: the hosts want the machine's cores.
func TestDrainAcrossHosts(t *testing.T) {
	if err := netns.Check(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skipf("SKIPPED: %v", err)
	}
	jobs, hostCounts, rtts := 2000, []int{2}, []time.Duration{time.Millisecond}
	if s := os.Getenv(hostsJobsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 {
			t.Fatalf("%s=%q: want a number of jobs, at least 100", hostsJobsEnv, s)
		}
		jobs, hostCounts = n, []int{1, 2, 4, 8}
		rtts = []time.Duration{200 * time.Microsecond, time.Millisecond, 5 * time.Millisecond}
	}
	const workersPerHost = 50
	exe := buildSortie(t)
	for _, c := range []struct {
		name   string
		url    func(t testing.TB) string
		target func(u string) bench.Target
		// worker returns a bench-worker's store flags for st through u.
		worker func(u *url.URL, st store.Store) ([]string, error)
	}{
		{"postgres", pgtest.URL, func(u string) bench.Target { return bench.Postgres(u, "") },
			func(u *url.URL, st store.Store) ([]string, error) {
				return []string{"--store", u.String(), "--schema", st.(*pgstore.Store).Schema()}, nil
			}},
		{"redis", redistest.URL, bench.Redis,
			func(u *url.URL, st store.Store) ([]string, error) {
				s, err := redisURLWithPrefix(u.String(), st.(*redisstore.Store).Prefix())
				return []string{"--store", s}, err
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, err := url.Parse(c.url(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range hostCounts {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
				defer cancel()
				hosts, err := netns.Create(ctx, n)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := hosts.Close(); err != nil {
						t.Errorf("remove the hosts: %v", err)
					}
				})
				var proxies []*delayproxy.Proxy
				var commands []func(store.Store) ([]string, error)
				for _, h := range hosts.Hosts {
					p, err := delayproxy.StartOn(net.JoinHostPort(h.Gateway, "0"), u.Host, 0)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = p.Close() })
					proxies = append(proxies, p)
					via := *u
					via.Host = p.Addr()
					commands = append(commands, func(st store.Store) ([]string, error) {
						flags, err := c.worker(&via, st)
						if err != nil {
							return nil, err
						}
						return append(append(h.Prefix(), exe, "bench-worker"), flags...), nil
					})
				}
				for _, rtt := range rtts {
					for _, p := range proxies {
						p.SetDelay(rtt / 2)
					}
					res, err := bench.DrainProcesses(ctx, c.target(u.String()),
						&bench.ProcessDrainOptions{Jobs: jobs, Workers: workersPerHost, Commands: commands})
					if err != nil {
						t.Fatalf("%d hosts at %s round trip: %v", n, rtt, err)
					}
					t.Logf("%s, %d jobs, %d hosts x %d workers, %5s round trip: %8.0f jobs/s",
						c.name, jobs, n, workersPerHost, rtt, res.JobsPerSec)
				}
			}
		})
	}
}
