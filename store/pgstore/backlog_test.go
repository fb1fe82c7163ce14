package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/internal/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

const (
	backlogJobs  = 300_000
	backlogFetch = 100
	// backlogBound is the fastest fetch (and finish) time the test allows.
	// An index read of the backlog's head takes about a millisecond; a plan
	// that sorts or hashes the whole backlog takes 15 ms or more at this
	// size every time, and grows with it. The fastest of 20 is the figure:
	// a loaded machine slows some calls (medians of 8 ms were seen with two
	// other processes spinning on both cores) but cannot make a bad plan
	// fast.
	backlogBound = 8 * time.Millisecond
)

// A fetch from a large backlog reads the head of the queue, and a finish
// touches only its own jobs, whatever the planner's statistics said when
// the connection first planned them: here the statements are first planned
// on an almost empty table (statistics say
// nothing; a sort of every available job looks free), and planned again
// after ANALYZE of a 200,000-job backlog (a generic LIMIT looks like a
// tenth of the table, and a hash join over it looks cheap). Either plan,
// kept for the connection's life, made every fetch cost as much as the
// backlog, and a drain of N jobs cost N².
func TestFetchFromLargeBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	// Two connections, both used before the load, so the fetches after
	// it run on connections that planned the claim on an empty table.
	st := openStore(t, pgtest.URL(t), &pgstore.Options{Schema: schema, Migrate: true, MaxConns: 2, DisableListen: true})
	fetch := func() ([]*store.JobRow, error) {
		now := time.Now()
		return store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: backlogFetch, Worker: "w", Now: now, Lease: time.Minute}))
	}
	warm := make(chan error, 2)
	for range 2 {
		go func() {
			for range 10 {
				warm1 := &store.JobEnqueueManyParams{Jobs: []*store.NewJob{{Kind: "k", Queue: "default", Priority: 2, MaxAttempts: 25}}, Now: time.Now()}
				if _, err := st.JobEnqueueMany(ctx, warm1); err != nil {
					warm <- err
					return
				}
				got, err := fetch()
				if err != nil {
					warm <- err
					return
				}
				for _, j := range got {
					o := &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted}
					if _, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: []*store.Report{o}, Now: time.Now()}); err != nil {
						warm <- err
						return
					}
				}
			}
			warm <- nil
		}()
	}
	for range 2 {
		if err := <-warm; err != nil {
			t.Fatal(err)
		}
	}

	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, kind, queue, state, priority, max_attempts, run_at, created_at)
		SELECT nextval($1::regclass), 'k', 'default', 'available', 2, 25, now() - g * interval '1 microsecond', now()
		FROM generate_series(1, %d) AS g`, jobs, backlogJobs), pgx.Identifier{schema, "job_id_seq"}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	claimed := map[int64]bool{}
	measure := func(when string) {
		t.Helper()
		ds, fs := make([]time.Duration, 20), make([]time.Duration, 20)
		for i := range ds {
			start := time.Now()
			got, err := fetch()
			ds[i] = time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			outcomes := make([]*store.Report, len(got))
			for k, j := range got {
				outcomes[k] = &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted}
			}
			start = time.Now()
			applied, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: outcomes, Now: time.Now()})
			fs[i] = time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			for k, r := range applied {
				if !r.Applied {
					t.Fatalf("%s: outcome of job %d not applied", when, outcomes[k].ID)
				}
			}
			if len(got) != backlogFetch {
				t.Fatalf("%s: fetch %d claimed %d jobs, want %d", when, i, len(got), backlogFetch)
			}
			for _, j := range got {
				if claimed[j.ID] {
					t.Fatalf("%s: job %d claimed twice", when, j.ID)
				}
				claimed[j.ID] = true
			}
		}
		best, fbest := slices.Min(ds), slices.Min(fs)
		t.Logf("%s: fetch of %d from %d available jobs: median %v, fastest %v; finish of %d: median %v, fastest %v", when,
			backlogFetch, backlogJobs, bigPercentile(ds, 50), best, backlogFetch, bigPercentile(fs, 50), fbest)
		if best > backlogBound {
			t.Errorf("%s: fastest fetch = %v, want under %v (a plan that reads the whole backlog?)", when, best, backlogBound)
		}
		if fbest > backlogBound {
			t.Errorf("%s: fastest finish = %v, want under %v (a plan that reads the whole table?)", when, fbest, backlogBound)
		}
	}
	measure("planned on an empty table")
	if _, err := conn.Exec(ctx, "ANALYZE "+jobs); err != nil {
		t.Fatal(err)
	}
	measure("after ANALYZE")
}
