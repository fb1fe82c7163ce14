package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// watchQueue opens a watch on queue and closes it at the end of the test.
func watchQueue(t *testing.T, st *sqlitestore.Store, queue string) *store.Watch {
	t.Helper()
	w, err := st.QueueWatch(context.Background(), &store.QueueWatchParams{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// fetchCount fetches up to limit jobs of the default queue as worker and
// fails unless it got want.
func fetchCount(t *testing.T, st *sqlitestore.Store, worker string, limit, want int) {
	t.Helper()
	rows, err := store.FetchedJobs(st.JobFetch(context.Background(), &store.JobFetchParams{Queue: "default", Limit: limit, Now: t0, Lease: time.Hour, Worker: worker}))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != want {
		t.Fatalf("JobFetch(limit %d) as %s returned %d jobs, want %d", limit, worker, len(rows), want)
	}
}

// The store listens for other processes' commits only while a watched
// queue waits for work: not without watchers, and not while every worker's last
// fetch of the queue came back full (such a worker fetches again as soon
// as it has room).
func TestWakerListensOnlyForIdleWorkers(t *testing.T) {
	t.Parallel()
	st := openTemp(t, nil)
	check := func(when string, want bool) {
		t.Helper()
		if got := sqlitestore.WakerListening(st); got != want {
			t.Errorf("%s: listening = %v, want %v", when, got, want)
		}
	}
	check("with no watch", false)
	w := watchQueue(t, st, "default")
	check("with a watch and no fetch yet", true)
	for range 5 {
		enqueue(t, st, newJob("x"))
	}
	fetchCount(t, st, "a", 2, 2)
	check("after the only worker's fetch came back full", false)
	fetchCount(t, st, "b", 1, 1)
	check("after a second worker's fetch came back full", false)
	fetchCount(t, st, "b", 5, 2)
	check("after one worker's fetch came back short", true)
	fetchCount(t, st, "a", 2, 0)
	check("after both workers' fetches came back short", true)
	enqueue(t, st, newJob("x"), newJob("x"))
	fetchCount(t, st, "a", 1, 1)
	fetchCount(t, st, "b", 1, 1)
	check("after both workers' fetches came back full again", false)
	w.Close()
	check("after the watch closed", false)
	watchQueue(t, st, "default")
	check("with a new watch", true)
}

// wakeModes are the two ways a store learns of other processes' commits:
// file events (Linux) and polling (elsewhere, or without inotify).
var wakeModes = []struct {
	name string
	open func(t *testing.T, path string) *sqlitestore.Store
}{
	{"events", func(t *testing.T, path string) *sqlitestore.Store { return openAt(t, path, nil) }},
	{"polling", func(t *testing.T, path string) *sqlitestore.Store {
		st, err := sqlitestore.OpenPollingWakes(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}},
}

// Another process's commit is noticed and signals the watchers; the
// store's own commits, which signal its watchers directly, are not noticed
// a second time.
func TestWakerNoticesOtherProcesses(t *testing.T) {
	t.Parallel()
	for _, tt := range wakeModes {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := tt.open(t, filepath.Join(t.TempDir(), "sortie.db"))
			b := openAt(t, a.Path(), nil)
			notices := sqlitestore.WakeNotices(a)
			w := watchQueue(t, a, "default")
			const own = 30
			for range own {
				enqueue(t, a, newJob("mine"))
				<-w.C // the direct signal
			}
			enqueue(t, b, newJob("theirs"))
			timer := time.NewTimer(10 * time.Second)
			defer timer.Stop()
			select {
			case v := <-notices:
				if v != own+1 {
					t.Errorf("first notice at wake counter %d, want %d: the store's own enqueues (1 to %d) were noticed", v, own+1, own)
				}
			case <-timer.C:
				t.Fatal("the other store's enqueue was not noticed within 10s")
			}
			select {
			case <-w.C:
			case <-timer.C:
				t.Fatal("no signal on the watch within 10s of the other store's enqueue")
			}
		})
	}
}
