package bench_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// The short soak: a steady stream with retries, dead jobs, scheduled jobs
// and unique conflicts, pruning on, on SQLite and PostgreSQL. Every job
// finishes once, in the state its kind of job should; the counts agree
// with the listing; duplicates are exactly the conflicts asked for; and
// pruning bounds the finished rows. `make soak` runs the long form with
// sortie soak.
//
// Not parallel: the interval and latency tests check achieved rates, and
// a soak beside them would take their cores.
func TestSoakShort(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"sqlite", func(t *testing.T) store.Store {
			st, err := sqlitestore.Open(filepath.Join(t.TempDir(), "soak.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}},
		{"postgres", func(t *testing.T) store.Store {
			st, err := pgstore.Open(context.Background(), pgtest.URL(t), &pgstore.Options{Schema: pgtest.Schema(t), Migrate: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.open(t)
			const rate, seconds = 200, 15
			opts := &bench.SoakOptions{Rate: rate, Duration: seconds * time.Second, Window: 5 * time.Second, Workers: 20,
				Retention: 2 * time.Second, Drain: time.Minute}
			rep, err := bench.Soak(t.Context(), st, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.Err(); err != nil {
				t.Fatal(err)
			}
			n := int64(rate * seconds)
			if want := n / 100; rep.Duplicates != want || rep.Enqueued != n-want {
				t.Errorf("%d enqueued and %d duplicates, want %d and %d", rep.Enqueued, rep.Duplicates, n-want, want)
			}
			if len(rep.Windows) < 3 {
				t.Fatalf("%d windows reported, want at least 3", len(rep.Windows))
			}
			var finished int64
			for _, w := range rep.Windows {
				t.Logf("window %d: %.0f jobs/s, p50 %.1f ms, p99 %.1f ms, heap %.1f MiB, rows %v", w.Index, w.JobsPerSec, w.P50ms, w.P99ms, w.HeapMB, w.Rows)
				finished += w.Completed + w.Dead
			}
			if finished != rep.Enqueued {
				t.Errorf("the windows count %d jobs finished, want the %d enqueued", finished, rep.Enqueued)
			}
			// Pruned every three retentions, a finished job lives at most
			// four, during which at most rate jobs a second finish (twice
			// that while a backlog catches up).
			last := rep.Windows[len(rep.Windows)-1].Rows
			if kept := last[store.JobStateCompleted] + last[store.JobStateDead]; kept > 2*rate*4*2 {
				t.Errorf("%d finished jobs kept at the end, want at most %d: pruning does not keep up", kept, 2*rate*4*2)
			}
		})
	}
}
