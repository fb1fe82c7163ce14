package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

// undoSteps brings the file at path back to what version 6 held: no
// durable steps.
func undoSteps(t *testing.T, path string) {
	t.Helper()
	for _, q := range []string{
		`DROP TRIGGER jobs_child_in`,
		`DROP TRIGGER jobs_child_out`,
		`DROP TABLE job_steps`,
		`DROP TABLE step_wakes`,
		`DROP INDEX jobs_parent`,
		`DROP INDEX finished_jobs_parent`,
		`DELETE FROM sortie_meta WHERE key = 'spawned'`,
	} {
		rawExec(t, path, q)
	}
	for _, table := range []string{"jobs", "finished_jobs"} {
		for _, c := range []string{"parent_id", "spawn_step", "cancel_with_parent", "waits_for"} {
			rawExec(t, path, `ALTER TABLE `+table+` DROP COLUMN `+c)
		}
	}
	rawExec(t, path, `UPDATE sortie_meta SET value = 6 WHERE key = 'schema_version'`)
}

// A version 6 file (before durable steps) migrates: its jobs stay, and
// they record steps, spawn and await.
func TestMigrateFromV6KeepsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v6.db")
	st := openAt(t, path, nil)
	enqueue(t, st, newJob("parent"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	undoSteps(t, path)

	st = openAt(t, path, nil)
	jobs, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 1, Now: t0, Lease: time.Minute}))
	if err != nil || len(jobs) != 1 {
		t.Fatalf("JobFetch after migrating = %v, %v; want the job", jobs, err)
	}
	p := jobs[0]
	res, err := st.StepRecord(ctx, &store.StepRecordParams{Now: t0, Steps: []*store.StepRecord{{ID: p.ID, ClaimToken: p.ClaimToken, Name: "a", Result: []byte(`1`)}}})
	if err != nil || !res[0].Applied {
		t.Fatalf("StepRecord after migrating = %+v, %v", res, err)
	}
	sp, err := st.StepSpawn(ctx, &store.StepSpawnParams{ID: p.ID, ClaimToken: p.ClaimToken, Name: "kids", Jobs: []*store.NewJob{newJob("kid")}, Now: t0})
	if err != nil || len(sp.Children) != 1 {
		t.Fatalf("StepSpawn after migrating = %+v, %v", sp, err)
	}
	aw, err := st.StepAwait(ctx, &store.StepAwaitParams{ID: p.ID, ClaimToken: p.ClaimToken, Name: "kids", Now: t0})
	if err != nil || !aw.Suspended {
		t.Fatalf("StepAwait after migrating = %+v, %v", aw, err)
	}
	finishFirst(t, st, "default", &store.Report{Kind: store.ReportCompleted})
	row, err := st.JobGet(ctx, &store.JobGetParams{ID: p.ID})
	if err != nil || row.State != store.JobStateAvailable || len(row.Steps) != 2 {
		t.Errorf("parent after its child completed = %+v, %v; want available with 2 steps", row, err)
	}
}
