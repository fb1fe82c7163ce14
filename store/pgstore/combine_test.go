package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// A caller whose enqueue waits behind another caller's combined statement
// returns when its own context ends, saying the outcome is unknown; the
// statement goes on and commits both jobs once it can.
func TestCombinedEnqueueHonoursCallerContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	st := openStore(t, pgtest.URL(t), &pgstore.Options{Schema: schema, Migrate: true, MaxConns: 4})
	// Block every insert into jobs until the lock is released.
	locker, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{schema, "jobs"}.Sanitize()+" IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	one := func() *store.JobEnqueueManyParams {
		return &store.JobEnqueueManyParams{Jobs: []*store.NewJob{{Kind: "k", Queue: "q", Priority: 2, MaxAttempts: 1}}, Now: time.Now()}
	}
	first := make(chan error, 1)
	go func() {
		_, err := st.JobEnqueueMany(ctx, one()) // the flusher, blocked on the lock
		first <- err
	}()
	waitForLockWait(t, locker, schema)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = st.JobEnqueueMany(short, one())
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "may still be committed") {
		t.Fatalf("JobEnqueueMany with a short context = %v, want a deadline error saying the jobs may still be committed", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("JobEnqueueMany returned after %v, want soon after its 300ms deadline", took)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the blocked enqueue: %v", err)
	}
	// The flusher ran a second statement for the abandoned caller's job
	// before it returned to its own result.
	counts, err := st.JobCounts(ctx, &store.JobCountsParams{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range counts {
		n += c.Count
	}
	if n != 2 {
		t.Fatalf("jobs in q = %d, want 2 (the abandoned caller's job is still committed by the statement)", n)
	}
}

// waitForLockWait returns once a session waits for a lock on schema's jobs
// table (the flusher's insert behind the test's LOCK TABLE): the event the
// test waits for, read from pg_locks through conn, one query after another.
func waitForLockWait(t *testing.T, conn *pgx.Conn, schema string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var waiting bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE NOT l.granted AND n.nspname = $1 AND c.relname = 'jobs')`, schema).Scan(&waiting)
		if err != nil {
			t.Fatalf("waiting for the flusher to block on the lock: %v", err)
		}
		if waiting {
			return
		}
	}
}
