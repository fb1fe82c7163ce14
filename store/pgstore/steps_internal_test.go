package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
)

// A parent's Await and its last child's outcome race: the Await locks the
// spawn step, finds a child pending and suspends the parent, while the
// finish of that child waits for the step's lock. When the Await commits,
// the finish counts the child off and must make the parent available: it
// started before the parent was waiting, and a wake-up decided on what
// the finish saw when it started would leave the parent waiting forever
// (one of three runs of the steps benchmark did: its parent never
// resumed). The child ends by its outcome (finish_jobs, one statement)
// or by a cancel (the child_moved trigger).
func TestAwaitRacingLastChildFinish(t *testing.T) {
	t.Parallel()
	t.Run("outcome", func(t *testing.T) { t.Parallel(); testAwaitRacingChild(t, true) })
	t.Run("cancel", func(t *testing.T) { t.Parallel(); testAwaitRacingChild(t, false) })
}

func testAwaitRacingChild(t *testing.T, outcome bool) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	s, err := Open(ctx, pgtest.URL(t), &Options{Schema: schema, Migrate: true, MaxConns: 4, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	claim := func(queue string) *store.JobRow {
		t.Helper()
		rows, err := store.FetchedJobs(s.JobFetch(ctx, &store.JobFetchParams{Queue: queue, Limit: 1, Now: now, Lease: time.Hour, Worker: "w"}))
		if err != nil || len(rows) != 1 {
			t.Fatalf("JobFetch(%q) = %d jobs, %v; want 1", queue, len(rows), err)
		}
		return rows[0]
	}
	if _, err := s.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{{Kind: "parent", Queue: "parents"}}, Now: now}); err != nil {
		t.Fatal(err)
	}
	parent := claim("parents")
	spawn := &store.StepSpawnParams{ID: parent.ID, ClaimToken: parent.ClaimToken, Name: "kids",
		Jobs: []*store.NewJob{{Kind: "child", Queue: "children"}}, Now: now}
	if res, err := s.StepSpawn(ctx, spawn); err != nil || !res.Applied {
		t.Fatalf("StepSpawn() = %+v, %v; want applied", res, err)
	}
	children, err := s.JobList(ctx, &store.JobListParams{ParentID: parent.ID, Limit: 10})
	if err != nil || len(children) != 1 {
		t.Fatalf("JobList(children of %d) = %d jobs, %v; want 1", parent.ID, len(children), err)
	}
	child := children[0]
	if outcome {
		child = claim("children")
	}

	// The Await, held open after it suspended the parent.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	c, st, err := s.lockStep(ctx, tx, parent.ID, parent.ClaimToken, "kids")
	if err != nil || c == nil || st == nil || st.Pending != 1 {
		t.Fatalf("lockStep() = %+v, %+v, %v; want the claim and 1 child pending", c, st, err)
	}
	if err := s.suspend(ctx, tx, parent.ID, c, store.JobStateWaiting, now, "kids"); err != nil {
		t.Fatal(err)
	}

	finished := make(chan error, 1)
	go func() {
		if !outcome {
			_, err := s.JobCancel(ctx, &store.JobCancelParams{ID: child.ID, Now: now})
			finished <- err
			return
		}
		_, err := s.JobFinish(ctx, &store.JobFinishParams{Now: now,
			Reports: []*store.Report{{ID: child.ID, ClaimToken: child.ClaimToken, Kind: store.ReportCompleted}}})
		finished <- err
	}()
	testkit.WaitFor(t, 10*time.Second, "the child's end waits for the spawn step's lock", nil, nil, func() (bool, error) {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, schema).Scan(&n)
		return n > 0, err
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-finished; err != nil {
		t.Fatalf("ending the last child: %v", err)
	}
	row, err := s.JobGet(ctx, &store.JobGetParams{ID: parent.ID})
	if err != nil {
		t.Fatal(err)
	}
	if row.State != store.JobStateAvailable {
		t.Fatalf("parent after its last child finished = %s waiting for %q, want available", row.State, strings.TrimSpace(row.WaitsFor))
	}
}
