package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// faultArgs are the args of the jobs of the fault tests.
type faultArgs struct {
	N int `json:"n"`
}

func (faultArgs) Kind() string { return "fault" }

// runCounter counts each job's executions.
type runCounter struct {
	mu    sync.Mutex
	runs  map[int64]int
	total atomic.Int64
	at    int64         // close reached when total reaches at
	reach chan struct{} // closed at the at-th execution
}

func newRunCounter(at int64) *runCounter {
	return &runCounter{runs: map[int64]int{}, at: at, reach: make(chan struct{})}
}

func (r *runCounter) add(id int64) {
	r.mu.Lock()
	r.runs[id]++
	r.mu.Unlock()
	if r.total.Add(1) == r.at {
		close(r.reach)
	}
}

func (r *runCounter) get(id int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id]
}

// TestFaultServerRestart restarts PostgreSQL (its own server) under a
// working client: workers log the outage once, back off, reconnect and
// finish every job, each at most twice (once more only when its lease
// expired while the server was down), and no job stays running more than
// one lease once the server is back.
func TestFaultServerRestart(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t)
	const (
		lease    = 2 * time.Second
		down     = 3 * time.Second // longer than a lease: leases expire
		before   = 2000            // jobs enqueued before the restart
		after    = 20              // and after
		restarts = 300             // executions before the restart
	)
	var logs logBuffer
	logger := newLogger(&logs, "job started", "job finished")
	ctx := context.Background()
	// A schema of a random name: should a client of another test reach this
	// server (its port is free while it is down), it finds nothing to work.
	schema := "sortie_fault_" + randomSuffix(t)
	st := openStore(t, srv.URL, &pgstore.Options{Schema: schema, Migrate: true, Logger: logger})

	// The first holdJobs jobs to start once holding is set run until gate
	// closes, well after the server is back: their leases expire during the
	// outage, so they may be rescued and run again while still running.
	const holdJobs = 4
	var holding atomic.Bool
	var held atomic.Int32
	gate := make(chan struct{})
	var openGate sync.Once
	runs := newRunCounter(restarts)
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[faultArgs]) error {
		runs.add(job.ID)
		// Handlers ignore ctx: one cancelled by a lost lease would fail the
		// attempt, and its retry would wait for seconds of backoff.
		if holding.Load() && held.Add(1) <= holdJobs {
			<-gate
			return nil
		}
		time.Sleep(5 * time.Millisecond) // work, so that jobs are running at the restart
		return nil
	}), nil)
	c, err := sortie.NewClient(st, &sortie.Config{
		Workers:           workers,
		Queues:            map[string]sortie.QueueConfig{sortie.QueueDefault: {MaxWorkers: 16}},
		Logger:            logger,
		Lease:             lease,
		HeartbeatInterval: 500 * time.Millisecond,
		RescueInterval:    500 * time.Millisecond,
		PollInterval:      250 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("NewClient() error: %v", err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start() error: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := c.Stop(sctx); err != nil {
			t.Errorf("Stop() error: %v", err)
		}
	}
	t.Cleanup(stop)
	t.Cleanup(func() { openGate.Do(func() { close(gate) }) }) // before stop

	ids := make([]int64, 0, before+after)
	for i := 0; i < before; i += 500 {
		batch := make([]sortie.EnqueueParams, 500)
		for j := range batch {
			batch[j] = sortie.EnqueueParams{Args: faultArgs{N: i + j}}
		}
		res, err := c.EnqueueMany(ctx, batch)
		if err != nil {
			t.Fatalf("EnqueueMany() error: %v", err)
		}
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}

	select {
	case <-runs.reach:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d executions within 30s, want %d before the restart", runs.total.Load(), restarts)
	}
	holding.Store(true)
	restartAt := time.Now()
	srv.Restart(t, down, pgtest.Fast)
	up := time.Now()
	time.AfterFunc(2*lease, func() { openGate.Do(func() { close(gate) }) })
	atRestart := runs.total.Load()
	t.Logf("restarted after %d executions; server down for %s", atRestart, up.Sub(restartAt).Round(time.Millisecond))
	if atRestart >= before {
		t.Fatalf("every job ran before the server was back (%d executions), want jobs left to run after the restart", atRestart)
	}

	// Enqueues right after the restart may meet connections of the old
	// server; once one fails, the next gets a new connection. A failed
	// enqueue inserted nothing (the old server is gone), so retrying it
	// cannot make a duplicate.
	for i := 0; i < after; i++ {
		var id int64
		for attempt := 1; ; attempt++ {
			r, err := c.Enqueue(ctx, faultArgs{N: before + i}, nil)
			if err == nil {
				id = r.ID
				break
			}
			if attempt == 5 {
				t.Fatalf("Enqueue() after the restart failed %d times, last: %v", attempt, err)
			}
			t.Logf("Enqueue() after the restart, attempt %d: %v", attempt, err)
		}
		ids = append(ids, id)
	}

	// Watch the jobs from a pool of the test's own until every one is
	// completed. A job still running one lease after its lease ended, with
	// the server up for at least one lease meanwhile, is stuck: rescue
	// (every 500 ms) should have taken it back.
	pcfg, err := pgxpool.ParseConfig(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	deadline := time.Now().Add(40 * time.Second)
	for {
		var left, stuck int64
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state <> 'completed'),
			count(*) FILTER (WHERE state = 'running' AND lease_until < now() - $1::interval AND now() > $2::timestamptz + $1::interval)
			FROM jobs`, lease, up).Scan(&left, &stuck)
		if err != nil {
			t.Logf("read job states: %v", err) // a connection from before the restart
		} else {
			if stuck > 0 {
				t.Errorf("%d jobs running more than %s past their lease end, with the server up for that long", stuck, lease)
			}
			if left == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs not completed 40s after the restart; the log:\n%s", left, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("all %d jobs completed %s after the server was back; %d executions", len(ids), time.Since(up).Round(time.Millisecond), runs.total.Load())

	// The listener came back too (it retries with backoff up to 5s).
	logs.waitLine(t, "listener reconnected", 15*time.Second)
	stop()

	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(ids) {
		t.Errorf("the store holds %d jobs, want the %d enqueued", n, len(ids))
	}
	var completed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND state = 'completed'`, ids).Scan(&completed); err != nil {
		t.Fatal(err)
	}
	if completed != len(ids) {
		t.Errorf("%d of the %d jobs enqueued (by the IDs Enqueue returned) are completed, want all", completed, len(ids))
	}
	twice, never := 0, 0
	for _, id := range ids {
		switch r := runs.get(id); {
		case r == 0:
			if never++; never <= 5 {
				var state, by string
				var attempt int
				var token int64
				var errs []byte
				err := pool.QueryRow(ctx, `SELECT state, attempt, coalesce(attempted_by, ''), claim_token, coalesce(errors::text, '')::bytea
					FROM jobs WHERE id = $1`, id).Scan(&state, &attempt, &by, &token, &errs)
				t.Errorf("job %d never ran; its row: state %s, attempt %d, attempted_by %q, claim_token %d, errors %s (read error %v)",
					id, state, attempt, by, token, errs, err)
			}
		case r == 2:
			twice++
		case r > 2:
			t.Errorf("job %d ran %d times, want at most 2", id, r)
		}
	}
	if never > 0 {
		t.Errorf("%d jobs never ran", never)
	}
	var rescued int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE attempt > 1`).Scan(&rescued); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d jobs held across the outage; %d ran twice, %d were claimed twice (rescued after their lease expired)",
		min(held.Load(), holdJobs), twice, rescued)
	if twice > rescued {
		t.Errorf("%d jobs ran twice but only %d were claimed twice: a job ran again without its lease expiring", twice, rescued)
	}

	// Log once, back off: a handful of lines about the outage, not one per
	// failed fetch, heartbeat or completion.
	for _, l := range logs.lines("level=WARN") {
		t.Log(l)
	}
	for _, l := range logs.lines("level=ERROR") {
		t.Log(l)
	}
	outage := len(logs.lines("store unreachable")) + len(logs.lines("listener connection lost")) + len(logs.lines("could not record"))
	if outage < 2 || outage > 10 {
		t.Errorf("%d log lines about the outage, want 2 to 10 (store and listener, once each per outage):\n%s", outage, logs.String())
	}
	if got := len(logs.lines("store unreachable, backing off")); got == 0 {
		t.Errorf("the client did not log the outage:\n%s", logs.String())
	}
	if got := len(logs.lines("store reachable again")); got == 0 {
		t.Errorf("the client did not log the recovery:\n%s", logs.String())
	}
	if got := len(logs.lines("listener connection lost")); got != 1 {
		t.Errorf("the listener logged its loss %d times, want once:\n%s", got, logs.String())
	}
	if got := len(logs.lines("listener reconnected")); got != 1 {
		t.Errorf("the listener logged its return %d times, want once:\n%s", got, logs.String())
	}
}

// TestListenerTerminated kills the listener's backend: the store logs it,
// keeps the watches signalled while reconnecting, reconnects, stops the
// fallback signals and wakes watches by NOTIFY again.
func TestListenerTerminated(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	schema := pgtest.Schema(t)
	var logs logBuffer
	st := openStore(t, u, &pgstore.Options{Schema: schema, Migrate: true, Logger: newLogger(&logs)})
	other := openStore(t, u, &pgstore.Options{Schema: schema, DisableListen: true, Logger: newLogger(&logs)})
	admin := connect(t, u)
	const queue = "mail"

	w, err := st.QueueWatch(context.Background(), &store.QueueWatchParams{Queue: queue})
	if err != nil {
		t.Fatalf("QueueWatch() error: %v", err)
	}
	defer w.Close()
	pid := listenerPID(t, admin, schema, 0, 10*time.Second)
	drain(w, 200*time.Millisecond)
	enqueueOne(t, other, queue)
	expectSignal(t, w, time.Second, "enqueue by another store, listener up")

	var killed []bool
	rows, err := admin.Query(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = 'sortie-listener' AND query = $1`, listenQuery(schema))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ok bool
		if err := rows.Scan(&ok); err != nil {
			t.Fatal(err)
		}
		killed = append(killed, ok)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(killed) != 1 || !killed[0] {
		t.Fatalf("pg_terminate_backend(listener of %s) = %v, want one backend terminated", schema, killed)
	}

	// Workers are woken while the listener is away, with nothing enqueued.
	took := expectSignal(t, w, 2*time.Second, "listener terminated")
	t.Logf("first signal %s after the listener was terminated", took.Round(time.Millisecond))
	logs.waitLine(t, "listener reconnected", 10*time.Second)
	newPID := listenerPID(t, admin, schema, pid, 10*time.Second)
	t.Logf("listener backend %d terminated, %d listens now", pid, newPID)
	if got := len(logs.lines("listener connection lost")); got != 1 {
		t.Errorf("logged the loss %d times, want once:\n%s", got, logs.String())
	}

	// Back: no more fallback signals, and NOTIFY wakes the watch again.
	drain(w, 300*time.Millisecond)
	expectQuiet(t, w, 1500*time.Millisecond, "listener reconnected")
	enqueueOne(t, other, queue)
	took = expectSignal(t, w, time.Second, "enqueue by another store after the listener reconnected")
	t.Logf("woken %s after the enqueue", took.Round(time.Millisecond))
}

// TestListenerDownPolls cuts the network between a Store and the server
// for several seconds: while the listener cannot reconnect, watches are
// signalled at least every second (workers poll), the loss is logged once
// however many reconnections fail, and once the network is back the
// listener reconnects and NOTIFY wakes the watch again.
func TestListenerDownPolls(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	schema := pgtest.Schema(t)
	proxy := newFaultProxy(t, u)
	var logs logBuffer
	st := openStore(t, proxy.url(t, u), &pgstore.Options{Schema: schema, Migrate: true, Logger: newLogger(&logs)})
	other := openStore(t, u, &pgstore.Options{Schema: schema, DisableListen: true, Logger: newLogger(&logs)})
	admin := connect(t, u)
	const queue = "mail"

	w, err := st.QueueWatch(context.Background(), &store.QueueWatchParams{Queue: queue})
	if err != nil {
		t.Fatalf("QueueWatch() error: %v", err)
	}
	defer w.Close()
	listenerPID(t, admin, schema, 0, 10*time.Second)
	drain(w, 200*time.Millisecond)
	expectQuiet(t, w, 1500*time.Millisecond, "listener up")

	proxy.cut()
	const outage = 4 * time.Second
	start := time.Now()
	signals := 0
	for time.Since(start) < outage {
		expectSignal(t, w, 1500*time.Millisecond, "listener down, nothing enqueued")
		signals++
	}
	t.Logf("%d signals in %s with the listener down", signals, outage)
	if signals < 4 {
		t.Errorf("%d signals in %s with the listener down, want at least one a second", signals, outage)
	}
	if got := len(logs.lines("listener connection lost")); got != 1 {
		t.Errorf("logged the loss %d times during failed reconnections, want once:\n%s", got, logs.String())
	}
	if got := len(logs.lines("listener reconnected")); got != 0 {
		t.Fatalf("listener reconnected while the network was cut:\n%s", logs.String())
	}

	proxy.restore()
	restored := time.Now()
	logs.waitLine(t, "listener reconnected", 10*time.Second)
	t.Logf("listener reconnected %s after the network came back", time.Since(restored).Round(time.Millisecond))
	listenerPID(t, admin, schema, 0, 10*time.Second)
	drain(w, 300*time.Millisecond)
	expectQuiet(t, w, 1500*time.Millisecond, "listener reconnected")
	enqueueOne(t, other, queue)
	expectSignal(t, w, time.Second, "enqueue by another store after the listener reconnected")
}

// TestOpenErrors checks that what stops a Store from working is reported
// by Open, clearly, before any worker starts.
func TestOpenErrors(t *testing.T) {
	t.Parallel()

	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := pgstore.Open(ctx, "postgres://postgres@127.0.0.1:1/sortie_test?sslmode=disable&connect_timeout=2", nil)
		wantErr(t, err, "connect", "127.0.0.1:1")
	})

	t.Run("no such database", func(t *testing.T) {
		t.Parallel()
		db := "sortie_no_such_db_" + randomSuffix(t)
		_, err := openErr(t, withURL(t, pgtest.URL(t), "", db), &pgstore.Options{Migrate: true})
		wantErr(t, err, "connect", `database "`+db+`" does not exist`)
	})

	t.Run("no such role", func(t *testing.T) {
		t.Parallel()
		role := "sortie_no_such_role_" + randomSuffix(t)
		_, err := openErr(t, withURL(t, pgtest.URL(t), role, ""), &pgstore.Options{Migrate: true})
		wantErr(t, err, "connect", `role "`+role+`" does not exist`)
	})

	t.Run("no privileges", func(t *testing.T) {
		t.Parallel()
		role := noPrivilegeRole(t)
		u := withURL(t, pgtest.URL(t), role, "")
		// A new schema: creating it needs CREATE on the database.
		_, err := openErr(t, u, &pgstore.Options{Schema: "sortie_test_" + randomSuffix(t), Migrate: true})
		wantErr(t, err, "permission denied", "lacks a privilege", "CREATE on the database")

		// Another role's schema, whose tables this role may not even see:
		// it is told so, not to run `sortie migrate`, nor that the tables
		// it tries to create already exist.
		schema := pgtest.Schema(t)
		openStore(t, pgtest.URL(t), &pgstore.Options{Schema: schema, Migrate: true}).Close()
		for _, migrate := range []bool{false, true} {
			_, err = openErr(t, u, &pgstore.Options{Schema: schema, Migrate: migrate})
			wantErr(t, err, "permission denied", role, "lacks a privilege")
		}
		pgtest.Exec(t, `GRANT CREATE ON DATABASE `+database(t)+` TO `+role)
		pgtest.Exec(t, `GRANT USAGE, CREATE ON SCHEMA `+schema+` TO `+role)
		_, err = openErr(t, u, &pgstore.Options{Schema: schema, Migrate: true})
		wantErr(t, err, "permission denied", role, "lacks a privilege")

		// Some privileges: Open names the missing ones, rather than every
		// later call failing.
		pgtest.Exec(t, `GRANT SELECT ON ALL TABLES IN SCHEMA `+schema+` TO `+role)
		_, err = openErr(t, u, &pgstore.Options{Schema: schema})
		wantErr(t, err, "permission denied", role, "DELETE on jobs", "USAGE on job_id_seq", "lacks a privilege")

		// A database that does not let every role run new functions.
		pgtest.Exec(t, `GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA `+schema+` TO `+role)
		pgtest.Exec(t, `GRANT USAGE ON ALL SEQUENCES IN SCHEMA `+schema+` TO `+role)
		pgtest.Exec(t, `REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA `+schema+` FROM PUBLIC`)
		_, err = openErr(t, u, &pgstore.Options{Schema: schema})
		wantErr(t, err, "permission denied", role, "EXECUTE on claim_jobs()", "EXECUTE on finish_jobs()", "lacks a privilege")

		// All it needs: the store works.
		pgtest.Exec(t, `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA `+schema+` TO `+role)
		st := openStore(t, u, &pgstore.Options{Schema: schema})
		enqueueOne(t, st, "mail")
		got, err := store.FetchedJobs(st.JobFetch(context.Background(), &store.JobFetchParams{Queue: "mail", Limit: 10, Now: time.Now(), Lease: time.Minute, Worker: "w"}))
		if err != nil || len(got) != 1 {
			t.Fatalf("JobFetch() as a role with the privileges = %d jobs, %v; want 1 job", len(got), err)
		}
	})

	t.Run("newer schema", func(t *testing.T) {
		t.Parallel()
		u := pgtest.URL(t)
		schema := pgtest.Schema(t)
		openStore(t, u, &pgstore.Options{Schema: schema, Migrate: true}).Close()
		pgtest.Exec(t, `UPDATE `+schema+`.sortie_meta SET value = 999 WHERE key = 'schema_version'`)
		for _, migrate := range []bool{false, true} {
			_, err := openErr(t, u, &pgstore.Options{Schema: schema, Migrate: migrate})
			if !errors.Is(err, store.ErrSchemaNewer) {
				t.Errorf("Open(Migrate: %v) error = %v, want store.ErrSchemaNewer", migrate, err)
			}
			wantErr(t, err, "999", "upgrade sortie")
		}
		_, err := pgstore.Migrate(context.Background(), u, &pgstore.Options{Schema: schema})
		if !errors.Is(err, store.ErrSchemaNewer) {
			t.Errorf("Migrate() error = %v, want store.ErrSchemaNewer", err)
		}
	})

	t.Run("foreign tables", func(t *testing.T) {
		t.Parallel()
		u := pgtest.URL(t)
		schema := pgtest.Schema(t)
		pgtest.Exec(t, `CREATE TABLE `+schema+`.invoices (id bigint PRIMARY KEY)`)
		for _, migrate := range []bool{false, true} {
			_, err := openErr(t, u, &pgstore.Options{Schema: schema, Migrate: migrate})
			if !errors.Is(err, store.ErrNotSortieDatabase) {
				t.Errorf("Open(Migrate: %v) error = %v, want store.ErrNotSortieDatabase", migrate, err)
			}
			wantErr(t, err, "invoices", "Options.Schema")
		}
	})

	t.Run("not migrated", func(t *testing.T) {
		t.Parallel()
		u := pgtest.URL(t)
		for _, schema := range []string{pgtest.Schema(t), "sortie_test_missing_" + randomSuffix(t)} {
			_, err := openErr(t, u, &pgstore.Options{Schema: schema})
			wantErr(t, err, "version 0", "sortie migrate", "Options.Migrate")
		}
	})
}

// openErr opens a Store that should not open, returning Open's error.
func openErr(t *testing.T, u string, opts *pgstore.Options) (*pgstore.Store, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := pgstore.Open(ctx, u, opts)
	if err == nil {
		_ = st.Close()
		t.Fatalf("Open(%+v) succeeded, want an error", *opts)
	}
	return st, err
}

// wantErr fails t unless err says each of subs.
func wantErr(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("error = nil, want one saying %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

// noPrivilegeRole creates a role that may log in and nothing more, dropped
// when t ends.
func noPrivilegeRole(t *testing.T) string {
	t.Helper()
	role := "sortie_test_noperm_" + randomSuffix(t)
	pgtest.Exec(t, `CREATE ROLE `+role+` WITH LOGIN`)
	t.Cleanup(func() {
		pgtest.Exec(t, `DROP OWNED BY `+role) // its grants
		pgtest.Exec(t, `DROP ROLE `+role)
	})
	return role
}

// database returns the name of the test server's database.
func database(t *testing.T) string {
	t.Helper()
	var name string
	if err := connect(t, pgtest.URL(t)).QueryRow(context.Background(), `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}
