package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// A version 3 schema, whose jobs cancelled because a dependency died carry
// no record of it, migrates to version 4 with that record rebuilt from
// their last error: retrying the dependency revives them. A job that only
// looks alike (its own outcome's message, not one of its dependencies) is
// left alone.
func TestMigrateFromV3RecordsCancelCauses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	st := openStore(t, url, &pgstore.Options{Schema: schema, Migrate: true, DisableListen: true})
	now := time.Now().UTC().Truncate(time.Microsecond)
	res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{
		{Kind: "a", Queue: "default", Priority: 2, MaxAttempts: 1},
		{Kind: "b", Queue: "default", Priority: 2, MaxAttempts: 1, DependsOnIndex: []int{0}},
		{Kind: "c", Queue: "other", Priority: 2, MaxAttempts: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := res[0].ID, res[1].ID, res[2].ID
	finishFirst(t, st, "default", now, &store.Report{Kind: store.ReportFailed, Error: &store.AttemptError{Message: "boom"}})
	finishFirst(t, st, "other", now, &store.Report{Kind: store.ReportCancelled,
		Error: &store.AttemptError{Message: fmt.Sprintf("dependency job %d ended dead", a)}})
	st.Close()
	pgtest.Exec(t, `ALTER TABLE `+schema+`.jobs DROP COLUMN cancelled_by`)
	pgtest.Exec(t, `UPDATE `+schema+`.sortie_meta SET value = 3 WHERE key = 'schema_version'`)

	mr, err := pgstore.Migrate(ctx, url, &pgstore.Options{Schema: schema})
	if err != nil || mr.From != 3 || mr.To != pgstore.SchemaVersion {
		t.Fatalf("Migrate() = %+v, %v; want from 3 to %d", mr, err, pgstore.SchemaVersion)
	}
	st = openStore(t, url, &pgstore.Options{Schema: schema, DisableListen: true})
	if _, err := st.JobRetry(ctx, &store.JobRetryParams{ID: a, Now: now}); err != nil {
		t.Fatalf("JobRetry(%d) error: %v", a, err)
	}
	for id, want := range map[int64]store.JobState{b: store.JobStateWaiting, c: store.JobStateCancelled} {
		got, err := st.JobGet(ctx, &store.JobGetParams{ID: id})
		if err != nil || got.State != want {
			t.Errorf("after the migration and JobRetry(%d): job %d = %+v, %v; want %s", a, id, got, err, want)
		}
	}
}

// finishFirst claims the first job of queue and applies o to it.
func finishFirst(t *testing.T, st store.Store, queue string, now time.Time, o *store.Report) {
	t.Helper()
	ctx := context.Background()
	jobs, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: queue, Limit: 1, Now: now, Lease: time.Minute}))
	if err != nil || len(jobs) != 1 {
		t.Fatalf("JobFetch(%q) = %d jobs, %v; want 1", queue, len(jobs), err)
	}
	o.ID, o.ClaimToken = jobs[0].ID, jobs[0].ClaimToken
	if res, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: []*store.Report{o}, Now: now}); err != nil || !res[0].Applied {
		t.Fatalf("JobFinish(job %d) = %+v, %v; want applied", o.ID, res, err)
	}
}
