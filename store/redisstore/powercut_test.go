package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// claim is a job a worker claimed, with the token its fetch returned.
type claim struct{ id, token int64 }

// cutLedger is what the power-cut test's clients were told: every ID an
// enqueue acknowledged and every claim a fetch returned, the claims their
// workers never reported.
type cutLedger struct {
	mu     sync.Mutex
	ids    map[int64]int
	tokens map[int64][]int64 // token -> the jobs it was handed out for
	held   []claim
}

// cutLoad enqueues jobs (one at a time and in batches of 10) and claims
// them, completing every other claim and holding the rest, until ctx ends.
func cutLoad(ctx context.Context, st *redisstore.Store, l *cutLedger) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			n := 1 + 9*(p%2)
			for ctx.Err() == nil {
				jobs := make([]*store.NewJob, n)
				for i := range jobs {
					jobs[i] = &store.NewJob{Kind: "k", Queue: "cut", Args: []byte(`{}`)}
				}
				res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: jobs})
				if err != nil {
					continue // not acknowledged
				}
				l.mu.Lock()
				for _, r := range res {
					l.ids[r.ID]++
				}
				l.mu.Unlock()
			}
		})
	}
	for w := range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "cut", Limit: 10, Now: now,
					Lease: time.Hour, Worker: "w"})
				if err != nil || len(res.Jobs) == 0 {
					continue
				}
				var done []*store.Report
				l.mu.Lock()
				for i, j := range res.Jobs {
					l.tokens[j.ClaimToken] = append(l.tokens[j.ClaimToken], j.ID)
					if (i+w)%2 == 0 {
						done = append(done, &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted})
					} else {
						l.held = append(l.held, claim{j.ID, j.ClaimToken})
					}
				}
				l.mu.Unlock()
				_, _ = st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: done})
			}
		})
	}
	wg.Wait()
}

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
	l := &cutLedger{ids: make(map[int64]int), tokens: make(map[int64][]int64)}
	lost, gone := 0, make(map[int64]bool)
	for round := range 3 {
		st, err := redisstore.Open(ctx, srv.URL+"?max_retries=-1", nil)
		if err != nil {
			t.Fatalf("round %d: Open: %v", round, err)
		}
		load, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); cutLoad(load, st, l) }()
		time.Sleep(1500 * time.Millisecond) // the load, not a wait for an event
		srv.Kill(t)
		stop()
		<-done
		st.Close()
		srv.Up(t)
		lost += countLost(t, srv.URL, l, gone)
	}
	st, err := redisstore.Open(ctx, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	repeatedIDs, repeatedTokens := 0, 0
	for _, n := range l.ids {
		if n > 1 {
			repeatedIDs++
		}
	}
	for _, jobs := range l.tokens {
		if len(jobs) > 1 {
			repeatedTokens++
		}
	}
	stale, refused, wrong := staleReports(t, st, l.held)
	t.Logf("3 power cuts: %d IDs acknowledged, %d lost; %d claims, %d held; %d IDs and %d tokens repeated; %d stale outcomes, %d refused",
		len(l.ids), lost, len(l.tokens), len(l.held), repeatedIDs, repeatedTokens, stale, refused)
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

// countLost returns how many of the IDs acknowledged so far are missing
// from the store and were not counted before (a power cut lost them),
// adding them to gone.
func countLost(t *testing.T, url string, l *cutLedger, gone map[int64]bool) int {
	t.Helper()
	ctx := context.Background()
	st, err := redisstore.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	present := make(map[int64]bool)
	for after := int64(0); ; {
		rows, err := st.JobList(ctx, &store.JobListParams{Queue: "cut", AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			present[r.ID] = true
		}
		if len(rows) < 1000 {
			break
		}
		after = rows[len(rows)-1].ID
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lost := 0
	for id := range l.ids {
		if !present[id] && !gone[id] {
			gone[id] = true
			lost++
		}
	}
	return lost
}

// staleReports reports every held claim's completion and checks each
// against the job as it was just before: applied when the job was running
// under that token, refused otherwise (stale). It returns how many were
// stale, how many refused, and how many went against the job's state.
func staleReports(t *testing.T, st *redisstore.Store, held []claim) (stale, refused, wrong int) {
	t.Helper()
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range held {
		j, err := st.JobGet(ctx, &store.JobGetParams{ID: c.id})
		live := err == nil && j.State == store.JobStateRunning && j.ClaimToken == c.token
		if !live {
			stale++
		}
		res, err := st.JobFinish(ctx, &store.JobFinishParams{Now: now,
			Reports: []*store.Report{{ID: c.id, ClaimToken: c.token, Kind: store.ReportCompleted}}})
		if err != nil {
			t.Fatal(err)
		}
		if !res[0].Applied {
			refused++
		}
		if res[0].Applied != live {
			wrong++
		}
	}
	return stale, refused, wrong
}

// With appendfsync always Redis fsyncs before it replies, so a power cut
// (the same shim, then SIGKILL) loses no acknowledged enqueue.
func TestPowerCutLosesNothingWithFsyncAlways(t *testing.T) {
	t.Parallel()
	shim := redistest.PowerCutShim(t)
	srv := redistest.StartServer(t, &redistest.ServerOptions{Fsync: redistest.Always, Preload: shim})
	ctx := context.Background()
	l := &cutLedger{ids: make(map[int64]int), tokens: make(map[int64][]int64)}
	st, err := redisstore.Open(ctx, srv.URL+"?max_retries=-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	load, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); cutLoad(load, st, l) }()
	time.Sleep(1500 * time.Millisecond) // the load, not a wait for an event
	srv.Kill(t)
	stop()
	<-done
	st.Close()
	srv.Up(t)
	if lost := countLost(t, srv.URL, l, make(map[int64]bool)); lost != 0 {
		t.Errorf("appendfsync always: a power cut lost %d of %d acknowledged enqueues, want none", lost, len(l.ids))
	}
	t.Logf("appendfsync always: a power cut lost none of %d acknowledged enqueues", len(l.ids))
}
