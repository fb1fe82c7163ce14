package bench_test

import (
	"net/url"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/internal/testkit/delayproxy"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
)

// delayJobsEnv sets the jobs of each drain of TestDrainOverDelay and turns
// on its full form: three interleaved rounds (make drain-delay).
const delayJobsEnv = "SORTIE_DELAY_JOBS"

// The store's round trips as TestDrainOverDelay sets them.
var delayRTTs = []time.Duration{0, time.Millisecond, 5 * time.Millisecond}

// A worker pool of 100 on one host drains PostgreSQL and Redis through a
// proxy that delays every byte, at 0, 1 and 5 ms round trip: each run's
// jobs all run exactly once (bench.Run checks), and the log gives the
// throughput at each delay and its ratio to no delay. The full form
// interleaves three rounds and reports medians.
//
// Not parallel, for the same reason as TestSoakShort.
func TestDrainOverDelay(t *testing.T) {
	jobs, rounds := 3000, 1
	if s := os.Getenv(delayJobsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 {
			t.Fatalf("%s=%q: want a number of jobs, at least 100", delayJobsEnv, s)
		}
		jobs, rounds = n, 3
	}
	for _, c := range []struct {
		name   string
		url    func(t testing.TB) string
		target func(u string) bench.Target
	}{
		{"postgres", pgtest.URL, func(u string) bench.Target { return bench.Postgres(u, "") }},
		{"redis", redistest.URL, bench.Redis},
	} {
		// One store at a time: both want the machine's cores.
		t.Run(c.name, func(t *testing.T) {
			u, err := url.Parse(c.url(t))
			if err != nil {
				t.Fatal(err)
			}
			p, err := delayproxy.Start(u.Host, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			u.Host = p.Addr()
			target := c.target(u.String())
			got := make(map[time.Duration][]float64)
			for range rounds {
				for _, rtt := range delayRTTs {
					p.SetDelay(rtt / 2)
					res, err := bench.Run(t.Context(), target, bench.Drain, &bench.Options{Jobs: jobs, Workers: 100})
					if err != nil {
						t.Fatalf("drain at %s round trip: %v", rtt, err)
					}
					got[rtt] = append(got[rtt], res.JobsPerSec)
				}
			}
			base := median(got[0])
			for _, rtt := range delayRTTs {
				m := median(got[rtt])
				t.Logf("%s, %d jobs, 100 workers, %4s round trip: %8.0f jobs/s (median of %d), %3.0f%% of no delay",
					c.name, jobs, rtt, m, len(got[rtt]), 100*m/base)
			}
		})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
