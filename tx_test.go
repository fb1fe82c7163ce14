package sortie_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/store/pgstore"
)

// pgApp is an application on PostgreSQL: its pool, shared with a pgstore
// Store, and a table of its own in the test's schema.
type pgApp struct {
	pool   *pgxpool.Pool
	st     *pgstore.Store
	orders string // the application's table
}

func newPGApp(t *testing.T) *pgApp {
	t.Helper()
	url := pgtest.URL(t)
	schema := pgtest.Schema(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("pgxpool.New() = %v", err)
	}
	t.Cleanup(pool.Close)
	st, err := pgstore.New(ctx, pool, &pgstore.Options{Schema: schema, Migrate: true, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("pgstore.New() = %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	app := &pgApp{pool: pool, st: st, orders: schema + ".orders"}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+app.orders+" (id bigint PRIMARY KEY, note text NOT NULL)"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	return app
}

// begin starts an application transaction, rolled back at the end of the
// test unless committed.
func (app *pgApp) begin(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := app.pool.Begin(context.Background())
	if err != nil {
		t.Fatalf("Begin() = %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

func (app *pgApp) insertOrder(ctx context.Context, tx pgx.Tx, id int64, note string) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+app.orders+" (id, note) VALUES ($1, $2)", id, note)
	return err
}

func (app *pgApp) hasOrder(t *testing.T, id int64) bool {
	t.Helper()
	var n int
	if err := app.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+app.orders+" WHERE id = $1", id).Scan(&n); err != nil {
		t.Fatalf("read orders: %v", err)
	}
	return n == 1
}

// logBuffer collects a logger's lines for a test to read.
type logBuffer struct{ testkit.LogBuffer }

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func msgWorkers(f func(ctx context.Context, job *sortie.Job[Msg]) error) *sortie.Workers {
	w := sortie.NewWorkers()
	sortie.AddWorker(w, sortie.WorkFunc(f), nil)
	return w
}

func TestEnqueueTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("commit", func(t *testing.T) {
		t.Parallel()
		app := newPGApp(t)
		c := startClient(t, app.st, &sortie.Config{
			Queues:  map[string]sortie.QueueConfig{sortie.QueueDefault: {MaxWorkers: 2}},
			Workers: msgWorkers(func(context.Context, *sortie.Job[Msg]) error { return nil }),
		})
		ev := record(t, c)
		tx := app.begin(t)
		if err := app.insertOrder(ctx, tx, 1, "order"); err != nil {
			t.Fatal(err)
		}
		res, err := c.EnqueueTx(ctx, app.st.Tx(tx), Msg{Text: "ship order 1"}, nil)
		if err != nil {
			t.Fatalf("EnqueueTx() = %v", err)
		}
		if res.Duplicate || res.State != sortie.JobStateAvailable {
			t.Fatalf("EnqueueTx() = %+v, want a new available job", res)
		}
		if _, err := c.JobGet(ctx, res.ID); !errors.Is(err, sortie.ErrNotFound) {
			t.Fatalf("JobGet(%d) before commit = %v, want ErrNotFound", res.ID, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("Commit() = %v", err)
		}
		if got := ev.finished(t, res.ID, 1).Outcome; got != sortie.OutcomeCompleted {
			t.Errorf("job %d finished %s, want completed", res.ID, got)
		}
		if !app.hasOrder(t, 1) {
			t.Errorf("order 1 missing after commit")
		}
	})

	t.Run("rollback", func(t *testing.T) {
		t.Parallel()
		app := newPGApp(t)
		c := startClient(t, app.st, &sortie.Config{
			Queues:  map[string]sortie.QueueConfig{sortie.QueueDefault: {MaxWorkers: 2}},
			Workers: msgWorkers(func(context.Context, *sortie.Job[Msg]) error { return nil }),
		})
		ev := record(t, c)
		before, err := c.JobCounts(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		tx := app.begin(t)
		if err := app.insertOrder(ctx, tx, 1, "order"); err != nil {
			t.Fatal(err)
		}
		res, err := c.EnqueueTx(ctx, app.st.Tx(tx), Msg{Text: "ship order 1"}, &sortie.EnqueueOpts{UniqueKey: "order:1"})
		if err != nil {
			t.Fatalf("EnqueueTx() = %v", err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatalf("Rollback() = %v", err)
		}
		if _, err := c.JobGet(ctx, res.ID); !errors.Is(err, sortie.ErrNotFound) {
			t.Errorf("JobGet(%d) after rollback = %v, want ErrNotFound", res.ID, err)
		}
		after, err := c.JobCounts(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("JobCounts() = %v after rollback, want %v", after, before)
		}
		if app.hasOrder(t, 1) {
			t.Errorf("order 1 exists after rollback")
		}
		// A job enqueued after the rollback runs; the rolled-back one never
		// started, and its unique key is free.
		marker, err := c.Enqueue(ctx, Msg{Text: "marker"}, &sortie.EnqueueOpts{UniqueKey: "order:1"})
		if err != nil || marker.Duplicate {
			t.Fatalf("Enqueue(marker) = %+v, %v; want a new job", marker, err)
		}
		ev.finished(t, marker.ID, 1)
		ev.mu.Lock()
		defer ev.mu.Unlock()
		for _, e := range ev.all {
			if e.Job.ID == res.ID && e.Kind != sortie.EventJobEnqueued {
				t.Errorf("rolled-back job %d had a %v event", res.ID, e.Kind)
			}
		}
	})

	t.Run("many with unique keys", func(t *testing.T) {
		t.Parallel()
		app := newPGApp(t)
		c := newClient(t, app.st, &sortie.Config{})
		held := mustEnqueue(t, c, Msg{Text: "held"}, &sortie.EnqueueOpts{UniqueKey: "held"})
		tx := app.begin(t)
		// Invalid options fail before the store and leave tx usable.
		if _, err := c.EnqueueTx(ctx, app.st.Tx(tx), Msg{}, &sortie.EnqueueOpts{Priority: 9}); !errors.Is(err, sortie.ErrInvalidArgument) {
			t.Fatalf("EnqueueTx(Priority 9) = %v, want ErrInvalidArgument", err)
		}
		res, err := c.EnqueueManyTx(ctx, app.st.Tx(tx), []sortie.EnqueueParams{
			{Args: Msg{Text: "a"}, Opts: &sortie.EnqueueOpts{UniqueKey: "k1", Queue: "mail"}},
			{Args: Msg{Text: "b"}, Opts: &sortie.EnqueueOpts{UniqueKey: "k1"}},
			{Args: Other{}, Opts: &sortie.EnqueueOpts{UniqueKey: "held"}},
			{Args: Other{}, Opts: &sortie.EnqueueOpts{UniqueKey: "k2", RunIn: time.Hour}},
		})
		if err != nil {
			t.Fatalf("EnqueueManyTx() = %v", err)
		}
		if res[0].Duplicate || !res[1].Duplicate || res[1].ID != res[0].ID {
			t.Errorf("EnqueueManyTx() = %+v: job 2 should duplicate job 1 of the batch", res)
		}
		if !res[2].Duplicate || res[2].ID != held {
			t.Errorf("EnqueueManyTx()[2] = %+v, want a duplicate of job %d", res[2], held)
		}
		if res[3].Duplicate || res[3].State != sortie.JobStateScheduled {
			t.Errorf("EnqueueManyTx()[3] = %+v, want a new scheduled job", res[3])
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("Commit() = %v", err)
		}
		if row := mustGet(t, c, res[0].ID); row.Queue != "mail" || row.UniqueKey != "k1" || row.MaxAttempts != 25 {
			t.Errorf("job %d: queue %q, unique key %q, max attempts %d; want mail, k1, 25", row.ID, row.Queue, row.UniqueKey, row.MaxAttempts)
		}
		dup, err := c.Enqueue(ctx, Msg{}, &sortie.EnqueueOpts{UniqueKey: "k2"})
		if err != nil || !dup.Duplicate || dup.ID != res[3].ID {
			t.Errorf("Enqueue(k2) after commit = %+v, %v; want a duplicate of job %d", dup, err, res[3].ID)
		}
	})

	t.Run("refused transactions", func(t *testing.T) {
		t.Parallel()
		app, other := newPGApp(t), newPGApp(t)
		c := newClient(t, app.st, &sortie.Config{})
		_, err := c.EnqueueTx(ctx, other.st.Tx(other.begin(t)), Msg{}, nil)
		if !errors.Is(err, sortie.ErrInvalidArgument) || !strings.Contains(err.Error(), "not by the client's store") {
			t.Errorf("EnqueueTx(a Tx of another store) = %v, want ErrInvalidArgument saying so", err)
		}
		if _, err := c.EnqueueTx(ctx, app.st.Tx(nil), Msg{}, nil); !errors.Is(err, sortie.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil pgx.Tx") {
			t.Errorf("EnqueueTx(Tx(nil)) = %v, want ErrInvalidArgument naming the nil pgx.Tx", err)
		}
		if _, err := c.EnqueueTx(ctx, nil, Msg{}, nil); !errors.Is(err, sortie.ErrInvalidArgument) {
			t.Errorf("EnqueueTx(nil) = %v, want ErrInvalidArgument", err)
		}
	})
}

// A client on a store that cannot work inside the application's
// transaction (memstore makes no Tx) refuses a Tx of another store, and
// CompleteTx outside a handler says so.
func TestEnqueueTxOfAnotherStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	app := newPGApp(t)
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	tx := app.st.Tx(app.begin(t))
	var completeErr error
	c := newClient(t, st, &sortie.Config{Workers: msgWorkers(func(ctx context.Context, job *sortie.Job[Msg]) error {
		completeErr = sortie.CompleteTx(ctx, tx, job)
		return nil
	})})
	if _, err := c.EnqueueTx(ctx, tx, Msg{}, nil); !errors.Is(err, sortie.ErrInvalidArgument) || !strings.Contains(err.Error(), "*pgstore.Store, not by the client's store *memstore.Store") {
		t.Errorf("EnqueueTx() on memstore = %v, want ErrInvalidArgument naming both stores", err)
	}
	if _, err := c.EnqueueManyTx(ctx, tx, []sortie.EnqueueParams{{Args: Msg{}}}); !errors.Is(err, sortie.ErrInvalidArgument) {
		t.Errorf("EnqueueManyTx() on memstore = %v, want ErrInvalidArgument", err)
	}
	mustEnqueue(t, c, Msg{}, nil)
	if _, err := c.Drain(ctx); err != nil {
		t.Fatalf("Drain() = %v", err)
	}
	if !errors.Is(completeErr, sortie.ErrInvalidArgument) {
		t.Errorf("CompleteTx() on memstore = %v, want ErrInvalidArgument", completeErr)
	}
	if err := sortie.CompleteTx(ctx, tx, &sortie.Job[Msg]{JobRow: &sortie.JobRow{ID: 1}}); !errors.Is(err, sortie.ErrNotInJob) {
		t.Errorf("CompleteTx() outside a handler = %v, want ErrNotInJob", err)
	}
}

// TestCompleteTx completes jobs inside the application's transaction,
// committed or rolled back, with the handler returning nil or an outcome
// after it.
func TestCompleteTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	app := newPGApp(t)
	logs := &logBuffer{}
	var c *sortie.Client
	workers := msgWorkers(func(ctx context.Context, job *sortie.Job[Msg]) error {
		tx, err := app.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := app.insertOrder(ctx, tx, job.ID, job.Args.Text); err != nil {
			return err
		}
		if err := sortie.SetResult(ctx, job.Args.Text); err != nil {
			return err
		}
		if err := sortie.CompleteTx(ctx, app.st.Tx(tx), job); err != nil {
			return err
		}
		commit, fail, _ := strings.Cut(job.Args.Text, "+")
		if commit == "commit" {
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			// Keep working past a few heartbeats: the job is no longer
			// running in the store, which must not read as a lost lease.
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(300 * time.Millisecond):
			}
		} else if err := tx.Rollback(ctx); err != nil {
			return err
		}
		if fail != "" {
			return sortie.Cancel(errors.New(fail))
		}
		return nil
	})
	c = startClient(t, app.st, &sortie.Config{
		Queues:            map[string]sortie.QueueConfig{sortie.QueueDefault: {MaxWorkers: 4}},
		Workers:           workers,
		Logger:            logs.logger(),
		Lease:             time.Second,
		HeartbeatInterval: 50 * time.Millisecond,
	})
	ev := record(t, c)

	tests := []struct {
		name      string
		text      string
		wantState sortie.JobState
		wantEvent sortie.Outcome
		wantOrder bool
	}{
		{"commit", "commit", sortie.JobStateCompleted, sortie.OutcomeCompleted, true},
		{"commit then cancel", "commit+oops", sortie.JobStateCompleted, sortie.OutcomeCompleted, true},
		{"rollback", "rollback", sortie.JobStateCompleted, sortie.OutcomeCompleted, false},
		{"rollback then cancel", "rollback+oops", sortie.JobStateCancelled, sortie.OutcomeCancelled, false},
	}
	ids := make([]int64, len(tests))
	for i, tt := range tests {
		ids[i] = mustEnqueue(t, c, Msg{Text: tt.text}, &sortie.EnqueueOpts{MaxAttempts: 1})
	}
	for i := range tests {
		ev.finished(t, ids[i], 1)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	log := logs.String()
	for i, tt := range tests {
		id := ids[i]
		t.Run(tt.name, func(t *testing.T) {
			row := mustGet(t, c, id)
			if row.State != tt.wantState || row.Attempt != 1 {
				t.Errorf("job %d is %s after attempt %d, want %s after attempt 1", id, row.State, row.Attempt, tt.wantState)
			}
			if tt.wantState == sortie.JobStateCompleted && string(row.Result) != fmt.Sprintf("%q", tt.text) {
				t.Errorf("job %d result = %s, want %q", id, row.Result, tt.text)
			}
			if got := app.hasOrder(t, id); got != tt.wantOrder {
				t.Errorf("order of job %d written = %v, want %v", id, got, tt.wantOrder)
			}
			var finished []sortie.Outcome
			ev.mu.Lock()
			for _, e := range ev.all {
				if e.Kind == sortie.EventJobFinished && e.Job.ID == id {
					finished = append(finished, e.Outcome)
				}
			}
			ev.mu.Unlock()
			if len(finished) != 1 || finished[0] != tt.wantEvent {
				t.Errorf("job %d finished events %v, want [%s]", id, finished, tt.wantEvent)
			}
		})
	}
	if strings.Contains(log, "level=WARN") || strings.Contains(log, "level=ERROR") {
		t.Errorf("log has warnings or errors:\n%s", log)
	}
	want := fmt.Sprintf(`level=DEBUG msg="job outcome discarded: the job was completed in a transaction" job_id=%d`, ids[1])
	if !strings.Contains(log, want) {
		t.Errorf("log lacks %q:\n%s", want, log)
	}
}

// txRaceStore is a memstore whose transactions commit at once (so
// CompleteTx finishes the job there and then), and which can hold the next
// lease extension until released.
type txRaceStore struct {
	*memstore.Store
	mu      sync.Mutex
	hold    chan struct{}
	waiting chan struct{}
}

// raceTx is a txRaceStore's transaction: its writes are the store's own.
type raceTx struct{ s *txRaceStore }

func (t raceTx) Store() store.Store { return t.s }

func (t raceTx) JobEnqueueMany(ctx context.Context, p *store.JobEnqueueManyParams) ([]store.EnqueueResult, error) {
	return t.s.JobEnqueueMany(ctx, p)
}

func (t raceTx) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	return t.s.JobFinish(ctx, p)
}

// holdNextExtension makes the next LeaseExtend wait for release, and
// returns a channel closed once it waits.
func (s *txRaceStore) holdNextExtension() (waiting <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold, s.waiting = make(chan struct{}), make(chan struct{})
	hold := s.hold
	return s.waiting, sync.OnceFunc(func() { close(hold) })
}

func (s *txRaceStore) LeaseExtend(ctx context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error) {
	s.mu.Lock()
	hold, waiting := s.hold, s.waiting
	s.hold, s.waiting = nil, nil
	s.mu.Unlock()
	if hold != nil {
		close(waiting)
		<-hold
	}
	return s.Store.LeaseExtend(ctx, p)
}

// A heartbeat that was on its way when the handler's CompleteTx committed
// finds the job no longer running. That is the completion, not a lost
// lease: the handler, still finishing its own work, keeps its context, and
// nothing is logged as lost.
func TestHeartbeatRacingCompleteTx(t *testing.T) {
	t.Parallel()
	st := &txRaceStore{Store: memstore.New()}
	t.Cleanup(func() { _ = st.Close() })
	started, complete, completed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	cancelled := make(chan error, 1)
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		close(started)
		<-complete
		if err := sortie.CompleteTx(ctx, raceTx{st}, job); err != nil {
			return err
		}
		close(completed)
		select {
		case <-ctx.Done():
			cancelled <- context.Cause(ctx)
		case <-time.After(300 * time.Millisecond):
			cancelled <- nil
		}
		return nil
	}), nil)
	logs := &logBuffer{}
	c := startClient(t, st, &sortie.Config{Workers: workers, Logger: logs.logger(), Lease: time.Second,
		HeartbeatInterval: 20 * time.Millisecond, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
	id := mustEnqueue(t, c, Msg{Text: "order"}, nil)
	<-started

	// A heartbeat takes the job, not yet completed, and waits on its way.
	waiting, release := st.holdNextExtension()
	defer release()
	select {
	case <-waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("no heartbeat within 5s")
	}
	close(complete)
	<-completed
	release()

	if err := <-cancelled; err != nil {
		t.Errorf("the handler's context was cancelled after CompleteTx committed: %v", err)
	}
	if log := logs.String(); strings.Contains(log, "lease lost") {
		t.Errorf("log reports a lost lease for a job completed in a transaction:\n%s", log)
	}
	if row := mustGet(t, c, id); row.State != sortie.JobStateCompleted {
		t.Errorf("job is %s, want completed", row.State)
	}
}
