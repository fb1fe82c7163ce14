package chaos

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/delayproxy"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// TestRedisServerFaults takes away what a Redis server promises sortie's
// jobs, each on a server of the scenario's own, while a load enqueues,
// claims, completes and holds claims (redistest.Ledger): a power cut under
// appendfsync everysec and under always, an eviction policy switched on
// at run time, a server with no append-only file that crashes, a full
// server, replies lost after Redis applied an outcome, and a failover to
// a replica and back to a server that lags behind it. Each row
// counts what Redis lost (acknowledged jobs gone; completions rolled
// back, whose jobs run again), IDs and claim tokens handed out twice
// (never), and stale outcomes, all refused.
func TestRedisServerFaults(t *testing.T) {
	t.Parallel()
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, c *counts)
	}{
		{"power cut (everysec)", func(t *testing.T, c *counts) { testPowerCut(t, c, redistest.Everysec) }},
		{"power cut (always)", func(t *testing.T, c *counts) { testPowerCut(t, c, redistest.Always) }},
		{"eviction switched on", testEvictionSwitchedOn},
		{"no append-only file", testNoAppendOnly},
		{"full Redis", testFullRedis},
		{"lost replies", testLostReplies},
		{"failover and back", testFailoverBack},
	} {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			heavy(t)
			sc.run(t, newCounts(t, sc.name, "redis"))
		})
	}
}

// redisAdmin returns a client of srv for CONFIG and INFO.
func redisAdmin(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	opts, _, err := redisstore.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// openCut opens a store on srv that does not retry a failed command
// (a retry could enqueue twice what the ledger counts once).
func openCut(t *testing.T, srv *redistest.Server) *redisstore.Store {
	t.Helper()
	st, err := redisstore.Open(context.Background(), srv.URL+"?max_retries=-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// startLoad starts l's load on st; the returned function ends it and
// waits for it.
func startLoad(l *redistest.Ledger, st store.Store) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Load(ctx, st) }()
	return func() {
		cancel()
		<-done
	}
}

// tally sets c's counts from l on st, once the faults are over, and
// fails t on a repeated ID or token or an outcome applied or refused
// against its job's state.
func tally(t *testing.T, c *counts, l *redistest.Ledger, st store.Store) {
	t.Helper()
	c.enqueued = l.Acknowledged()
	c.repeatedIDs, c.repeatedTokens = l.Repeats()
	stale, refused, wrong, err := l.StaleOutcomes(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	c.refused = refused
	if c.repeatedIDs > 0 || c.repeatedTokens > 0 {
		t.Errorf("%d job IDs were acknowledged twice and %d claim tokens handed out twice, want none", c.repeatedIDs, c.repeatedTokens)
	}
	if wrong > 0 {
		t.Errorf("%d outcomes were applied or refused against the job's state (stale: %d, refused: %d)", wrong, stale, refused)
	}
}

// checkAfter opens the store on srv again and adds to c what the faults
// lost: acknowledged jobs gone, and completions rolled back (their jobs
// run again: duplicates, which the fault explains).
func checkAfter(t *testing.T, c *counts, l *redistest.Ledger, srv *redistest.Server) {
	t.Helper()
	st := openCut(t, srv)
	defer st.Close()
	lost, rolledBack, err := l.Check(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	c.lost += lost
	c.duplicates += rolledBack
	c.explained += rolledBack
}

// A power cut: the server runs with the shim that keeps the append-only
// file's writes in memory until Redis fsyncs them, and is killed with
// SIGKILL under load, several times. With everysec Redis loses about the
// last second of what it acknowledged (LOST, and completions rolled back
// whose jobs run again: DUPLICATES); with always, nothing. Neither ever
// hands an ID or a claim token out twice, and every stale outcome is
// refused.
func testPowerCut(t *testing.T, c *counts, fsync string) {
	srv := redistest.StartServer(t, &redistest.ServerOptions{Fsync: fsync, Preload: redistest.PowerCutShim(t)})
	l := redistest.NewLedger("cut")
	c.lost, c.duplicates, c.explained, c.faults = 0, 0, 0, 0
	for range pick(2, 5) {
		st := openCut(t, srv)
		stop := startLoad(l, st)
		<-time.After(pick(1500*time.Millisecond, 3*time.Second)) // the load, not a wait for an event
		srv.Kill(t)
		stop()
		st.Close()
		c.faults++
		srv.Up(t)
		checkAfter(t, c, l, srv)
	}
	st := openCut(t, srv)
	defer st.Close()
	tally(t, c, l, st)
	switch {
	case fsync == redistest.Always && (c.lost > 0 || c.duplicates > 0):
		t.Errorf("appendfsync always: power cuts lost %d acknowledged jobs and rolled back %d completions, want none", c.lost, c.duplicates)
	case fsync == redistest.Everysec && c.lost == 0:
		t.Error("appendfsync everysec: the power cuts lost nothing: the shim did not cut where it should")
	}
}

// A failover and back: the load runs on server A, which fails over to its
// replica B; A follows B (a partial resync, as a server that comes back
// does) while the load goes on on B; then A is promoted again while B
// still hands out jobs, IDs and claim tokens that A never gets, and the
// load goes on on A. LOST counts the jobs B acknowledged that A never got
// (and DUPLICATES the completions it lacks); no ID or claim token is
// handed out twice (before library version 16, A went on from the values
// it had replicated, into the ones B handed out after), and every stale
// outcome is refused.
func testFailoverBack(t *testing.T, c *counts) {
	a, b := redistest.StartServer(t, nil), redistest.StartServer(t, nil)
	ra, rb := redisAdmin(t, a), redisAdmin(t, b)
	redistest.Follow(t, rb, ra)
	l := redistest.NewLedger("failover")
	load := func(srv *redistest.Server) (stop func()) {
		st := openCut(t, srv)
		stopLoad := startLoad(l, st)
		return func() {
			stopLoad()
			st.Close()
		}
	}
	stop := load(a)
	<-time.After(pick(time.Second, 3*time.Second)) // the load, not a wait for an event
	stop()
	redistest.Replicated(t, ra)
	redistest.FailOver(t, rb, ra)
	stop = load(b)
	<-time.After(pick(time.Second, 3*time.Second)) // the load, not a wait for an event
	redistest.Promote(t, ra)
	<-time.After(pick(500*time.Millisecond, time.Second)) // the load, not a wait for an event
	stop()
	c.faults = 2
	checkAfter(t, c, l, a)
	stop = load(a)
	<-time.After(pick(time.Second, 3*time.Second)) // the load, not a wait for an event
	stop()
	st := openCut(t, a)
	defer st.Close()
	tally(t, c, l, st)
	if c.lost == 0 {
		t.Error("A got every job B acknowledged: the scenario did not fail back to a server that lags")
	}
}

// An eviction policy switched on at run time, with a memory limit the
// load soon reaches: Redis deletes keys at random, jobs and counters
// alike. The store's server check (which a client runs every maintenance
// round) names the problem; the jobs Redis deleted are lost, and no ID or
// claim token is handed out twice, though the counters went too.
func testEvictionSwitchedOn(t *testing.T, c *counts) {
	srv := redistest.StartServer(t, nil)
	admin := redisAdmin(t, srv)
	ctx := context.Background()
	st := openCut(t, srv)
	defer st.Close()
	l := redistest.NewLedger("evict")
	stop := startLoad(l, st)
	<-time.After(500 * time.Millisecond) // the load, not a wait for an event
	used := redistest.InfoInt(t, admin, "memory", "used_memory")
	for _, kv := range [][2]string{{"maxmemory", strconv.FormatInt(used+256<<10, 10)}, {"maxmemory-policy", "allkeys-random"}} {
		if err := admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c.faults = 1
	<-time.After(pick(2*time.Second, 6*time.Second)) // the load, not a wait for an event
	problems, err := st.ServerCheck(ctx, &store.ServerCheckParams{})
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(problems, func(p store.ServerProblem) bool { return p.Code == store.ProblemEviction }) {
		t.Errorf("ServerCheck after the policy was switched to allkeys-random = %+v, want the eviction problem", problems)
	}
	evicted := redistest.InfoInt(t, admin, "stats", "evicted_keys")
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "0"}} {
		if err := admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if evicted == 0 {
		t.Fatal("Redis evicted no key: the scenario did not reach its memory limit")
	}
	lost, rolledBack, err := l.Check(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	c.lost, c.duplicates, c.explained = lost, rolledBack, rolledBack
	c.enqueued = l.Acknowledged()
	c.repeatedIDs, c.repeatedTokens = l.Repeats()
	t.Logf("Redis evicted %d keys: %d of %d acknowledged jobs lost, %d completions undone", evicted, lost, c.enqueued, rolledBack)
	if c.repeatedIDs > 0 || c.repeatedTokens > 0 {
		t.Errorf("%d job IDs were acknowledged twice and %d claim tokens handed out twice, want none", c.repeatedIDs, c.repeatedTokens)
	}
}

// A server with no append-only file and no snapshots: the store's server
// check names the problem before anything is lost, and a crash then loses
// every job acknowledged, which the row shows.
func testNoAppendOnly(t *testing.T, c *counts) {
	srv := redistest.StartServer(t, nil)
	admin := redisAdmin(t, srv)
	ctx := context.Background()
	for _, kv := range [][2]string{{"appendonly", "no"}, {"save", ""}} {
		if err := admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	st := openCut(t, srv)
	problems, err := st.ServerCheck(ctx, &store.ServerCheckParams{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(problems, func(p store.ServerProblem) bool { return p.Code == store.ProblemNoPersistence }) {
		t.Errorf("ServerCheck on a server with no append-only file and no snapshots = %+v, want the no-persistence problem", problems)
	}
	l := redistest.NewLedger("noaof")
	stop := startLoad(l, st)
	<-time.After(pick(time.Second, 3*time.Second)) // the load, not a wait for an event
	srv.Kill(t)
	stop()
	st.Close()
	c.faults = 1
	srv.Up(t)
	c.lost, c.duplicates, c.explained = 0, 0, 0
	checkAfter(t, c, l, srv)
	st = openCut(t, srv)
	defer st.Close()
	tally(t, c, l, st)
	if c.lost != c.enqueued {
		t.Errorf("a crash of a server with no persistence lost %d of %d acknowledged jobs, want all of them", c.lost, c.enqueued)
	}
}

// A full server (maxmemory reached, noeviction) refuses enqueues, which
// are not acknowledged and so not lost; sortie frees it by deleting the
// completed jobs (the functions that only free run under OOM), and
// enqueues work again. Nothing acknowledged is lost.
func testFullRedis(t *testing.T, c *counts) {
	srv := redistest.StartServer(t, nil)
	admin := redisAdmin(t, srv)
	ctx := context.Background()
	st := openCut(t, srv)
	defer st.Close()
	l := redistest.NewLedger("full")
	stop := startLoad(l, st)
	<-time.After(pick(time.Second, 3*time.Second)) // the load, not a wait for an event
	stop()
	if err := admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(redistest.InfoInt(t, admin, "memory", "used_memory")-64<<10, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	c.faults = 1
	oneJob := []*store.NewJob{{Kind: "k", Queue: "full", Args: []byte(`{}`)}}
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: time.Now(), Jobs: oneJob}); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("enqueue on a full server: %v, want Redis's OOM error", err)
	}
	completed := jobsIn(t, st, "full", store.JobStateCompleted)
	for from := 0; from < len(completed); from += store.MaxActMany {
		ids := completed[from:min(from+store.MaxActMany, len(completed))]
		if _, err := st.JobActMany(ctx, &store.JobActManyParams{Action: store.ActionDelete, IDs: ids, Now: time.Now()}); err != nil {
			t.Fatalf("deleting completed jobs on a full server: %v", err)
		}
		l.Deleted(ids...)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(redistest.InfoInt(t, admin, "memory", "used_memory")+4<<20, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	stop = startLoad(l, st)
	<-time.After(500 * time.Millisecond) // the load, not a wait for an event
	stop()
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	lost, rolledBack, err := l.Check(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	c.lost, c.duplicates, c.explained = lost, rolledBack, 0
	tally(t, c, l, st)
	if c.lost > 0 || c.duplicates > 0 {
		t.Errorf("a full server lost %d acknowledged jobs and undid %d completions, want none", c.lost, c.duplicates)
	}
	t.Logf("freed the full server by deleting %d completed jobs; %d jobs acknowledged in all", len(completed), c.enqueued)
}

// Replies lost after Redis applied an outcome: a client with workers
// reaches Redis through a proxy that drops the reply of a completion (and
// its connection) again and again. The completer sends each such report
// again and the store answers with the outcome it recorded: every job
// runs once and finishes once, and no outcome is logged as discarded.
func testLostReplies(t *testing.T, c *counts) {
	u, err := url.Parse(redistest.StoreURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := delayproxy.Start(u.Host, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	direct, err := redisstore.Open(t.Context(), u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	closeWith(t, direct)
	u.Host = proxy.Addr()
	st, err := redisstore.Open(t.Context(), u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	closeWith(t, st)
	n := pick(300, 3000)
	var runs atomic.Int64
	loc := startLocal(t, st, "lost", 8, 10*time.Second, func(ctx context.Context, job *sortie.Job[Sleep]) error {
		runs.Add(1)
		work := time.NewTimer(job.Args.For) // the job's work
		defer work.Stop()
		select {
		case <-work.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	// After each lost reply, the next loss waits for a few completions
	// to be announced: a reply lost for good would only test the retry.
	finished := make(chan struct{}, 1)
	var tokensMu sync.Mutex
	tokens := make(map[int64]map[int64]bool) // claim token -> jobs
	unsubscribe := loc.client.Subscribe(func(e *sortie.Event) {
		if e.Kind == sortie.EventJobStarted {
			tokensMu.Lock()
			if tokens[e.Job.ClaimToken] == nil {
				tokens[e.Job.ClaimToken] = make(map[int64]bool)
			}
			tokens[e.Job.ClaimToken][e.Job.ID] = true
			tokensMu.Unlock()
		}
		if e.Kind == sortie.EventJobFinished {
			select {
			case finished <- struct{}{}:
			default:
			}
		}
	})
	defer unsubscribe()
	done := make(chan struct{})
	var losses atomic.Int64
	go func() {
		for {
			// A completion's reply: sortie_complete answers the state
			// it left, "completed", per report.
			lost := proxy.LoseReply([]byte("$9\r\ncompleted\r\n"))
			select {
			case <-lost:
				losses.Add(1)
			case <-done:
				return
			}
			for range 5 {
				select {
				case <-finished:
				case <-done:
					return
				}
			}
		}
	}()
	ids, err := enqueueLocal(t.Context(), direct, "lost", n, Sleep{For: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	loc.waitCompleted(t, int64(n), 30*time.Second)
	close(done)
	counts, err := direct.JobCounts(t.Context(), &store.JobCountsParams{Queue: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	c.enqueued, c.completed, c.faults = n, 0, int(losses.Load())
	for _, qc := range counts {
		if qc.State == store.JobStateCompleted {
			c.completed = int(qc.Count)
		}
	}
	c.runs = int(runs.Load())
	c.duplicates, c.explained = c.runs-n, 0
	c.lost = n - c.completed
	c.refused = loc.logs.count(msgDiscarded)
	c.repeatedIDs = len(ids) - len(distinct(ids))
	tokensMu.Lock()
	c.repeatedTokens = 0
	for _, jobs := range tokens {
		if len(jobs) > 1 {
			c.repeatedTokens++
		}
	}
	tokensMu.Unlock()
	if finished := loc.completed.Load(); finished != int64(n) {
		t.Errorf("%d completions announced for %d jobs, want one each", finished, n)
	}
	if c.lost != 0 || c.duplicates != 0 || c.refused != 0 || c.repeatedIDs != 0 || c.repeatedTokens != 0 {
		t.Errorf("with %d replies lost: %d jobs not completed, %d runs beyond one a job, %d outcomes logged as discarded, "+
			"%d IDs and %d tokens repeated; want none", c.faults, c.lost, c.duplicates, c.refused, c.repeatedIDs, c.repeatedTokens)
	}
	if c.faults == 0 {
		t.Error("no completion's reply was lost: the proxy did not match the reply")
	}
}

// distinct returns the distinct values of ids.
func distinct(ids []int64) map[int64]bool {
	m := make(map[int64]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// jobsIn returns the IDs of queue's jobs in state.
func jobsIn(t *testing.T, st store.Store, queue string, state store.JobState) []int64 {
	t.Helper()
	var ids []int64
	for after := int64(0); ; {
		rows, err := st.JobList(context.Background(), &store.JobListParams{Queue: queue, State: state, AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if len(rows) < 1000 {
			return ids
		}
		after = rows[len(rows)-1].ID
	}
}
