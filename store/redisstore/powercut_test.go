package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store/redisstore"
)

// A power cut under appendfsync everysec loses the writes Redis had not
// fsynced, the ID and token counters' among them. The test makes the cut
// faithful: redis-server runs with a shim (redistest.PowerCutShim) that
// keeps the append-only file's writes in memory until Redis fsyncs them,
// then is killed with SIGKILL, three times under load. No job ID is
// acknowledged twice and no claim token handed out twice, and after the
// last restart every claim whose job was claimed again, finished or rolled
// back (a stale claim) has its outcome refused, while those still running
// under their token are applied.
func TestPowerCutRepeatsNoIDOrToken(t *testing.T) {
	t.Parallel()
	shim := redistest.PowerCutShim(t)
	srv := redistest.StartServer(t, &redistest.ServerOptions{Fsync: redistest.Everysec, Preload: shim})
	ctx := context.Background()
	l := redistest.NewLedger("cut")
	lost, rolledBack := 0, 0
	for round := range 3 {
		st, err := redisstore.Open(ctx, srv.URL+"?max_retries=-1", nil)
		if err != nil {
			t.Fatalf("round %d: Open: %v", round, err)
		}
		load, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); l.Load(load, st) }()
		time.Sleep(1500 * time.Millisecond) // the load, not a wait for an event
		srv.Kill(t)
		stop()
		<-done
		st.Close()
		srv.Up(t)
		n, r := checkLedger(t, srv.URL, l)
		lost, rolledBack = lost+n, rolledBack+r
	}
	st, err := redisstore.Open(ctx, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	repeatedIDs, repeatedTokens := l.Repeats()
	stale, refused, wrong, err := l.StaleOutcomes(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 power cuts: %d IDs acknowledged, %d lost, %d completions rolled back; %d IDs and %d tokens repeated; %d stale outcomes, %d refused",
		l.Acknowledged(), lost, rolledBack, repeatedIDs, repeatedTokens, stale, refused)
	if lost == 0 {
		t.Error("the power cuts lost no acknowledged enqueue: the test did not cut where it should")
	}
	if repeatedIDs > 0 || repeatedTokens > 0 {
		t.Errorf("after power cuts %d job IDs were acknowledged twice and %d claim tokens handed out twice, want none", repeatedIDs, repeatedTokens)
	}
	if wrong > 0 {
		t.Errorf("%d outcomes were applied or refused against the job's state (stale: %d, refused: %d)", wrong, stale, refused)
	}
}

// checkLedger opens the store at url and returns the acknowledged jobs it
// lost and the completions it rolled back since the ledger's last check.
func checkLedger(t *testing.T, url string, l *redistest.Ledger) (lost, rolledBack int) {
	t.Helper()
	ctx := context.Background()
	st, err := redisstore.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lost, rolledBack, err = l.Check(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	return lost, rolledBack
}

// With appendfsync always Redis fsyncs before it replies, so a power cut
// (the same shim, then SIGKILL) loses no acknowledged enqueue.
func TestPowerCutLosesNothingWithFsyncAlways(t *testing.T) {
	t.Parallel()
	shim := redistest.PowerCutShim(t)
	srv := redistest.StartServer(t, &redistest.ServerOptions{Fsync: redistest.Always, Preload: shim})
	ctx := context.Background()
	l := redistest.NewLedger("cut")
	st, err := redisstore.Open(ctx, srv.URL+"?max_retries=-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	load, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Load(load, st) }()
	time.Sleep(1500 * time.Millisecond) // the load, not a wait for an event
	srv.Kill(t)
	stop()
	<-done
	st.Close()
	srv.Up(t)
	if lost, rolledBack := checkLedger(t, srv.URL, l); lost != 0 || rolledBack != 0 {
		t.Errorf("appendfsync always: a power cut lost %d of %d acknowledged enqueues and rolled back %d completions, want none",
			lost, l.Acknowledged(), rolledBack)
	}
	t.Logf("appendfsync always: a power cut lost none of %d acknowledged enqueues", l.Acknowledged())
}
