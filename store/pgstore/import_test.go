package pgstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// importT0 is the creation time of the imported jobs.
var importT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// exportedRow returns job id of an export, in state st, with what that
// state needs.
func exportedRow(id int64, queue string, st store.JobState) *store.JobRow {
	r := &store.JobRow{ID: id, Kind: "imported", Queue: queue, Args: []byte(`{"n":` + strconv.FormatInt(id, 10) + `}`),
		State: st, Priority: store.PriorityDefault, MaxAttempts: 3, RunAt: importT0, CreatedAt: importT0}
	switch st {
	case store.JobStateCompleted, store.JobStateDead:
		r.Attempt, r.AttemptedAt, r.AttemptedBy, r.ClaimToken, r.FinalizedAt = 1, importT0, "w", id, importT0.Add(time.Second)
	case store.JobStateCancelled:
		r.FinalizedAt = importT0.Add(time.Second)
	case store.JobStateScheduled:
		r.RunAt = importT0.Add(time.Hour)
	}
	if st == store.JobStateCompleted {
		r.Result = []byte(`{"ok":true}`)
	}
	if st == store.JobStateDead {
		r.MaxAttempts = 1
		r.Errors = []store.AttemptError{{Attempt: 1, At: importT0, Message: "boom"}}
	}
	return r
}

// Jobs imported by one call depend on, and are cancelled by, jobs an
// earlier call imported: completing such a dependency releases its
// dependent, and retrying it revives the job its ending cancelled.
func TestImportDependsOnEarlierCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t, pgtest.URL(t), &pgstore.Options{Schema: pgtest.Schema(t), Migrate: true, DisableListen: true})
	now := importT0.Add(time.Minute)
	imp := func(rows ...*store.JobRow) {
		t.Helper()
		res, err := st.JobImport(ctx, &store.JobImportParams{Jobs: rows, Now: now})
		if err != nil {
			t.Fatalf("JobImport(%d jobs) error: %v", len(rows), err)
		}
		for i, r := range res {
			if r.Status != store.ImportAdded {
				t.Fatalf("JobImport: job %d %s, want added", rows[i].ID, r.Status)
			}
		}
	}
	imp(exportedRow(1, "parents", store.JobStateAvailable), exportedRow(2, "parents", store.JobStateDead))
	waiting := exportedRow(3, "kids", store.JobStateWaiting)
	waiting.DependsOn = []int64{1}
	cancelled := exportedRow(4, "kids", store.JobStateCancelled)
	cancelled.DependsOn, cancelled.CancelledBy = []int64{2}, 2
	cancelled.Errors = []store.AttemptError{{At: importT0, Message: store.DependencyEndedMessage(2, store.JobStateDead)}}
	imp(waiting, cancelled)

	finishFirst(t, st, "parents", now, &store.Report{Kind: store.ReportCompleted})
	wantImportedState(t, st, 3, store.JobStateAvailable)
	if _, err := st.JobRetry(ctx, &store.JobRetryParams{ID: 2, Now: now}); err != nil {
		t.Fatalf("JobRetry(2) error: %v", err)
	}
	if got := wantImportedState(t, st, 4, store.JobStateWaiting); got.CancelledBy != 0 {
		t.Errorf("revived job 4: CancelledBy %d, want 0", got.CancelledBy)
	}
	finishFirst(t, st, "parents", now, &store.Report{Kind: store.ReportCompleted})
	wantImportedState(t, st, 4, store.JobStateAvailable)
}

// wantImportedState fails the test unless job id is in state want.
func wantImportedState(t *testing.T, st store.Store, id int64, want store.JobState) *store.JobRow {
	t.Helper()
	got, err := st.JobGet(context.Background(), &store.JobGetParams{ID: id})
	if err != nil || got.State != want {
		t.Fatalf("JobGet(%d) = %+v, %v; want state %s", id, got, err, want)
	}
	return got
}

// importBenchRows and importBenchBatch are the size of BenchmarkImport:
// the batches the Client sends for a move from SQLite.
const (
	importBenchRows  = 100_000
	importBenchBatch = 5_000
)

// importBenchJobs returns n exported jobs as a store that has run for a
// while holds them: mostly completed, some dead and cancelled, a backlog
// of available and scheduled ones (with unique keys), and a waiting job
// for every 50 that depends on the available job before it.
func importBenchJobs(n int) []*store.JobRow {
	rows := make([]*store.JobRow, n)
	for i := range rows {
		id := int64(i + 1)
		var r *store.JobRow
		switch k := i % 100; {
		case k < 2:
			r = exportedRow(id, "default", store.JobStateDead)
		case k < 4:
			r = exportedRow(id, "default", store.JobStateCancelled)
		case k < 80:
			r = exportedRow(id, "default", store.JobStateCompleted)
		case k < 90 && k != 85:
			r = exportedRow(id, "default", store.JobStateAvailable)
			r.UniqueKey = fmt.Sprintf("key-%d", id)
		case k == 85:
			r = exportedRow(id, "default", store.JobStateWaiting)
			r.DependsOn = []int64{id - 1}
		default:
			r = exportedRow(id, "later", store.JobStateScheduled)
		}
		rows[i] = r
	}
	return rows
}

// BenchmarkImport imports importBenchRows jobs into an empty schema in
// calls of importBenchBatch, and reports jobs per second.
func BenchmarkImport(b *testing.B) {
	ctx := context.Background()
	rows := importBenchJobs(importBenchRows)
	now := importT0.Add(time.Minute)
	for range b.N {
		b.StopTimer()
		st, err := pgstore.Open(ctx, pgtest.URL(b), &pgstore.Options{Schema: pgtest.Schema(b), Migrate: true, DisableListen: true})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for at := 0; at < len(rows); at += importBenchBatch {
			batch := rows[at:min(at+importBenchBatch, len(rows))]
			if _, err := st.JobImport(ctx, &store.JobImportParams{Jobs: batch, Now: now}); err != nil {
				b.Fatalf("JobImport(jobs %d to %d) error: %v", batch[0].ID, batch[len(batch)-1].ID, err)
			}
		}
		b.StopTimer()
		_ = st.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*len(rows))/b.Elapsed().Seconds(), "jobs/s")
}
