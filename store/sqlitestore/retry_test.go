package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// A version 3 file, whose jobs cancelled because a dependency died carry
// no record of it, migrates to version 4 with that record rebuilt from
// their last error: retrying the dependency revives them. A job that only
// looks alike (its own outcome's message, not one of its dependencies) is
// left alone.
func TestMigrateFromV3RecordsCancelCauses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v3.db")
	st := openAt(t, path, nil)
	a := newJob("a")
	a.MaxAttempts = 1
	aID := enqueue(t, st, a)[0].ID
	b := newJob("b")
	b.DependsOn = []int64{aID}
	bID := enqueue(t, st, b)[0].ID
	lookalike := newJob("c")
	lookalike.Queue = "other"
	cID := enqueue(t, st, lookalike)[0].ID
	finishFirst(t, st, "default", &store.Report{Kind: store.ReportFailed, Error: &store.AttemptError{Message: "boom"}})
	finishFirst(t, st, "other", &store.Report{Kind: store.ReportCancelled,
		Error: &store.AttemptError{Message: fmt.Sprintf("dependency job %d ended dead", aID)}})
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	undoSteps(t, path) // version 7
	for _, q := range []string{
		`DROP TABLE processes`, // version 5
		`DROP INDEX finished_jobs_cancelled_by`,
		`ALTER TABLE finished_jobs DROP COLUMN cancelled_by`,
		`UPDATE sortie_meta SET value = 3 WHERE key = 'schema_version'`,
	} {
		rawExec(t, path, q)
	}

	st = openAt(t, path, nil)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version int
	if err := db.QueryRow(`SELECT value FROM sortie_meta WHERE key = 'schema_version'`).Scan(&version); err != nil || version != sqlitestore.SchemaVersion {
		t.Fatalf("schema version after open = %d, %v; want %d", version, err, sqlitestore.SchemaVersion)
	}
	if _, err := st.JobRetry(ctx, &store.JobRetryParams{ID: aID, Now: t0}); err != nil {
		t.Fatalf("JobRetry(%d) error: %v", aID, err)
	}
	for id, want := range map[int64]store.JobState{bID: store.JobStateWaiting, cID: store.JobStateCancelled} {
		got, err := st.JobGet(ctx, &store.JobGetParams{ID: id})
		if err != nil || got.State != want {
			t.Errorf("after the migration and JobRetry(%d): job %d = %+v, %v; want %s", aID, id, got, err, want)
		}
	}
}

// finishFirst claims the first job of queue and applies o to it.
func finishFirst(t *testing.T, st store.Store, queue string, o *store.Report) {
	t.Helper()
	ctx := context.Background()
	jobs, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: queue, Limit: 1, Now: t0, Lease: time.Minute}))
	if err != nil || len(jobs) != 1 {
		t.Fatalf("JobFetch(%q) = %d jobs, %v; want 1", queue, len(jobs), err)
	}
	o.ID, o.ClaimToken = jobs[0].ID, jobs[0].ClaimToken
	if res, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: []*store.Report{o}, Now: t0}); err != nil || !res[0].Applied {
		t.Fatalf("JobFinish(job %d) = %+v, %v; want applied", o.ID, res, err)
	}
}
