package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

// A version 5 file (before the history) migrates: its jobs stay, and the
// outcomes applied afterwards are counted.
func TestMigrateFromV5KeepsHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v5.db")
	st := openAt(t, path, nil)
	enqueue(t, st, newJob("a"), newJob("b"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	undoSteps(t, path)
	rawExec(t, path, `DROP TABLE job_history`)
	rawExec(t, path, `UPDATE sortie_meta SET value = 5 WHERE key = 'schema_version'`)

	st = openAt(t, path, nil)
	finishFirst(t, st, "default", &store.Report{Kind: store.ReportCompleted})
	got, err := st.JobHistory(ctx, &store.JobHistoryParams{})
	if err != nil {
		t.Fatalf("JobHistory after migrating error: %v", err)
	}
	want := []store.HistoryRow{{Queue: "default", At: store.HistoryMinute(t0), Outcome: store.HistoryCompleted, Count: 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JobHistory after migrating (-want +got):\n%s", diff)
	}
	counts, err := st.JobCounts(ctx, &store.JobCountsParams{})
	if err != nil || len(counts) != 2 {
		t.Errorf("JobCounts after migrating = %+v, %v; want one available and one completed job", counts, err)
	}
}
