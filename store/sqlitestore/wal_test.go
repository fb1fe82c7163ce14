package sqlitestore_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// envSoak sets the length of TestWALBoundedUnderLoad, a duration like
// "3m"; without it the test runs its short form.
const envSoak = "SORTIE_SOAK"

// soakDuration returns how long the WAL soak runs.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv(envSoak)
	if v == "" {
		return 10 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration like 3m", envSoak, v)
	}
	return d
}

// walMax samples the size of a database's -wal file and keeps the largest.
type walMax struct {
	path string
	max  atomic.Int64
}

func (w *walMax) sample() {
	if fi, err := os.Stat(w.path + "-wal"); err == nil {
		for {
			old := w.max.Load()
			if fi.Size() <= old || w.max.CompareAndSwap(old, fi.Size()) {
				return
			}
		}
	}
}

// soakLoad is the HTTP API's kind of load on a store: producers enqueueing
// one job per call, workers claiming a few jobs and finishing them one by
// one, and readers listing and counting all the while, each in its own
// short call. The WAL's size is sampled after every write.
type soakLoad struct {
	st                          *sqlitestore.Store
	wal                         *walMax
	producers, workers, readers int
	// backlog is how many jobs may wait at most: producers hold back
	// beyond it, so the database grows with the finished jobs only.
	backlog int64
	// until, when positive, ends the load once that many jobs finished.
	until int64

	enqueued, finished, reads atomic.Int64
	pending                   atomic.Int64
}

var soakArgs = []byte(`{"to":"someone@example.com","subject":"a message of a realistic size","body":"` +
	"lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore" + `"}`)

// run drives the load until ctx ends, l.until jobs finished or a call
// fails, and returns the first error.
func (l *soakLoad) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, l.producers+l.workers+l.readers)
	spawn := func(n int, f func(context.Context) error) {
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(ctx); err != nil && ctx.Err() == nil {
					errs <- err
					cancel()
				}
			}()
		}
	}
	spawn(l.producers, l.produce)
	spawn(l.workers, l.work)
	spawn(l.readers, l.read)
	wg.Wait()
	close(errs)
	return <-errs
}

// more says whether the load goes on.
func (l *soakLoad) more(ctx context.Context) bool {
	return ctx.Err() == nil && (l.until <= 0 || l.finished.Load() < l.until)
}

func (l *soakLoad) produce(ctx context.Context) error {
	job := []*store.NewJob{{Kind: "mail", Queue: "default", Args: soakArgs}}
	for l.more(ctx) {
		if l.pending.Load() >= l.backlog {
			// The workers are behind: finish a job here instead of adding
			// one, which keeps this goroutine busy without sleeping.
			if err := l.workOnce(ctx, 1); err != nil {
				return err
			}
			continue
		}
		if _, err := l.st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: job, Now: t0}); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		l.pending.Add(1)
		l.enqueued.Add(1)
		l.wal.sample()
	}
	return nil
}

func (l *soakLoad) work(ctx context.Context) error {
	for l.more(ctx) {
		if err := l.workOnce(ctx, 10); err != nil {
			return err
		}
	}
	return nil
}

// workOnce claims up to limit jobs and finishes them one call each.
func (l *soakLoad) workOnce(ctx context.Context, limit int) error {
	rows, err := store.FetchedJobs(l.st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: limit, Now: t0, Lease: time.Hour, Worker: "soak"}))
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	l.wal.sample()
	for _, r := range rows {
		out := []*store.Report{{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted}}
		if _, err := l.st.JobFinish(ctx, &store.JobFinishParams{Reports: out, Now: t0}); err != nil {
			return fmt.Errorf("finish job %d: %w", r.ID, err)
		}
		l.pending.Add(-1)
		l.finished.Add(1)
		l.wal.sample()
	}
	return nil
}

func (l *soakLoad) read(ctx context.Context) error {
	lists := []*store.JobListParams{
		{Limit: 50, Desc: true},
		{State: store.JobStateAvailable, Limit: 50},
		{State: store.JobStateCompleted, Limit: 50, Desc: true},
		{Queue: "default", Limit: 20},
	}
	for i := 0; l.more(ctx); i++ {
		if _, err := l.st.JobList(ctx, lists[i%len(lists)]); err != nil {
			return fmt.Errorf("list: %w", err)
		}
		if _, err := l.st.JobCounts(ctx, &store.JobCountsParams{}); err != nil {
			return fmt.Errorf("count: %w", err)
		}
		l.reads.Add(2)
	}
	return nil
}

// The write-ahead log stays under the limit through sustained enqueue,
// fetch and finish load with readers listing and counting all the while,
// and Close leaves no log behind. Before the log was restarted it grew by
// about 30 MiB a second under this load, to 3.4 GB in 3 minutes of API load.
// The store runs with SynchronousNormal so that the disk's sync rate does
// not slow the commits: more commits a second make the log grow faster, and
// the bound is the same. Set SORTIE_SOAK (e.g. 3m) for a longer run.
func TestWALBoundedUnderLoad(t *testing.T) {
	t.Parallel()
	dur := soakDuration(t)
	for _, tt := range []struct {
		name  string
		limit int64 // Options.WALSizeLimit, 0 for the default
		dur   time.Duration
	}{
		{name: "default", dur: dur},
		{name: "8MiB", limit: 8 << 20, dur: dur / 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := openTemp(t, &sqlitestore.Options{Synchronous: sqlitestore.SynchronousNormal, WALSizeLimit: tt.limit})
			wal := &walMax{path: st.Path()}
			load := &soakLoad{st: st, wal: wal, producers: 16, workers: 4, readers: 4, backlog: 2000}
			ctx, cancel := context.WithTimeout(context.Background(), tt.dur)
			defer cancel()
			if err := load.run(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("in %s: %d enqueued, %d finished, %d reads; %d checkpoints, %d restarts; largest WAL %.1f MiB",
				tt.dur, load.enqueued.Load(), load.finished.Load(), load.reads.Load(),
				sqlitestore.Checkpoints(st), sqlitestore.Restarts(st), float64(wal.max.Load())/(1<<20))
			limit := cmp.Or(tt.limit, sqlitestore.DefaultWALSizeLimit)
			if got := wal.max.Load(); got > limit {
				t.Errorf("the WAL grew to %.1f MiB under load, want at most %.0f MiB (Options.WALSizeLimit)",
					float64(got)/(1<<20), float64(limit)/(1<<20))
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if n := walSize(t, st.Path()); n > 0 {
				t.Errorf("after Close the WAL holds %d bytes, want it gone or empty", n)
			}
		})
	}
}

// walSize returns the size of the -wal file of the database at path, 0
// when there is none.
func walSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Close copies the log into the database and truncates it, also while
// another process (here another Store) keeps the file open; the last one
// to close removes it. A Close that left the log behind made the next Open
// replay it, 5 s for a 3.4 GB log.
func TestCloseTruncatesWAL(t *testing.T) {
	t.Parallel()
	a := openTemp(t, nil)
	b := openAt(t, a.Path(), nil)
	for range 50 {
		enqueue(t, a, newJob("x"))
		enqueue(t, b, newJob("y"))
	}
	if n := walSize(t, a.Path()); n == 0 {
		t.Fatal("100 enqueues left no log to truncate")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := walSize(t, a.Path()); n > 0 {
		t.Errorf("after the first store closed, the WAL holds %d bytes, want 0", n)
	}
	if got := countOf(t, b, "default", store.JobStateAvailable); got != 100 {
		t.Errorf("the other store counts %d jobs, want 100", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Path() + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after the last store closed, stat of the WAL = %v, want it removed", err)
	}
	c := openAt(t, a.Path(), nil)
	if got := len(listAll(t, c)); got != 100 {
		t.Errorf("after reopening, JobList found %d jobs, want 100", got)
	}
}
