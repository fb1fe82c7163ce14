package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

var txNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// newTxStore opens a Store on a fresh schema.
func newTxStore(t *testing.T) *pgstore.Store {
	t.Helper()
	return harness().New(t).(*pgstore.Store)
}

// begin starts a transaction on st's pool, rolled back when the test ends
// unless it was committed.
func begin(t *testing.T, st *pgstore.Store) pgx.Tx {
	t.Helper()
	tx, err := st.Pool().Begin(context.Background())
	if err != nil {
		t.Fatalf("Begin() error: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

func commit(t *testing.T, tx pgx.Tx) {
	t.Helper()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("Commit() error: %v", err)
	}
}

func plainJob(key string) *store.NewJob {
	return &store.NewJob{Kind: "k", Queue: "q", Args: []byte(`{}`), Priority: 2, MaxAttempts: 3, UniqueKey: key}
}

func counts(t *testing.T, st store.Store) []store.QueueStateCount {
	t.Helper()
	c, err := st.JobCounts(context.Background(), &store.JobCountsParams{})
	if err != nil {
		t.Fatalf("JobCounts() error: %v", err)
	}
	return c
}

func wantState(t *testing.T, st store.Store, id int64, want store.JobState) *store.JobRow {
	t.Helper()
	row, err := st.JobGet(context.Background(), &store.JobGetParams{ID: id})
	if err != nil {
		t.Fatalf("JobGet(%d) error: %v", id, err)
	}
	if row.State != want {
		t.Fatalf("job %d is %s, want %s", id, row.State, want)
	}
	return row
}

func wantMissing(t *testing.T, st store.Store, id int64) {
	t.Helper()
	if _, err := st.JobGet(context.Background(), &store.JobGetParams{ID: id}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("JobGet(%d) error = %v, want ErrNotFound", id, err)
	}
}

func TestJobEnqueueManyTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("commit", func(t *testing.T) {
		t.Parallel()
		st := newTxStore(t)
		held, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{plainJob("held")}, Now: txNow})
		if err != nil {
			t.Fatalf("JobEnqueueMany() error: %v", err)
		}
		tx := begin(t, st)
		res, err := st.Tx(tx).JobEnqueueMany(ctx, &store.JobEnqueueManyParams{
			Jobs: []*store.NewJob{plainJob("a"), plainJob("a"), plainJob("held"), plainJob("")}, Now: txNow,
		})
		if err != nil {
			t.Fatalf("JobEnqueueManyTx() error: %v", err)
		}
		a := res[0].ID
		want := []store.EnqueueResult{
			{ID: a, State: store.JobStateAvailable},
			{ID: a, Duplicate: true, State: store.JobStateAvailable},
			{ID: held[0].ID, Duplicate: true, State: store.JobStateAvailable},
			{ID: res[3].ID, State: store.JobStateAvailable},
		}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Fatalf("JobEnqueueManyTx() results (-want +got):\n%s", diff)
		}
		if res[3].ID <= a {
			t.Errorf("IDs %d, %d do not increase in batch order", a, res[3].ID)
		}
		// A second enqueue in the same transaction sees the first's keys.
		again, err := st.Tx(tx).JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{plainJob("a")}, Now: txNow})
		if err != nil {
			t.Fatalf("second JobEnqueueManyTx() error: %v", err)
		}
		if !again[0].Duplicate || again[0].ID != a {
			t.Errorf("second JobEnqueueManyTx() = %+v, want a duplicate of job %d", again[0], a)
		}
		wantMissing(t, st, a) // not visible outside tx before commit
		commit(t, tx)
		wantState(t, st, a, store.JobStateAvailable)
		wantState(t, st, res[3].ID, store.JobStateAvailable)
		dup, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{plainJob("a")}, Now: txNow})
		if err != nil {
			t.Fatalf("JobEnqueueMany() error: %v", err)
		}
		if !dup[0].Duplicate || dup[0].ID != a {
			t.Errorf("JobEnqueueMany() after commit = %+v, want a duplicate of job %d", dup[0], a)
		}
	})

	t.Run("rollback", func(t *testing.T) {
		t.Parallel()
		st := newTxStore(t)
		before := counts(t, st)
		tx := begin(t, st)
		res, err := st.Tx(tx).JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{plainJob("k"), plainJob("")}, Now: txNow})
		if err != nil {
			t.Fatalf("JobEnqueueManyTx() error: %v", err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatalf("Rollback() error: %v", err)
		}
		for _, r := range res {
			wantMissing(t, st, r.ID)
		}
		if diff := cmp.Diff(before, counts(t, st)); diff != "" {
			t.Errorf("JobCounts() changed by a rolled-back enqueue (-before +after):\n%s", diff)
		}
		// The rolled-back job held no key.
		again, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{plainJob("k")}, Now: txNow})
		if err != nil {
			t.Fatalf("JobEnqueueMany() error: %v", err)
		}
		if again[0].Duplicate {
			t.Errorf("JobEnqueueMany() after rollback = %+v, want a new job", again[0])
		}
	})

	t.Run("dependencies", func(t *testing.T) {
		t.Parallel()
		st := newTxStore(t)
		tx := begin(t, st)
		dep := plainJob("")
		dep.DependsOnIndex = []int{0}
		res, err := st.Tx(tx).JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{plainJob(""), dep}, Now: txNow, Workflow: true})
		if err != nil {
			t.Fatalf("JobEnqueueManyTx() error: %v", err)
		}
		commit(t, tx)
		row := wantState(t, st, res[1].ID, store.JobStateWaiting)
		if row.WorkflowID != res[0].ID {
			t.Errorf("WorkflowID = %d, want %d", row.WorkflowID, res[0].ID)
		}
	})

	t.Run("nil pgx.Tx", func(t *testing.T) {
		t.Parallel()
		st := newTxStore(t)
		tx := st.Tx(nil)
		if tx.Store() != st {
			t.Errorf("Tx(nil).Store() = %p, want the store %p", tx.Store(), st)
		}
		_, err := tx.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{plainJob("")}, Now: txNow})
		if !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil pgx.Tx") {
			t.Errorf("Tx(nil).JobEnqueueMany() error = %v, want ErrInvalidArgument naming the nil pgx.Tx", err)
		}
		_, err = tx.JobFinish(ctx, &store.JobFinishParams{Reports: []*store.Report{{ID: 1, Kind: store.ReportCompleted}}, Now: txNow})
		if !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil pgx.Tx") {
			t.Errorf("Tx(nil).JobFinish() error = %v, want ErrInvalidArgument naming the nil pgx.Tx", err)
		}
	})
}

// TestJobEnqueueManyTxUniqueRace enqueues one unique key in two
// transactions: the second waits for the first's uncommitted job, finds
// the key taken when the first commits, and reports a duplicate of it,
// leaving no job of its batch behind.
func TestJobEnqueueManyTxUniqueRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newTxStore(t)
	tx1 := begin(t, st)
	first, err := st.Tx(tx1).JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{plainJob("k")}, Now: txNow})
	if err != nil {
		t.Fatalf("JobEnqueueManyTx(tx1) error: %v", err)
	}
	tx2 := begin(t, st)
	type result struct {
		res []store.EnqueueResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := st.Tx(tx2).JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{plainJob(""), plainJob("k")}, Now: txNow})
		done <- result{res, err}
	}()
	waitBlocked(t, st, tx2.Conn().PgConn().PID())
	commit(t, tx1)
	r := <-done
	if r.err != nil {
		t.Fatalf("JobEnqueueManyTx(tx2) error: %v", r.err)
	}
	if !r.res[1].Duplicate || r.res[1].ID != first[0].ID {
		t.Fatalf("JobEnqueueManyTx(tx2)[1] = %+v, want a duplicate of job %d", r.res[1], first[0].ID)
	}
	commit(t, tx2)
	wantState(t, st, r.res[0].ID, store.JobStateAvailable)
	var n int64
	for _, c := range counts(t, st) {
		n += c.Count
	}
	if n != 2 {
		t.Errorf("JobCounts() total %d jobs, want 2 (one per transaction)", n)
	}
}

// waitBlocked waits until the backend pid waits for a lock.
func waitBlocked(t *testing.T, st *pgstore.Store, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		err := st.Pool().QueryRow(context.Background(),
			`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`, int64(pid)).Scan(&waiting)
		if err != nil {
			t.Fatalf("read pg_stat_activity: %v", err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d did not wait for a lock within 10s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// claim enqueues n jobs and fetches them.
func claim(t *testing.T, st store.Store, jobs ...*store.NewJob) []*store.JobRow {
	t.Helper()
	ctx := context.Background()
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: txNow}); err != nil {
		t.Fatalf("JobEnqueueMany() error: %v", err)
	}
	rows, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "q", Limit: len(jobs), Now: txNow, Lease: time.Minute, Worker: "w"}))
	if err != nil {
		t.Fatalf("JobFetch() error: %v", err)
	}
	if len(rows) != len(jobs) {
		t.Fatalf("JobFetch() returned %d jobs, want %d", len(rows), len(jobs))
	}
	return rows
}

func TestJobFinishTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	done := txNow.Add(time.Second)

	t.Run("commit", func(t *testing.T) {
		t.Parallel()
		st := newTxStore(t)
		rows := claim(t, st, plainJob("k"), plainJob(""))
		tx := begin(t, st)
		res, err := st.Tx(tx).JobFinish(ctx, &store.JobFinishParams{Now: done, Reports: []*store.Report{
			{ID: rows[0].ID, ClaimToken: rows[0].ClaimToken, Kind: store.ReportCompleted, Result: []byte(`{"n":1}`)},
			{ID: rows[1].ID, ClaimToken: rows[1].ClaimToken + 1, Kind: store.ReportCompleted}, // stale claim
		}})
		if err != nil {
			t.Fatalf("JobFinishTx() error: %v", err)
		}
		want := []store.ReportResult{{Applied: true, State: store.JobStateCompleted}, {}}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Fatalf("JobFinishTx() results (-want +got):\n%s", diff)
		}
		wantState(t, st, rows[0].ID, store.JobStateRunning) // outside tx, before commit
		commit(t, tx)
		row := wantState(t, st, rows[0].ID, store.JobStateCompleted)
		if !row.FinalizedAt.Equal(done) || string(row.Result) != `{"n":1}` {
			t.Errorf("completed job: FinalizedAt %v, Result %s; want %v, {\"n\":1}", row.FinalizedAt, row.Result, done)
		}
		wantState(t, st, rows[1].ID, store.JobStateRunning)
		// The runtime's own outcome afterwards is refused.
		again, err := st.JobFinish(ctx, &store.JobFinishParams{Now: done, Reports: []*store.Report{
			{ID: rows[0].ID, ClaimToken: rows[0].ClaimToken, Kind: store.ReportCompleted},
		}})
		if err != nil {
			t.Fatalf("JobFinish() error: %v", err)
		}
		if again[0].Applied {
			t.Errorf("JobFinish() after a committed JobFinishTx applied, want refused")
		}
		// The unique key was released at commit.
		res2, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{plainJob("k")}, Now: done})
		if err != nil {
			t.Fatalf("JobEnqueueMany() error: %v", err)
		}
		if res2[0].Duplicate {
			t.Errorf("JobEnqueueMany() = %+v, want a new job: the key should be released", res2[0])
		}
	})

	t.Run("rollback", func(t *testing.T) {
		t.Parallel()
		st := newTxStore(t)
		rows := claim(t, st, plainJob(""))
		tx := begin(t, st)
		o := []*store.Report{{ID: rows[0].ID, ClaimToken: rows[0].ClaimToken, Kind: store.ReportCompleted}}
		res, err := st.Tx(tx).JobFinish(ctx, &store.JobFinishParams{Now: done, Reports: o})
		if err != nil || !res[0].Applied {
			t.Fatalf("JobFinishTx() = %+v, %v; want applied", res, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatalf("Rollback() error: %v", err)
		}
		wantState(t, st, rows[0].ID, store.JobStateRunning)
		again, err := st.JobFinish(ctx, &store.JobFinishParams{Now: done, Reports: o})
		if err != nil {
			t.Fatalf("JobFinish() error: %v", err)
		}
		if !again[0].Applied {
			t.Errorf("JobFinish() after a rolled-back JobFinishTx refused, want applied")
		}
		wantState(t, st, rows[0].ID, store.JobStateCompleted)
	})

	t.Run("dependents", func(t *testing.T) {
		t.Parallel()
		st := newTxStore(t)
		rows := claim(t, st, plainJob(""))
		dep := plainJob("")
		dep.DependsOn = []int64{rows[0].ID}
		res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{dep}, Now: txNow})
		if err != nil {
			t.Fatalf("JobEnqueueMany() error: %v", err)
		}
		wantState(t, st, res[0].ID, store.JobStateWaiting)
		tx := begin(t, st)
		fin, err := st.Tx(tx).JobFinish(ctx, &store.JobFinishParams{Now: done, Reports: []*store.Report{
			{ID: rows[0].ID, ClaimToken: rows[0].ClaimToken, Kind: store.ReportCompleted},
		}})
		if err != nil || !fin[0].Applied {
			t.Fatalf("JobFinishTx() = %+v, %v; want applied", fin, err)
		}
		wantState(t, st, res[0].ID, store.JobStateWaiting)
		commit(t, tx)
		wantState(t, st, res[0].ID, store.JobStateAvailable)
	})
}
