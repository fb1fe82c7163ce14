package producer

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/logkey"
	"github.com/sortiehq/sortie/store"
)

// fetchesInFlight is how many fetches a producer may have in flight at
// once. A claim's round trip is most of a fetch's time, and short jobs free
// their workers long before the next claim returns, so one fetch at a time
// leaves workers idle behind a backlog: a second fetch, for the slots freed
// while the first is out, keeps them busy. Each asks only for slots no
// other fetch holds. A second fetch goes out only while the last one came
// back full (fetchState.mayStart).
const fetchesInFlight = 2

// fetchResult is what a fetch running in its own goroutine reports back to
// the loop.
type fetchResult struct {
	asked, got int
	waited     bool      // a waiting fetch (JobFetchWait), out for as long as it waited
	at         time.Time // the clock reading as the fetch began
	next       time.Time // when more may be claimed, after a short fetch
	wakes      uint64    // the loop's wake-ups counted as the fetch began
	err        error
}

func (p *Producer) loop(ctx context.Context) {
	c := p.cfg
	stop := c.Stop
	// A producer that waits on the store (waits.go) hears of new jobs from
	// its waiting fetches, not from a watch.
	var watchC <-chan struct{}
	if p.waiter == nil {
		var closeWatch func()
		watchC, closeWatch = p.watch(ctx, stop)
		defer closeWatch()
	}
	poll := c.Clock.NewTimer(c.PollInterval)
	defer poll.Stop()
	cooldown := c.Clock.NewTimer(time.Hour)
	cooldown.Stop()
	defer cooldown.Stop()
	results := make(chan fetchResult, fetchesInFlight)
	var st fetchState
	// A waiting fetch ends when the loop does.
	waitCtx, endWaits := context.WithCancel(ctx)
	// Fetches still out when the loop ends hand their jobs to the workers
	// before the handoff closes, so no claimed job is left without one.
	defer func() {
		endWaits()
		for ; st.inFlight > 0; st.inFlight-- {
			<-results
		}
	}()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if st.inFlight == 0 {
			// The jobs to claim ahead change only between fetches: a fetch's
			// reservation counts against the capacity it was sent under, so
			// that the slots of a worker freed while it is out are seen free.
			st.capacity = p.max + p.ahead()
			p.capacity.Store(st.capacity)
		}
		capacity := st.capacity
		free := capacity - p.running.Load() - p.reserved.Load()
		if st.mayStart(free) {
			// While most workers are busy, wait a little so that more of them
			// free up and one fetch serves several.
			now := c.Clock.Now()
			if wait := c.FetchCooldown - now.Sub(st.lastFetch); free*2 < capacity && wait > 0 {
				cooldown.Reset(wait)
			} else {
				st.inFlight++
				st.lastFetch = now
				p.startFetch(ctx, free, 0, st.wakes, results)
				continue
			}
		}
		if p.waiter != nil && st.drained && st.inFlight == 0 && free > 0 {
			// Wait on the store for the next job until the poll timer
			// would have fired; too close to it, fetch now.
			now := c.Clock.Now()
			if wait := st.wakeAt.Sub(now); wait >= minWait {
				poll.Stop()
				st.inFlight++
				st.lastFetch = now
				p.startFetch(waitCtx, free, wait, st.wakes, results)
				continue
			}
			st.drained = false
			continue
		}
		select {
		case <-stop:
			return
		case r := <-results:
			p.fetched(ctx, r, &st, poll)
		case <-watchC:
			st.drained = false
			st.wakes++
		case <-poll.C():
			st.drained = false
			st.wakes++
			poll.Reset(c.PollInterval)
		case <-p.freed:
		case <-cooldown.C():
		}
	}
}

// fetchState is what the fetch loop keeps from one turn to the next.
type fetchState struct {
	inFlight int
	// capacity is the workers plus the jobs claimed ahead (ahead.go), as
	// of the last turn with no fetch out.
	capacity  int32
	lastFetch time.Time
	// drained is set while the last fetch found fewer jobs than it asked
	// for: the loop waits for a wake-up before it fetches again.
	drained bool
	// wakes counts wake-ups (store notifications, polls), so that a fetch
	// that comes back short after one tells that what it announced may
	// have come after the claim.
	wakes    uint64
	failures int
	// short is set while the last fetch to come back found fewer jobs
	// than it asked for.
	short bool
	// wakeAt is when the poll timer was set to fire after the last short
	// fetch: the end of a waiting fetch that follows it.
	wakeAt time.Time
}

// mayStart says whether the loop may send a fetch for free slots now. Not
// when none is free, or the queues are drained and no wake-up came since,
// or fetchesInFlight are out. And not beside a fetch already out when the
// last one came back short: the queues are keeping up, there is no backlog
// for a second fetch to take, and the two would claim the same few new jobs
// between them at twice the store's cost per claim. The fetch out comes
// back soon and the loop fetches again if a wake-up came meanwhile, so a
// new job waits at most for it. On PostgreSQL at 3,000 jobs/s, this cut
// the claims by a third and the server's time in statements by a quarter
// (a claim's cost there is mostly per statement, not per job).
func (st *fetchState) mayStart(free int32) bool {
	if free <= 0 || st.drained || st.inFlight >= fetchesInFlight {
		return false
	}
	return st.inFlight == 0 || !st.short
}

// fetched acts on a fetch's result: on an error it backs off (until the
// loop stops), and on a short answer, unless woken since the fetch began,
// it waits for a wake-up, the next due job or the poll interval.
func (p *Producer) fetched(ctx context.Context, r fetchResult, st *fetchState, poll clock.Timer) {
	c := p.cfg
	// The fetch's slots stay reserved until the loop reads its answer: had
	// the fetch freed them itself, the loop could wake in between, see them
	// free and send a second fetch after a first that had just come back
	// short (or failed).
	p.reserved.Add(-int32(r.asked))
	st.inFlight--
	if r.err != nil {
		st.failures++
		// The answer may have waited behind the other fetch's backoff: the
		// call's start says which outage it was.
		c.Health.FailCall(ctx, "fetch", r.at, r.err)
		health.Sleep(ctx, c.Clock, c.Stop, health.Backoff(st.failures))
		return
	}
	st.failures = 0
	c.Health.OK(ctx)
	if !r.waited {
		observe(&p.pace.claim, c.Clock.Now().Sub(r.at))
	}
	st.short = r.got < r.asked
	if r.got == r.asked {
		// More may wait, even if the other fetch came back short.
		st.drained = false
		p.idle.Store(false)
		return
	}
	if r.wakes != st.wakes {
		// Woken while this fetch was out: fetch again.
		return
	}
	st.drained = true
	p.idle.Store(true)
	d := p.nextWake(r.next)
	st.wakeAt = c.Clock.Now().Add(d)
	poll.Reset(d)
}

// startFetch reserves free slots and fetches jobs for them in a goroutine
// of its own, which reports on results with the loop's wake-up count;
// fetched frees the slots. A wait above zero makes it a waiting fetch.
func (p *Producer) startFetch(ctx context.Context, free int32, wait time.Duration, wakes uint64, results chan<- fetchResult) {
	p.reserved.Add(free)
	p.cfg.Goroutines.Add(1)
	go func() {
		defer p.cfg.Goroutines.Done()
		at := p.cfg.Clock.Now()
		got, next, err := p.fetch(ctx, int(free), at, wait)
		results <- fetchResult{asked: int(free), got: got, waited: wait > 0, at: at, next: next, wakes: wakes, err: err}
	}()
}

// fetch claims up to free jobs from the producer's queues, in strict or
// weighted order, as of the clock reading at, hands them to the workers
// and returns how many it got. When it got fewer than free, every queue
// came back short, and next is the earliest time one of them said more may
// be claimed (its NextAt, less the lead of a reserved start), or zero.
// With a wait above zero, the producer's one queue is fetched with
// JobFetchWait (waits.go).
func (p *Producer) fetch(ctx context.Context, free int, at time.Time, wait time.Duration) (got int, next time.Time, _ error) {
	c := p.cfg
	for _, q := range p.order() {
		claimAt, reserved := at, p.rated.limited(ctx, c, q)
		lead := p.lead.get()
		if reserved {
			claimAt = at.Add(lead)
		}
		fp := &store.JobFetchParams{
			Queue: q, Kinds: c.Kinds, Limit: free - got,
			Now: claimAt, Lease: c.Lease, Worker: c.Worker,
		}
		var (
			res *store.JobFetchResult
			err error
		)
		if wait > 0 {
			res, err = p.waiter.JobFetchWait(ctx, fp, wait)
		} else {
			res, err = c.Store.JobFetch(ctx, fp)
		}
		if err != nil {
			return got, time.Time{}, err
		}
		rows := res.Jobs
		if reserved && (wait == 0 || len(rows) > 0) {
			// A waiting fetch's jobs from a rate-limited queue are never
			// handed after a wait (waits.go): what it took is its round
			// trip. An empty one may have waited.
			p.lead.observe(c.Clock.Now().Sub(at))
		}
		if at := res.NextAt; !at.IsZero() {
			if reserved {
				// Claim the lead the next claim will reserve ahead of the
				// start: the lead as this claim left it. Waking by the lead
				// this claim used, larger by its decay, would bring a claim
				// for a start just short of NextAt, short again, and a chase
				// of claims closing the gap by a sixteenth each.
				at = at.Add(-p.lead.get())
			}
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		claimed := len(rows)
		if late := p.late(rows, at, wait > 0); late > c.HeartbeatInterval/2 && claimed > 0 {
			rows = p.renewLate(ctx, rows, late)
		}
		run := true
		if reserved {
			run = !p.lateClaims(ctx, q, claimAt, len(rows))
		}
		p.running.Add(int32(len(rows)))
		p.jobs.push(rows, reserved, run)
		got += claimed
		if got == free {
			break
		}
	}
	return got, next, nil
}

// renewLate extends, at once, the leases of jobs whose claim came back late.
// Their leases count from the clock reading before the claim; a claim that
// waited on the store (a SQLite writer lock held by another process, a slow
// network) arrives with less lease left than the next heartbeat may need. A
// job whose lease is already lost is not run: another worker may have it.
func (p *Producer) renewLate(ctx context.Context, rows []*store.JobRow, late time.Duration) []*store.JobRow {
	c := p.cfg
	refs := make([]store.LeaseRef, len(rows))
	for i, r := range rows {
		refs[i] = store.LeaseRef{ID: r.ID, ClaimToken: r.ClaimToken}
	}
	now := c.Clock.Now()
	statuses, err := c.ExtendLeases(ctx, refs, now)
	if err != nil {
		// The heartbeat tries again; until then the jobs run on the lease
		// they have.
		c.Health.Fail(ctx, "heartbeat", err)
		return rows
	}
	kept := rows[:0]
	for i, r := range rows {
		if !statuses[i].Held {
			c.Logger.WarnContext(ctx, "job claim came back after its lease was lost, not running it",
				slog.Int64(logkey.JobID, r.ID), slog.String(logkey.Queue, r.Queue), slog.Duration(logkey.Duration, late))
			continue
		}
		r.LeaseUntil = now.Add(c.Lease)
		kept = append(kept, r)
	}
	return kept
}

// order returns the queues in the order to fetch from: as configured when
// strict (or a single queue), otherwise drawn by weight without replacement,
// so a queue with weight w comes first in w/total of the fetches and even a
// low-weight queue is never starved.
func (p *Producer) order() []string {
	if p.cfg.Weights == nil {
		return p.cfg.Queues
	}
	queues := append([]string(nil), p.cfg.Queues...)
	weights := append([]int(nil), p.cfg.Weights...)
	total := 0
	for _, w := range weights {
		total += w
	}
	for i := range queues {
		r := rand.IntN(total)
		j := i
		for ; j < len(queues); j++ {
			if r < weights[j] {
				break
			}
			r -= weights[j]
		}
		queues[i], queues[j] = queues[j], queues[i]
		weights[i], weights[j] = weights[j], weights[i]
		total -= weights[i]
	}
	return queues
}

// nextWake returns how long the producer may sleep after a short fetch:
// until next, the earliest time its queues said more may be claimed (a
// scheduled job due, a rate limit allowing a start), or the poll interval,
// whichever is sooner.
func (p *Producer) nextWake(next time.Time) time.Duration {
	d := p.cfg.PollInterval
	if next.IsZero() {
		return d
	}
	if until := next.Sub(p.cfg.Clock.Now()); until < d {
		d = max(until, 100*time.Microsecond)
	}
	return d
}
