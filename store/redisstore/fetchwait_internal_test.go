package redisstore

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
)

// waitResult is what a JobFetchWait running in its own goroutine returns.
type waitResult struct {
	res *store.JobFetchResult
	err error
}

// waitT0 is the clock reading (Now) of the waiting claims' tests.
var waitT0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// claimWait calls sortie_claim_wait as JobFetchWait does at waitT0, for
// waiter wid of queue q and worker (at most 5 jobs, a lease of a minute),
// waiting up to wait, and returns its reply.
func claimWait(t *testing.T, ctx context.Context, s *Store, q, worker, wid string, wait time.Duration) any {
	t.Helper()
	args := []any{s.arg0, q, group(s.k.groupOf(q)), micros(waitT0), micros(waitT0.Add(time.Minute)), worker, "5", wid,
		strconv.FormatInt(wait.Microseconds(), 10), strconv.FormatInt(time.Minute.Microseconds(), 10)}
	v, err := s.fcall(ctx, "sortie_claim_wait", s.k.queue(q)+"h", args...)
	if err != nil {
		t.Fatalf("sortie_claim_wait for queue %q: %v", q, err)
	}
	return v
}

// wantAvailable fails t unless job id is available: no claim took it.
func wantAvailable(t *testing.T, s *Store, id int64, what string) {
	t.Helper()
	row, err := s.JobGet(context.Background(), &store.JobGetParams{ID: id})
	if err != nil || row.State != store.JobStateAvailable {
		t.Fatalf("%s: %v, %v; want available", what, row, err)
	}
}

// startWait runs JobFetchWait for p in a goroutine and returns once the
// caller is registered as one of the queue's waiters.
func startWait(t *testing.T, ctx context.Context, s *Store, p *store.JobFetchParams, wait time.Duration) <-chan waitResult {
	t.Helper()
	out := make(chan waitResult, 1)
	go func() {
		res, err := s.JobFetchWait(ctx, p, wait)
		out <- waitResult{res, err}
	}()
	return waitersBecome(t, s, p.Queue, 1, out)
}

// waitersBecome returns c once queue q has n registered waiters, failing
// the test after 5 s or when the wait that c reports on returns first.
func waitersBecome(t *testing.T, s *Store, q string, n int64, c <-chan waitResult) <-chan waitResult {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case r := <-c:
			t.Fatalf("JobFetchWait returned %v, %v before it waited", r.res, r.err)
		default:
		}
		got, err := s.rdb.HLen(context.Background(), s.k.queue(q)+"w").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got == n {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %q has %d waiters, want %d", q, got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// result returns what the wait started by startWait returned, failing the
// test after 5 s.
func result(t *testing.T, c <-chan waitResult) *store.JobFetchResult {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("JobFetchWait error: %v", r.err)
		}
		return r.res
	case <-time.After(5 * time.Second):
		t.Fatal("JobFetchWait did not return within 5 s")
		return nil
	}
}

// noWaitKeys fails the test unless queue q has no waiter and no hand list
// left.
func noWaitKeys(t *testing.T, s *Store, q string) {
	t.Helper()
	keys, err := s.rdb.Keys(context.Background(), s.k.queue(q)+"[wH]*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Errorf("queue %q keeps waiting keys %v after the wait ended", q, keys)
	}
}

// A job enqueued while a worker waits is claimed for it in the enqueue's
// step: its row comes whole, running, claimed by the waiter at the
// enqueue's Now with the waiter's lease and a token that its outcome
// needs; the waiter is gone afterwards, and nothing is left behind.
func TestWaitIsHandedTheEnqueuedJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	t0 := waitT0
	p := &store.JobFetchParams{Queue: "hand", Limit: 10, Now: t0, Lease: time.Minute, Worker: "waiter"}
	c := startWait(t, ctx, s, p, 10*time.Second)
	enqAt := t0.Add(3 * time.Second)
	j := &store.NewJob{Kind: "k", Queue: "hand", Args: []byte(`{"x":1}`), Priority: 3, MaxAttempts: 7}
	er := enqueue(t, s, enqAt, []*store.NewJob{j})[0]
	id := er.ID
	if er.State != store.JobStateRunning {
		t.Errorf("the enqueue says the job is %s, want running (claimed for the waiter in its step)", er.State)
	}
	res := result(t, c)
	if len(res.Jobs) != 1 || res.Jobs[0].ID != id {
		t.Fatalf("handed %v, want job %d", res.Jobs, id)
	}
	got := res.Jobs[0]
	want, err := s.JobGet(ctx, &store.JobGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.JobStateRunning || got.Attempt != 1 || got.AttemptedBy != "waiter" ||
		!got.AttemptedAt.Equal(enqAt) || !got.LeaseUntil.Equal(enqAt.Add(time.Minute)) || got.ClaimToken == 0 {
		t.Errorf("handed job: state %s, attempt %d by %q at %v, lease until %v, token %d; want running, 1, by waiter at %v, until %v, a token",
			got.State, got.Attempt, got.AttemptedBy, got.AttemptedAt, got.LeaseUntil, got.ClaimToken, enqAt, enqAt.Add(time.Minute))
	}
	if got.Kind != "k" || string(got.Args) != `{"x":1}` || got.Priority != 3 || got.MaxAttempts != 7 ||
		got.ClaimToken != want.ClaimToken || !got.LeaseUntil.Equal(want.LeaseUntil) {
		t.Errorf("handed row %+v, want the stored %+v", got, want)
	}
	noWaitKeys(t, s, "hand")
	// A plain fetch finds nothing more, and the token applies the outcome.
	if more, err := s.JobFetch(ctx, &store.JobFetchParams{Queue: "hand", Limit: 10, Now: enqAt, Lease: time.Minute, Worker: "other"}); err != nil || len(more.Jobs) != 0 {
		t.Fatalf("JobFetch after the hand = %v, %v; want nothing", more, err)
	}
	rs, err := s.JobFinish(ctx, &store.JobFinishParams{Now: enqAt.Add(time.Second),
		Reports: []*store.Report{{ID: id, ClaimToken: got.ClaimToken, Kind: store.ReportCompleted}}})
	if err != nil || !rs[0].Applied {
		t.Fatalf("JobFinish with the handed token = %+v, %v; want applied", rs, err)
	}
}

// A waiter is handed no more jobs than it asked for, nor more than a few
// (a backlog is claimed by the worker's next fetch), in claim order.
func TestWaitIsHandedAFew(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	t0 := waitT0
	for _, limit := range []int{2, 50} {
		p := &store.JobFetchParams{Queue: "few", Limit: limit, Now: t0, Lease: time.Minute, Worker: "w"}
		c := startWait(t, context.Background(), s, p, 10*time.Second)
		res := enqueue(t, s, t0, plainJobs("few", 10))
		got := result(t, c).Jobs
		want := min(limit, claimRowsFew)
		if len(got) != want {
			t.Fatalf("limit %d: handed %d jobs, want %d", limit, len(got), want)
		}
		for i, r := range got {
			if r.ID != res[i].ID {
				t.Errorf("limit %d: handed job %d is %d, want %d", limit, i, r.ID, res[i].ID)
			}
		}
		if _, err := s.JobActMany(context.Background(), &store.JobActManyParams{Action: store.ActionDelete, Now: t0, IDs: resIDs(res)}); err != nil {
			t.Fatal(err)
		}
	}
}

func resIDs(res []store.EnqueueResult) []int64 {
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// What a waiter may not claim is left alone, and the waiter is woken
// empty to fetch again: a job of another kind, a job of a paused queue,
// a job scheduled for later, and any job of a rate-limited queue (whose
// claims reserve their start ahead).
func TestWaitIsWokenWithoutWhatItMayNotClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	t0 := waitT0
	if _, err := s.QueuePause(ctx, &store.QueuePauseParams{Queue: "paused", Paused: true, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: "rated", Now: t0,
		Settings: store.QueueSettings{RateLimit: 5, RatePeriod: time.Second}}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, queue string
		kinds       []string
		job         *store.NewJob
	}{
		{"another kind", "kinds", []string{"a"}, &store.NewJob{Kind: "b", Queue: "kinds", Args: []byte(`{}`)}},
		{"a paused queue", "paused", nil, &store.NewJob{Kind: "k", Queue: "paused", Args: []byte(`{}`)}},
		{"scheduled later", "later", nil, &store.NewJob{Kind: "k", Queue: "later", Args: []byte(`{}`), RunAt: t0.Add(time.Hour)}},
		{"a rate-limited queue", "rated", nil, &store.NewJob{Kind: "k", Queue: "rated", Args: []byte(`{}`)}},
	}
	for _, c := range cases {
		p := &store.JobFetchParams{Queue: c.queue, Kinds: c.kinds, Limit: 5, Now: t0, Lease: time.Minute, Worker: "w"}
		w := startWait(t, ctx, s, p, 10*time.Second)
		id := enqueue(t, s, t0, []*store.NewJob{c.job})[0].ID
		if got := result(t, w); len(got.Jobs) != 0 {
			t.Errorf("%s: handed %d jobs, want a wake-up with none", c.name, len(got.Jobs))
		}
		row, err := s.JobGet(ctx, &store.JobGetParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if row.State == store.JobStateRunning {
			t.Errorf("%s: the job was claimed", c.name)
		}
		noWaitKeys(t, s, c.queue)
	}
}

// A wait that times out leaves no waiter behind: a job enqueued after it
// stays available for the next claim.
func TestWaitTimesOutCleanly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	t0 := waitT0
	res, err := s.JobFetchWait(ctx, &store.JobFetchParams{Queue: "late", Limit: 5, Now: t0, Lease: time.Minute, Worker: "w"}, 20*time.Millisecond)
	if err != nil || len(res.Jobs) != 0 {
		t.Fatalf("JobFetchWait on an empty queue = %v, %v; want nothing", res, err)
	}
	noWaitKeys(t, s, "late")
	id := enqueue(t, s, t0, plainJobs("late", 1))[0].ID
	wantAvailable(t, s, id, "job enqueued after the wait")
}

// A waiter whose process is gone (past its registration's expiry) is
// dropped unwoken: the job stays available instead of waiting out a lease.
func TestExpiredWaiterIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	t0 := waitT0
	// A waiter registers, and its process dies: its record then expires,
	// as if long ago (expiry, limit, lease, worker).
	wid := s.nonce + ".dead"
	claimWait(t, ctx, s, "gone", "gone", wid, time.Second)
	gone := "10:" + "1000000000" + "1:5" + "8:60000000" + "4:gone"
	if err := s.rdb.HSet(ctx, s.k.queue("gone")+"w", wid, gone).Err(); err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, s, t0, plainJobs("gone", 1))[0].ID
	wantAvailable(t, s, id, "job enqueued beside an expired waiter")
	noWaitKeys(t, s, "gone")
}

// A worker that stops while it waits returns at once, without waiting out
// its wait, and a job claimed for it just before is returned, not lost.
func TestWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	t0 := waitT0
	ctx, cancel := context.WithCancel(context.Background())
	p := &store.JobFetchParams{Queue: "stop", Limit: 5, Now: t0, Lease: time.Minute, Worker: "w"}
	start := time.Now()
	c := startWait(t, ctx, s, p, time.Minute)
	cancel()
	if res := result(t, c); len(res.Jobs) != 0 {
		t.Fatalf("cancelled wait returned %d jobs, want none", len(res.Jobs))
	}
	if took := time.Since(start); took >= blockMax {
		t.Errorf("cancelled wait returned after %v, its whole wait (%v)", took, blockMax)
	}
	noWaitKeys(t, s, "stop")

	// Handed, then cancelled before it read its hand: the job comes back.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	wid := s.nonce + ".x"
	claimWait(t, ctx2, s, "stop", "w", wid, time.Minute)
	id := enqueue(t, s, t0, plainJobs("stop", 1))[0].ID
	cancel2()
	item, err := s.awaitHand(ctx2, "stop", wid, time.Minute)
	if err != nil || item == "" {
		t.Fatalf("awaitHand after the hand and a cancel = %q, %v; want the job", item, err)
	}
	res, err := s.handedJobs("stop", item)
	if err != nil || len(res.Jobs) != 1 || res.Jobs[0].ID != id {
		t.Fatalf("handed %v, %v; want job %d", res, err, id)
	}
	noWaitKeys(t, s, "stop")
}

// Several waiters on one queue each get a job of their own: every job is
// claimed once.
func TestWaitersShareNoJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	t0 := waitT0
	const n = 3
	var cs []<-chan waitResult
	for i := range n {
		p := &store.JobFetchParams{Queue: "many", Limit: 1, Now: t0, Lease: time.Minute, Worker: "w"}
		c := make(chan waitResult, 1)
		go func() {
			res, err := s.JobFetchWait(ctx, p, 10*time.Second)
			c <- waitResult{res, err}
		}()
		cs = append(cs, waitersBecome(t, s, "many", int64(i+1), c))
	}
	res := enqueue(t, s, t0, plainJobs("many", n))
	seen := map[int64]bool{}
	for _, c := range cs {
		for _, r := range result(t, c).Jobs {
			if seen[r.ID] {
				t.Errorf("job %d handed twice", r.ID)
			}
			seen[r.ID] = true
		}
	}
	if len(seen) != n {
		t.Errorf("%d of %d jobs handed, want every one (one each)", len(seen), n)
	}
	_ = res
	noWaitKeys(t, s, "many")
}

// A wait that finds every blocking connection taken (half the pool) waits
// on the queue's watch channel instead: an enqueue ends it, and the job is
// then either claimed for it or left available for its next fetch, never
// lost and never claimed twice.
func TestWaitWithoutABlockingSlotWatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := redistest.URL(t)
	s, err := Open(ctx, u+"?pool_size=2", &Options{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if cap(s.blocking) != 1 {
		t.Fatalf("a pool of 2 gives %d blocking slots, want 1", cap(s.blocking))
	}
	t0 := waitT0
	p := &store.JobFetchParams{Queue: "slots", Limit: 5, Now: t0, Lease: time.Minute, Worker: "w"}
	a := startWait(t, ctx, s, p, 10*time.Second)
	// The one slot is a's: b watches.
	b := make(chan waitResult, 1)
	start := time.Now()
	go func() {
		res, err := s.JobFetchWait(ctx, p, 10*time.Second)
		b <- waitResult{res, err}
	}()
	id := enqueue(t, s, t0, plainJobs("slots", 1))[0].ID
	ra, rb := result(t, a), result(t, b)
	if took := time.Since(start); took >= blockMax {
		t.Errorf("the watching wait returned after %v, its whole wait", took)
	}
	claimed := len(ra.Jobs) + len(rb.Jobs)
	row, err := s.JobGet(ctx, &store.JobGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case claimed > 1:
		t.Errorf("job %d claimed by both waits", id)
	case claimed == 0 && row.State != store.JobStateAvailable:
		t.Errorf("job %d claimed by neither wait and %s, want available", id, row.State)
	case claimed == 1 && row.State != store.JobStateRunning:
		t.Errorf("job %d returned claimed but %s", id, row.State)
	}
}

// A worker that registers as a waiter drops the waiters of processes
// gone (past their expiry), so that a queue no call notes again keeps
// none of them.
func TestWaiterDropsExpiredOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	t0 := waitT0
	gone := "10:" + "1000000000" + "1:5" + "8:60000000" + "4:gone"
	if err := s.rdb.HSet(ctx, s.k.queue("idle")+"w", "dead.1", gone).Err(); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel := context.WithCancel(ctx)
	c := make(chan waitResult, 1)
	go func() {
		res, err := s.JobFetchWait(ctx2, &store.JobFetchParams{Queue: "idle", Limit: 5, Now: t0, Lease: time.Minute, Worker: "w"}, 10*time.Second)
		c <- waitResult{res, err}
	}()
	// The new waiter registers in the step that drops the old one.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ws, err := s.rdb.HKeys(ctx, s.k.queue("idle")+"w").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 1 && ws[0] != "dead.1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiters %v, want only the new one", ws)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	result(t, c)
	noWaitKeys(t, s, "idle")
}

// A lone enqueued job goes to a waiter that claims its kind, passing over
// one that does not, which is woken empty to fetch again.
func TestLoneJobGoesToAWaiterOfItsKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	t0 := waitT0
	other := startWait(t, ctx, s, &store.JobFetchParams{Queue: "kinds2", Kinds: []string{"x"}, Limit: 1, Now: t0, Lease: time.Minute, Worker: "x-only"}, 10*time.Second)
	anyc := make(chan waitResult, 1)
	go func() {
		res, err := s.JobFetchWait(ctx, &store.JobFetchParams{Queue: "kinds2", Limit: 1, Now: t0, Lease: time.Minute, Worker: "any"}, 10*time.Second)
		anyc <- waitResult{res, err}
	}()
	anyc2 := waitersBecome(t, s, "kinds2", 2, anyc)
	id := enqueue(t, s, t0, []*store.NewJob{{Kind: "y", Queue: "kinds2", Args: []byte(`{}`)}})[0].ID
	if got := result(t, other); len(got.Jobs) != 0 {
		t.Errorf("the waiter of kind x got %d jobs of kind y", len(got.Jobs))
	}
	got := result(t, anyc2)
	if len(got.Jobs) != 1 || got.Jobs[0].ID != id || got.Jobs[0].AttemptedBy != "any" {
		t.Fatalf("the waiter of any kind got %v, want job %d", got.Jobs, id)
	}
	noWaitKeys(t, s, "kinds2")
}

// A claim_wait sent again with the same waiter ID (its first reply was
// lost, after the first had registered and been handed a job) returns
// that job instead of registering again.
func TestClaimWaitSentAgainGetsItsHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	t0 := waitT0
	wid := s.nonce + ".again"
	claimWait(t, ctx, s, "again", "w", wid, time.Second)
	id := enqueue(t, s, t0, plainJobs("again", 1))[0].ID
	v := claimWait(t, ctx, s, "again", "w", wid, time.Second)
	rest, flag, err := splitRowsFlag(v)
	if err != nil || flag != "h" {
		t.Fatalf("the call sent again answered %v (flag %q, %v), want the hand", v, flag, err)
	}
	item, _ := rest.([]any)[1].(string)
	res, err := s.handedJobs("again", item)
	if err != nil || len(res.Jobs) != 1 || res.Jobs[0].ID != id {
		t.Fatalf("the call sent again got %v, %v; want job %d", res, err, id)
	}
	noWaitKeys(t, s, "again")
}

// A BLPOP the server refuses (an ACL without blocking commands) ends the
// wait without an error and leaves no waiter; the store's later waits
// watch the queue's channel instead, so workers still start new jobs
// without polling.
func TestRefusedBlockingFallsBackToWatching(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := openTestStore(t)
	user := "noblock_" + admin.nonce
	if err := admin.rdb.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-@blocking").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.rdb.Do(context.Background(), "ACL", "DELUSER", user) })
	u := strings.Replace(redistest.URL(t), "redis://", "redis://"+user+":pw@", 1)
	s, err := Open(ctx, u, &Options{Prefix: redistest.Prefix(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	t0 := waitT0
	p := &store.JobFetchParams{Queue: "acl", Limit: 5, Now: t0, Lease: time.Minute, Worker: "w"}
	res, err := s.JobFetchWait(ctx, p, time.Second)
	if err != nil || len(res.Jobs) != 0 || !s.noBlock.Load() {
		t.Fatalf("JobFetchWait with BLPOP refused = %v, %v (watching from now on: %v); want nothing, no error, and watching", res, err, s.noBlock.Load())
	}
	noWaitKeys(t, s, "acl")
	// The store's subscription, on: its first message (the subscription's
	// own) would wake a watching wait spuriously.
	subscribed(t, s, "acl")
	c := make(chan waitResult, 1)
	go func() {
		res, err := s.JobFetchWait(ctx, p, time.Minute)
		c <- waitResult{res, err}
	}()
	waitWatchers(t, s, "acl", 1)
	start := time.Now()
	enqueue(t, s, t0, plainJobs("acl", 1))
	result(t, c)
	if took := time.Since(start); took >= blockMax {
		t.Errorf("the watching wait ended %v after the enqueue, its whole wait", took)
	}
}

// Waits that watch (every blocking slot taken) each hear the signal: one
// enqueue ends them all, not one of them.
func TestWatchingWaitsAllWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	// Every slot taken: the waits below watch.
	for range cap(s.blocking) {
		s.blocking <- struct{}{}
	}
	t0 := waitT0
	p := &store.JobFetchParams{Queue: "watchers", Kinds: []string{"none"}, Limit: 5, Now: t0, Lease: time.Minute, Worker: "w"}
	// The first wait opens the store's subscription: wait until it is on.
	subscribed(t, s, "watchers")
	var cs []chan waitResult
	for range 3 {
		c := make(chan waitResult, 1)
		go func() {
			res, err := s.JobFetchWait(ctx, p, time.Minute)
			c <- waitResult{res, err}
		}()
		cs = append(cs, c)
	}
	waitWatchers(t, s, "watchers", 3)
	start := time.Now()
	enqueue(t, s, t0, plainJobs("watchers", 1))
	for _, c := range cs {
		result(t, c)
	}
	if took := time.Since(start); took >= blockMax {
		t.Errorf("the watching waits ended %v after the enqueue, their whole wait", took)
	}
}

// subscribed opens the store's subscription to queue q's watch channel
// (fallbackWatch) and returns once the store has heard that it is on (its
// confirmation wakes the queue's watchers, once).
func subscribed(t *testing.T, s *Store, q string) {
	t.Helper()
	w, err := s.fallbackWatch(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C:
	case <-time.After(5 * time.Second):
		t.Fatalf("no confirmation of the subscription to %s after 5 s", s.k.watch(q))
	}
}

// waitWatchers returns once n callers watch queue q in the store's
// fan-out (the store's own subscription aside).
func waitWatchers(t *testing.T, s *Store, q string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.hub.queues.Count(q) < n+1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d watchers of %s after 5 s, want %d", s.hub.queues.Count(q)-1, q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A job that a function which runs under OOM makes available (a release)
// is not copied into a waiter's hand list: the waiter is woken, and the
// job stays available for its next claim.
func TestOOMFunctionsOnlyWakeWaiters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	t0 := waitT0
	id := enqueue(t, s, t0, plainJobs("oomwake", 1))[0].ID
	res, err := s.JobFetch(ctx, &store.JobFetchParams{Queue: "oomwake", Limit: 1, Now: t0, Lease: time.Minute, Worker: "a"})
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("JobFetch = %v, %v", res, err)
	}
	c := startWait(t, ctx, s, &store.JobFetchParams{Queue: "oomwake", Limit: 5, Now: t0, Lease: time.Minute, Worker: "b"}, 10*time.Second)
	if _, err := s.JobFinish(ctx, &store.JobFinishParams{Now: t0, Reports: []*store.Report{
		{ID: id, ClaimToken: res.Jobs[0].ClaimToken, Kind: store.ReportReleased, Unstarted: true}}}); err != nil {
		t.Fatal(err)
	}
	if got := result(t, c); len(got.Jobs) != 0 {
		t.Fatalf("the waiter was handed %d jobs by a release", len(got.Jobs))
	}
	wantAvailable(t, s, id, "released job")
}
