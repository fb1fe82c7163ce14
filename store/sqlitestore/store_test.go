package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func openAt(t testing.TB, path string, opts *sqlitestore.Options) *sqlitestore.Store {
	t.Helper()
	st, err := sqlitestore.Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%s) error: %v", path, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func openTemp(t testing.TB, opts *sqlitestore.Options) *sqlitestore.Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "sortie.db"), opts)
}

func newJob(kind string) *store.NewJob {
	return &store.NewJob{Kind: kind, Queue: "default", Args: []byte(`{}`)}
}

func enqueue(t testing.TB, st store.Store, jobs ...*store.NewJob) []store.EnqueueResult {
	t.Helper()
	res, err := st.JobEnqueueMany(context.Background(), &store.JobEnqueueManyParams{Jobs: jobs, Now: t0})
	if err != nil {
		t.Fatalf("JobEnqueueMany(%d jobs) error: %v", len(jobs), err)
	}
	return res
}

func countOf(t testing.TB, st store.Store, queue string, state store.JobState) int64 {
	t.Helper()
	cs, err := st.JobCounts(context.Background(), &store.JobCountsParams{Queue: queue})
	if err != nil {
		t.Fatalf("JobCounts() error: %v", err)
	}
	for _, c := range cs {
		if c.State == state {
			return c.Count
		}
	}
	return 0
}

func listAll(t testing.TB, st store.Store) []*store.JobRow {
	t.Helper()
	var all []*store.JobRow
	var after int64
	for {
		page, err := st.JobList(context.Background(), &store.JobListParams{AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatalf("JobList() error: %v", err)
		}
		all = append(all, page...)
		if len(page) < 1000 {
			return all
		}
		after = page[len(page)-1].ID
	}
}

// Concurrent single-job enqueues share group transactions, every job is
// committed once with its own increasing ID, and all survive a reopen.
func TestGroupCommitConcurrentEnqueue(t *testing.T) {
	t.Parallel()
	st := openTemp(t, nil)
	const producers, each = 8, 100
	ids := make([][]int64, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				res, err := st.JobEnqueueMany(context.Background(), &store.JobEnqueueManyParams{
					Jobs: []*store.NewJob{newJob(fmt.Sprintf("p%d", p))}, Now: t0})
				if err != nil {
					t.Errorf("JobEnqueueMany() error: %v", err)
					return
				}
				ids[p] = append(ids[p], res[0].ID)
			}
		}()
	}
	wg.Wait()
	seen := make(map[int64]bool)
	for p, list := range ids {
		for i, id := range list {
			if seen[id] {
				t.Errorf("ID %d returned twice", id)
			}
			seen[id] = true
			if i > 0 && id <= list[i-1] {
				t.Errorf("producer %d: ID %d after %d, want increasing", p, id, list[i-1])
			}
		}
	}
	if got := countOf(t, st, "default", store.JobStateAvailable); got != producers*each {
		t.Errorf("JobCounts(available) = %d, want %d", got, producers*each)
	}
	if g := sqlitestore.Groups(st); g >= producers*each {
		t.Logf("%d enqueues took %d group transactions (no grouping happened)", producers*each, g)
	} else {
		t.Logf("%d enqueues took %d group transactions", producers*each, g)
	}
	path := st.Path()
	if err := st.Close(); err != nil {
		t.Fatalf("Close() error: %v", err)
	}
	st = openAt(t, path, nil)
	if got := len(listAll(t, st)); got != producers*each {
		t.Errorf("after reopen JobList found %d jobs, want %d", got, producers*each)
	}
}

// Requests queued while the writer is busy run in one group; a failing one
// rolls back only its own changes and gets its own error.
func TestGroupSavepointIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTemp(t, nil)
	running := enqueue(t, st, newJob("run"))[0].ID
	if _, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 1, Now: t0, Lease: time.Minute})); err != nil {
		t.Fatalf("JobFetch() error: %v", err)
	}
	groupsBefore := sqlitestore.Groups(st)

	queued := sqlitestore.WatchQueue(st)
	resume := sqlitestore.PauseWriter(st)
	<-queued // the pause itself
	var wg sync.WaitGroup
	errs := make([]error, 4)
	call := func(i int, f func() error) {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f() }()
	}
	call(0, func() error {
		_, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{newJob("a")}, Now: t0})
		return err
	})
	call(1, func() error {
		return sqlitestore.EnqueueThenFail(ctx, st, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{newJob("bad"), newJob("bad")}, Now: t0})
	})
	call(2, func() error { _, err := st.JobRetry(ctx, &store.JobRetryParams{ID: running, Now: t0}); return err })
	call(3, func() error {
		_, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{newJob("b")}, Now: t0})
		return err
	})
	waitQueued(t, queued, 4)
	resume()
	wg.Wait()

	if errs[0] != nil || errs[3] != nil {
		t.Errorf("good enqueues in the group returned %v and %v, want nil", errs[0], errs[3])
	}
	if !errors.Is(errs[1], sqlitestore.ErrInjected) {
		t.Errorf("failing request returned %v, want ErrInjected", errs[1])
	}
	if !errors.Is(errs[2], store.ErrJobRunning) {
		t.Errorf("JobRetry(running) in the group returned %v, want ErrJobRunning", errs[2])
	}
	// The pause request and the four queued ones: two groups at most.
	if g := sqlitestore.Groups(st) - groupsBefore; g > 2 {
		t.Errorf("the queued requests took %d group transactions, want them in one", g-1)
	}
	kinds := map[string]int{}
	for _, j := range listAll(t, st) {
		kinds[j.Kind]++
	}
	if kinds["bad"] != 0 || kinds["a"] != 1 || kinds["b"] != 1 || kinds["run"] != 1 {
		t.Errorf("jobs by kind after the group = %v, want a:1 b:1 run:1 and no bad", kinds)
	}
	if got := countOf(t, st, "default", store.JobStateAvailable); got != 2 {
		t.Errorf("JobCounts(available) = %d, want 2 (the failed request's counts rolled back)", got)
	}
}

// A caller whose context ends while its request waits for the writer gets
// the context's error and the request never runs.
func TestCancelledWhileQueued(t *testing.T) {
	t.Parallel()
	st := openTemp(t, nil)
	queued := sqlitestore.WatchQueue(st)
	resume := sqlitestore.PauseWriter(st)
	<-queued // the pause itself
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{newJob("x")}, Now: t0})
		done <- err
	}()
	waitQueued(t, queued, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("JobEnqueueMany() with a cancelled context = %v, want context.Canceled", err)
	}
	resume()
	if n := len(listAll(t, st)); n != 0 {
		t.Errorf("after a cancelled enqueue, %d jobs stored, want 0", n)
	}
}

// waitQueued waits until n requests wait behind the paused writer.
func waitQueued(t *testing.T, queued <-chan int, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-queued:
			if got == n {
				return
			}
		case <-timeout:
			t.Fatalf("%d requests were not queued within 10s", n)
		}
	}
}

func TestOpenNotSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(path, []byte(strings.Repeat("this is not a database\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := sqlitestore.Open(path, nil)
	if !errors.Is(err, store.ErrNotSortieDatabase) {
		t.Fatalf("Open(text file) = %v, want ErrNotSortieDatabase", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("Open(text file) error %q does not name the path %s", err, path)
	}
	if b, _ := os.ReadFile(path); !strings.HasPrefix(string(b), "this is not") {
		t.Errorf("Open changed a file that is not a database")
	}
}

func TestOpenForeignDatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.db")
	rawExec(t, path, `CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)`)
	_, err := sqlitestore.Open(path, nil)
	if !errors.Is(err, store.ErrNotSortieDatabase) {
		t.Fatalf("Open(database with other tables) = %v, want ErrNotSortieDatabase", err)
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "users") {
		t.Errorf("error %q should name the path and the foreign table", err)
	}
}

func TestOpenNewerSchema(t *testing.T) {
	t.Parallel()
	st := openTemp(t, nil)
	path := st.Path()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	rawExec(t, path, `UPDATE sortie_meta SET value = 99 WHERE key = 'schema_version'`)
	_, err := sqlitestore.Open(path, nil)
	if !errors.Is(err, store.ErrSchemaNewer) {
		t.Fatalf("Open(schema 99) = %v, want ErrSchemaNewer", err)
	}
	for _, want := range []string{path, "99", fmt.Sprint(sqlitestore.SchemaVersion)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestOpenEmptyFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st := openAt(t, path, nil)
	enqueue(t, st, newJob("x"))
}

func TestOpenBadOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		opts sqlitestore.Options
		want string
	}{
		{"synchronous", sqlitestore.Options{Synchronous: 7}, "Options.Synchronous"},
		{"busy", sqlitestore.Options{BusyTimeout: -1}, "Options.BusyTimeout"},
		{"readconns", sqlitestore.Options{ReadConns: -1}, "Options.ReadConns"},
		{"pages", sqlitestore.Options{MaxPageCount: -1}, "Options.MaxPageCount"},
		{"wal negative", sqlitestore.Options{WALSizeLimit: -1}, "Options.WALSizeLimit"},
		{"wal small", sqlitestore.Options{WALSizeLimit: 64 << 10}, "Options.WALSizeLimit must be at least 1048576"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := sqlitestore.Open(filepath.Join(t.TempDir(), "x.db"), &tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open(%+v) = %v, want an error naming %s", tt.opts, err, tt.want)
			}
		})
	}
}

// makeReadOnly makes path unwritable, even for root (chattr +i), and undoes
// it at cleanup; it skips the test when it cannot.
func makeReadOnly(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o555); err != nil {
			t.Skipf("chmod %s: %v", path, err)
		}
		t.Cleanup(func() { _ = os.Chmod(path, 0o755) })
		return
	}
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("cannot make %s read-only as root (chattr +i: %v %s)", path, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", path).Run() })
}

func TestOpenReadOnlyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := openAt(t, filepath.Join(dir, "sortie.db"), nil)
	enqueue(t, st, newJob("x"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	makeReadOnly(t, st.Path())
	_, err := sqlitestore.Open(st.Path(), nil)
	if err == nil {
		t.Fatal("Open(read-only file) returned no error")
	}
	if !strings.Contains(err.Error(), st.Path()) {
		t.Errorf("error %q does not name the path", err)
	}
	t.Logf("read-only file: %v", err)
}

func TestOpenReadOnlyDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	makeReadOnly(t, dir)
	path := filepath.Join(dir, "sortie.db")
	_, err := sqlitestore.Open(path, nil)
	if err == nil {
		t.Fatal("Open(file in read-only directory) returned no error")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the path", err)
	}
	t.Logf("read-only directory: %v", err)
}

// A full database fails the write with a clear error; what was committed
// before stays, and the store keeps working for reads and for writes that
// fit.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTemp(t, &sqlitestore.Options{MaxPageCount: 64})
	big := make([]byte, 2000)
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	var committed []int64
	var fullErr error
	for i := 0; i < 1000 && fullErr == nil; i++ {
		jobs := make([]*store.NewJob, 10)
		for k := range jobs {
			jobs[k] = &store.NewJob{Kind: "big", Queue: "default", Args: big}
		}
		res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: t0})
		if err != nil {
			fullErr = err
			break
		}
		for _, r := range res {
			committed = append(committed, r.ID)
		}
	}
	if fullErr == nil {
		t.Fatal("a 64-page database never filled up")
	}
	if !strings.Contains(fullErr.Error(), "full") || !strings.Contains(fullErr.Error(), st.Path()) {
		t.Errorf("full-disk error %q should say the database is full and name the file", fullErr)
	}
	t.Logf("after %d jobs: %v", len(committed), fullErr)
	got := listAll(t, st)
	if len(got) != len(committed) {
		t.Errorf("after the failed enqueue JobList found %d jobs, want the %d committed", len(got), len(committed))
	}
	if n := countOf(t, st, "default", store.JobStateAvailable); n != int64(len(committed)) {
		t.Errorf("JobCounts(available) = %d, want %d", n, len(committed))
	}
	// Deleting makes room again.
	for _, id := range committed[:20] {
		if _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: id}); err != nil {
			t.Fatalf("JobDelete(%d) on a full database: %v", id, err)
		}
	}
	enqueue(t, st, newJob("small"))
	path := st.Path()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openAt(t, path, nil)
	if n := len(listAll(t, st)); n != len(committed)-20+1 {
		t.Errorf("after reopen %d jobs, want %d", n, len(committed)-20+1)
	}
}

func TestSynchronousModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name                 string
		opts                 *sqlitestore.Options
		relaxed, durableSync int
	}{
		{"default", nil, 2, 2},
		{"normal", &sqlitestore.Options{Synchronous: sqlitestore.SynchronousNormal}, 1, 1},
		{"relaxed", &sqlitestore.Options{RelaxedClaims: true}, 1, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := openTemp(t, tt.opts)
			for range 2 {
				if got, err := sqlitestore.WriterSynchronous(ctx, st, false); err != nil || got != tt.relaxed {
					t.Errorf("synchronous in a claim-only group = %d (%v), want %d", got, err, tt.relaxed)
				}
				if got, err := sqlitestore.WriterSynchronous(ctx, st, true); err != nil || got != tt.durableSync {
					t.Errorf("synchronous in a group with an enqueue = %d (%v), want %d", got, err, tt.durableSync)
				}
			}
		})
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTemp(t, nil)
	id := enqueue(t, st, newJob("x"))[0].ID
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	_, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{newJob("x")}, Now: t0})
	if !errors.Is(err, store.ErrClosed) {
		t.Errorf("JobEnqueueMany after Close = %v, want ErrClosed", err)
	}
	if _, err := st.JobGet(ctx, &store.JobGetParams{ID: id}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("JobGet after Close = %v, want ErrClosed", err)
	}
	if _, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 1, Now: t0})); !errors.Is(err, store.ErrClosed) {
		t.Errorf("JobFetch after Close = %v, want ErrClosed", err)
	}
	if _, err := st.JobCounts(ctx, &store.JobCountsParams{}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("JobCounts after Close = %v, want ErrClosed", err)
	}
}

// Bytes round-trip exactly, including nil and empty.
func TestBytesRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTemp(t, nil)
	for _, b := range [][]byte{nil, {}, []byte(`{"a":1}`), {0, 1, 2, 255}} {
		j := newJob("x")
		j.Args, j.Meta = b, b
		id := enqueue(t, st, j)[0].ID
		row, err := st.JobGet(ctx, &store.JobGetParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if (row.Args == nil) != (b == nil) || string(row.Args) != string(b) || (row.Meta == nil) != (b == nil) || string(row.Meta) != string(b) {
			t.Errorf("Args/Meta %#v came back as %#v / %#v", b, row.Args, row.Meta)
		}
	}
}

// Two stores (as two processes would) on one file share it: both write,
// IDs never collide, and each sees the other's jobs.
func TestTwoStoresOneFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := openTemp(t, nil)
	b := openAt(t, a.Path(), nil)
	var wg sync.WaitGroup
	for _, st := range []*sqlitestore.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{newJob("x"), newJob("y")}, Now: t0}); err != nil {
					t.Errorf("JobEnqueueMany() error: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := len(listAll(t, a)); n != 200 {
		t.Errorf("JobList on the first store found %d jobs, want 200", n)
	}
	if n := countOf(t, b, "default", store.JobStateAvailable); n != 200 {
		t.Errorf("JobCounts on the second store = %d, want 200", n)
	}
}

// A write waits for another connection's write transaction: it goes
// through as soon as that one ends, and fails after Options.BusyTimeout,
// saying so and storing nothing, if it does not end.
func TestWriteWaitsForAnotherConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sortie.db")
	holdLock := func() *sql.Conn {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	enqueueOne := func(st store.Store) error {
		_, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{newJob("x")}, Now: t0})
		return err
	}

	patient := openAt(t, path, &sqlitestore.Options{BusyTimeout: time.Minute})
	busy := sqlitestore.WatchBusy(patient)
	other := holdLock()
	done := make(chan error, 1)
	go func() { done <- enqueueOne(patient) }()
	<-busy // the write is waiting for the lock
	if _, err := other.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("enqueue after the other connection let go: %v", err)
	}

	hasty := openAt(t, path, &sqlitestore.Options{BusyTimeout: 50 * time.Millisecond})
	other = holdLock()
	err := enqueueOne(hasty)
	if err == nil || !strings.Contains(err.Error(), "locked by another connection past the busy timeout") {
		t.Fatalf("enqueue while another connection writes past the busy timeout: error %v, want it to say the database is locked", err)
	}
	if _, err := other.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if n := countOf(t, hasty, "default", store.JobStateAvailable); n != 1 {
		t.Errorf("%d jobs available, want the 1 enqueued before (the refused one stored nothing)", n)
	}
}

func rawExec(t *testing.T, path, q string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// A request that panics fails alone; the writer keeps serving.
func TestWriterSurvivesPanic(t *testing.T) {
	t.Parallel()
	st := openTemp(t, nil)
	err := sqlitestore.PanicRequest(context.Background(), st)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panicking request returned %v, want an error carrying the panic", err)
	}
	enqueue(t, st, newJob("after"))
}

// The checkpointer copies the log into the database while jobs flow, and
// nothing is lost across a reopen.
func TestCheckpointWhileWorking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTemp(t, nil)
	sqlitestore.SetCheckpointPages(st, 8)
	const n = 3000
	batch := make([]*store.NewJob, 100)
	for i := range batch {
		batch[i] = newJob("ck")
	}
	for range n / len(batch) {
		enqueue(t, st, batch...)
	}
	for done := 0; done < n/2; {
		rows, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 50, Now: t0, Lease: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		outs := make([]*store.Report, len(rows))
		for i, r := range rows {
			outs[i] = &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted}
		}
		if _, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: outs, Now: t0}); err != nil {
			t.Fatal(err)
		}
		done += len(rows)
	}
	path := st.Path()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if sqlitestore.Checkpoints(st) == 0 {
		t.Error("no checkpoint ran while writing 3,000 jobs with a checkpoint every 8 pages")
	}
	st = openAt(t, path, nil)
	if got := countOf(t, st, "default", store.JobStateCompleted) + countOf(t, st, "default", store.JobStateAvailable); got != n {
		t.Errorf("after reopen completed + available = %d, want %d", got, n)
	}
	if got := len(listAll(t, st)); got != n {
		t.Errorf("after reopen JobList found %d jobs, want %d", got, n)
	}
}

// In a group, an enqueue that fills the database fails alone; the others
// commit, and counts agree with the rows.
func TestDiskFullInGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTemp(t, &sqlitestore.Options{MaxPageCount: 64})
	big := make([]*store.NewJob, 200)
	for i := range big {
		big[i] = &store.NewJob{Kind: "big", Queue: "default", Args: make([]byte, 2000)}
	}
	queued := sqlitestore.WatchQueue(st)
	resume := sqlitestore.PauseWriter(st)
	<-queued
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, jobs := range [][]*store.NewJob{{newJob("small1")}, big, {newJob("small2")}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: t0})
		}()
		waitQueued(t, queued, i+1)
	}
	resume()
	wg.Wait()
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "full") {
		t.Errorf("oversized enqueue returned %v, want a database-full error", errs[1])
	}
	t.Logf("small enqueues: %v, %v; big: %v", errs[0], errs[2], errs[1])
	want := 0
	for _, i := range []int{0, 2} {
		if errs[i] == nil {
			want++
		}
	}
	if got := len(listAll(t, st)); got != want {
		t.Errorf("JobList found %d jobs, want %d (the small enqueues that succeeded)", got, want)
	}
	if got := countOf(t, st, "default", store.JobStateAvailable); got != int64(want) {
		t.Errorf("JobCounts(available) = %d, want %d", got, want)
	}
}

// Paths with characters that mean something in a URI open the right file.
func TestOpenOddPath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a dir?x=1#frag%20")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "my jobs?.db")
	st := openAt(t, path, nil)
	enqueue(t, st, newJob("x"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at %q: %v", path, err)
	}
	st = openAt(t, path, nil)
	if n := len(listAll(t, st)); n != 1 {
		t.Errorf("reopened %q has %d jobs, want 1", path, n)
	}
}
