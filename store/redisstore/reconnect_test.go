package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// A store outlives its server's restart: calls fail while the server is
// down, work again once it is back, on the same Store, and a Watch taken
// before the outage is signalled by an enqueue after it (the subscription
// is made again, and the reconnection itself wakes the watcher, since
// messages sent while it was away are lost).
func TestStoreReconnectsAfterServerRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, &redistest.ServerOptions{Fsync: redistest.Always})
	ctx := context.Background()
	st, err := redisstore.Open(ctx, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w, err := st.QueueWatch(ctx, &store.QueueWatchParams{Queue: "rc"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	enqueue := func(ctx context.Context) error {
		_, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now,
			Jobs: []*store.NewJob{{Kind: "k", Queue: "rc", Args: []byte(`{}`)}}})
		return err
	}
	if err := enqueue(ctx); err != nil {
		t.Fatal(err)
	}
	drain(w.C)

	srv.Down(t, redistest.Kill)
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := enqueue(dctx); err == nil {
		t.Fatal("enqueue with the server down succeeded")
	}
	cancel()
	srv.Up(t)

	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := enqueue(cctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("enqueue still fails 20 s after the server came back: %v", err)
		}
	}
	select {
	case <-w.C:
	case <-time.After(20 * time.Second):
		t.Fatal("the watch taken before the outage got no signal after it")
	}
	// The subscription itself is back: the next enqueue's message arrives.
	// (Wait until the hub has subscribed again: the reconnection's own
	// signal says it has.)
	for i := 0; ; i++ {
		drain(w.C)
		if err := enqueue(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.C:
		case <-time.After(2 * time.Second):
			if i < 5 {
				continue
			}
			t.Fatal("no signal for enqueues after the restart: the subscription was not made again")
		}
		break
	}
	counts, err := st.JobCounts(ctx, &store.JobCountsParams{Queue: "rc"})
	if err != nil || len(counts) != 1 || counts[0].Count < 3 {
		t.Fatalf("JobCounts after the restart = %v, %v; want every enqueued job (appendfsync always)", counts, err)
	}
}

// drain empties a signal channel.
func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}
