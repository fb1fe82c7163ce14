package redisstore

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
)

// openWithLog opens a store on a server of its own, logging to the
// returned buffer, and a plain client to the same server.
func openWithLog(t *testing.T) (*Store, *redis.Client, *testkit.LogBuffer) {
	t.Helper()
	st, rdb, logs, _ := openOnServer(t)
	return st, rdb, logs
}

// openOnServer is openWithLog that also returns the server.
func openOnServer(t *testing.T) (*Store, *redis.Client, *testkit.LogBuffer, *redistest.Server) {
	t.Helper()
	srv := redistest.StartServer(t, nil)
	logs := &testkit.LogBuffer{}
	st, err := Open(context.Background(), srv.URL, &Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	opts, _, err := ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return st, rdb, logs, srv
}

// A server that lost the library while a process ran (restarted without
// persistence, FUNCTION FLUSH) serves that process's next call: the store
// loads the library again, says so once, and the call is made; the jobs
// the server kept are still there.
func TestCallLoadsLostLibraryAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, rdb, logs := openWithLog(t)
	now := time.Now()
	enqueue := func() int64 {
		t.Helper()
		res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now,
			Jobs: []*store.NewJob{{Kind: "k", Queue: "q", Args: []byte(`{}`)}}})
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		return res[0].ID
	}
	first := enqueue()
	if err := rdb.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	second := enqueue()
	if v, err := libraryVersion(ctx, rdb); err != nil || v != LibraryVersion {
		t.Fatalf("library version after a call on a flushed server = %d, %v; want %d", v, err, LibraryVersion)
	}
	if n := strings.Count(logs.String(), "loaded sortie's Functions library on the server again: it held none"); n != 1 {
		t.Errorf("log says the library was loaded again %d times, want 1:\n%s", n, logs)
	}
	res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "q", Limit: 10, Now: now, Lease: time.Minute, Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 2 || res.Jobs[0].ID != first || res.Jobs[1].ID != second {
		t.Fatalf("claimed %d jobs after the reload, want the two enqueued (%d, %d)", len(res.Jobs), first, second)
	}
}

// The maintenance round's server check puts the library back too, before
// any call needs it: on a server that holds none, and on one where an
// older process loaded its older library since.
func TestServerCheckLoadsLibraryAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, rdb, logs := openWithLog(t)
	older := LibraryVersion - 1
	for _, c := range []struct {
		name  string
		lose  func() error
		wantv int
		log   string
	}{
		{"flushed", func() error { return rdb.FunctionFlush(ctx).Err() }, 0, "it held none"},
		{"older", func() error { return rdb.FunctionLoadReplace(ctx, renderLibrary(librarySource, older)).Err() }, older,
			"it held version " + strconv.Itoa(older)},
	} {
		if err := c.lose(); err != nil {
			t.Fatal(err)
		}
		if v, err := libraryVersion(ctx, rdb); err != nil || v != c.wantv {
			t.Fatalf("%s: library version before the check = %d, %v; want %d", c.name, v, err, c.wantv)
		}
		if _, err := st.ServerCheck(ctx, &store.ServerCheckParams{}); err != nil {
			t.Fatalf("%s: ServerCheck: %v", c.name, err)
		}
		if v, err := libraryVersion(ctx, rdb); err != nil || v != LibraryVersion {
			t.Fatalf("%s: library version after the check = %d, %v; want %d", c.name, v, err, LibraryVersion)
		}
		if !strings.Contains(logs.String(), c.log) {
			t.Errorf("%s: log does not say %q:\n%s", c.name, c.log, logs)
		}
	}
	// A round that finds the library in place loads nothing.
	before := logs.String()
	if _, err := st.ServerCheck(ctx, &store.ServerCheckParams{}); err != nil {
		t.Fatal(err)
	}
	if logs.String() != before {
		t.Errorf("a check with the library in place logged:\n%s", strings.TrimPrefix(logs.String(), before))
	}
}

// A server that restarted between two maintenance rounds (which no call
// may have seen) is logged once, saying what a restart may have lost.
func TestServerCheckLogsRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, logs, srv := openOnServer(t)
	const msg = "the Redis server restarted or failed over since the last check"
	if _, err := st.ServerCheck(ctx, &store.ServerCheckParams{}); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t, 0, redistest.Kill)
	// The first call after the restart may meet a connection the
	// restart closed.
	testkit.WaitFor(t, 10*time.Second, "a server check after the restart", nil, nil, func() (bool, error) {
		_, err := st.ServerCheck(ctx, &store.ServerCheckParams{})
		return err == nil, nil
	})
	if _, err := st.ServerCheck(ctx, &store.ServerCheckParams{}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), msg); n != 1 || !strings.Contains(logs.String(), "a job lost that way is not reported") {
		t.Errorf("logged %q %d times, want once, saying what may be lost:\n%s", msg, n, logs)
	}
}

// A round whose load of the library fails (here a store that may not
// load it, Options.RequireLibrary) says so once as an error, and still
// reads the server's settings.
func TestServerCheckGoesOnWhenTheLibraryCannotBeLoaded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb, _, srv := openOnServer(t)
	logs := &testkit.LogBuffer{}
	st, err := Open(ctx, srv.URL, &Options{RequireLibrary: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := rdb.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	defer rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	for range 2 {
		got, err := st.ServerCheck(ctx, &store.ServerCheckParams{})
		if err != nil || len(got) != 1 || got[0].Code != store.ProblemEviction {
			t.Fatalf("ServerCheck with the library gone = %+v, %v; want the eviction problem read all the same", got, err)
		}
	}
	const msg = "loading it again failed"
	if n := strings.Count(logs.String(), msg); n != 1 || !strings.Contains(logs.String(), "it holds none") {
		t.Errorf("logged %q %d times, want once, saying why:\n%s", msg, n, logs)
	}
}
