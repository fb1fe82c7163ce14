package sortie

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/store"
)

// producer fetches jobs of one queue, or of a pool of queues, for a fixed
// set of worker goroutines. It fetches at most as many jobs as there are
// free workers, so no job is claimed that no goroutine can start, with up
// to fetchesInFlight fetches out at once (each for slots the others did
// not ask for), and it sleeps until a wake-up from the store, a freed
// worker, the next known RunAt or the poll interval.
type producer struct {
	c  *Client
	rs *runState
	// name is the queue's name, or the pool's.
	name string
	// queues are served in this order (strict), or in an order drawn by
	// weights at each fetch (weighted).
	queues  []string
	weights []int
	max     int32
	running atomic.Int32
	// reserved counts the slots asked for by fetches in flight.
	reserved atomic.Int32
	// idle is set while the last fetch found fewer jobs than it asked for.
	idle  atomic.Bool
	jobs  *handoff
	freed chan struct{}
	wake  chan struct{}
	// rated knows which queues have rate limits, whose claims reserve
	// their start lead ahead (ratestart.go).
	rated rateLimits
	lead  startLead
}

func newProducer(c *Client, rs *runState, name string, queues []string, weights []int, maxWorkers int) *producer {
	return &producer{
		c:       c,
		rs:      rs,
		name:    name,
		queues:  queues,
		weights: weights,
		max:     int32(maxWorkers),
		jobs:    newHandoff(),
		freed:   make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
	}
}

// start launches the fetch loop and the worker goroutines.
func (p *producer) start(ctx context.Context) {
	p.rs.workers.Add(1 + int(p.max))
	go func() {
		defer p.rs.workers.Done()
		defer p.jobs.close()
		p.loop(ctx)
	}()
	for range p.max {
		go func() {
			defer p.rs.workers.Done()
			for cl := p.jobs.next(); cl.row != nil; cl = p.jobs.next() {
				p.c.work(ctx, p.rs, cl)
				if p.shouldWake(p.running.Add(-1) + p.reserved.Load()) {
					select {
					case p.freed <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
}

// shouldWake says whether a worker that left taken slots taken (running
// jobs, and slots reserved by fetches in flight) should wake the fetch loop.
// The loop acts on a freed worker in two cases only: no slot was free (it
// waits for any free slot, then for the fetch cooldown), or half the pool
// is free (it fetches at once). Otherwise it is already waiting on the
// cooldown timer or on a fetch, and will read the counts afresh, so waking
// it for every finished job would only cost a wake-up per job. Workers
// free slots one at a time, so each threshold is met exactly as it is
// crossed; a fetch that returns changes the reserved count, but it wakes
// the loop itself.
func (p *producer) shouldWake(taken int32) bool {
	free := p.max - taken
	return free == 1 || free == (p.max+1)/2
}

// watch subscribes to the store's wake-ups for every queue. With one queue
// the watch's own channel is used; with several, forwarders merge them into
// p.wake until stop closes. It returns the channel to wait on (nil when the
// store cannot notify) and a function closing the watches.
func (p *producer) watch(ctx context.Context, stop <-chan struct{}) (<-chan struct{}, func()) {
	var watches []*store.Watch
	for _, q := range p.queues {
		w, err := p.c.store.QueueWatch(ctx, &store.QueueWatchParams{Queue: q})
		switch {
		case err == nil:
			watches = append(watches, w)
		case !errors.Is(err, store.ErrUnsupported):
			p.c.logger.WarnContext(ctx, "queue watch failed, polling instead", slog.String(logKeyQueue, q), slog.String(logKeyError, err.Error()))
		}
	}
	closeAll := func() {
		for _, w := range watches {
			w.Close()
		}
	}
	switch len(watches) {
	case 0:
		return nil, closeAll
	case 1:
		return watches[0].C, closeAll
	}
	done := make(chan struct{})
	p.rs.workers.Add(len(watches))
	for _, w := range watches {
		go func() {
			defer p.rs.workers.Done()
			for {
				select {
				case <-done:
					return
				case <-w.C:
					select {
					case p.wake <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return p.wake, func() { close(done); closeAll() }
}

// fetchesInFlight is how many fetches a producer may have in flight at
// once. A claim's round trip is most of a fetch's time, and short jobs free
// their workers long before the next claim returns, so one fetch at a time
// leaves workers idle: a second fetch, for the slots freed while the first
// is out, keeps them busy. Each asks only for slots no other fetch holds.
const fetchesInFlight = 2

// fetchResult is what a fetch running in its own goroutine reports back to
// the loop.
type fetchResult struct {
	asked, got int
	at         time.Time // the clock reading as the fetch began
	next       time.Time // when more may be claimed, after a short fetch
	wakes      uint64    // the loop's wake-ups counted as the fetch began
	err        error
}

func (p *producer) loop(ctx context.Context) {
	c := p.c
	stop := p.rs.stopFetch
	watchC, closeWatch := p.watch(ctx, stop)
	defer closeWatch()
	poll := c.clock.NewTimer(c.cfg.PollInterval)
	defer poll.Stop()
	cooldown := c.clock.NewTimer(time.Hour)
	cooldown.Stop()
	defer cooldown.Stop()
	results := make(chan fetchResult, fetchesInFlight)
	var st fetchState
	// Fetches still out when the loop ends hand their jobs to the workers
	// before the handoff closes, so no claimed job is left without one.
	defer func() {
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
		free := p.max - p.running.Load() - p.reserved.Load()
		if free > 0 && !st.drained && st.inFlight < fetchesInFlight {
			// While most workers are busy, wait a little so that more of them
			// free up and one fetch serves several.
			now := c.clock.Now()
			if wait := c.cfg.FetchCooldown - now.Sub(st.lastFetch); free*2 < p.max && wait > 0 {
				cooldown.Reset(wait)
			} else {
				st.inFlight++
				st.lastFetch = now
				p.startFetch(ctx, free, st.wakes, results)
				continue
			}
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
			poll.Reset(c.cfg.PollInterval)
		case <-p.freed:
		case <-cooldown.C():
		}
	}
}

// fetchState is what the fetch loop keeps from one turn to the next.
type fetchState struct {
	inFlight  int
	lastFetch time.Time
	// drained is set while the last fetch found fewer jobs than it asked
	// for: the loop waits for a wake-up before it fetches again.
	drained bool
	// wakes counts wake-ups (store notifications, polls), so that a fetch
	// that comes back short after one tells that what it announced may
	// have come after the claim.
	wakes    uint64
	failures int
}

// fetched acts on a fetch's result: on an error it backs off (until the
// loop stops), and on a short answer, unless woken since the fetch began,
// it waits for a wake-up, the next due job or the poll interval.
func (p *producer) fetched(ctx context.Context, r fetchResult, st *fetchState, poll Timer) {
	c := p.c
	st.inFlight--
	if r.err != nil {
		st.failures++
		// The answer may have waited behind the other fetch's backoff: the
		// call's start says which outage it was.
		c.storeHealth.FailCall(ctx, "fetch", r.at, r.err)
		health.Sleep(ctx, c.clock, p.rs.stopFetch, health.Backoff(st.failures))
		return
	}
	st.failures = 0
	c.storeHealth.OK(ctx)
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
	poll.Reset(p.nextWake(r.next))
}

// startFetch reserves free slots and fetches jobs for them in a goroutine
// of its own, which reports on results with the loop's wake-up count.
func (p *producer) startFetch(ctx context.Context, free int32, wakes uint64, results chan<- fetchResult) {
	p.reserved.Add(free)
	p.rs.workers.Add(1)
	go func() {
		defer p.rs.workers.Done()
		at := p.c.clock.Now()
		got, next, err := p.fetch(ctx, int(free), at)
		p.reserved.Add(-free)
		results <- fetchResult{asked: int(free), got: got, at: at, next: next, wakes: wakes, err: err}
	}()
}

// fetch claims up to free jobs from the producer's queues, in strict or
// weighted order, as of the clock reading at, hands them to the workers
// and returns how many it got. When it got fewer than free, every queue
// came back short, and next is the earliest time one of them said more may
// be claimed (its NextAt, less the lead of a reserved start), or zero.
func (p *producer) fetch(ctx context.Context, free int, at time.Time) (got int, next time.Time, _ error) {
	c := p.c
	for _, q := range p.order() {
		claimAt, reserved := at, p.rated.limited(ctx, c, q)
		lead := p.lead.get()
		if reserved {
			claimAt = at.Add(lead)
		}
		res, err := c.store.JobFetch(ctx, &store.JobFetchParams{
			Queue: q, Kinds: c.kinds, Limit: free - got,
			Now: claimAt, Lease: c.cfg.Lease, Worker: c.cfg.ID,
		})
		if err != nil {
			return got, time.Time{}, err
		}
		rows := res.Jobs
		if at := res.NextAt; !at.IsZero() {
			if reserved {
				at = at.Add(-lead) // claim a lead ahead of the start
			}
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		claimed := len(rows)
		if late := c.clock.Now().Sub(at); late > c.cfg.HeartbeatInterval/2 && claimed > 0 {
			rows = p.renewLate(ctx, rows, late)
		}
		run := true
		if reserved {
			p.lead.observe(c.clock.Now().Sub(at))
			run = !c.lateClaims(ctx, q, claimAt, len(rows))
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
func (p *producer) renewLate(ctx context.Context, rows []*store.JobRow, late time.Duration) []*store.JobRow {
	c := p.c
	refs := make([]store.LeaseRef, len(rows))
	for i, r := range rows {
		refs[i] = store.LeaseRef{ID: r.ID, ClaimToken: r.ClaimToken}
	}
	now := c.clock.Now()
	statuses, err := c.extendLeases(ctx, refs, now)
	if err != nil {
		// The heartbeat tries again; until then the jobs run on the lease
		// they have.
		c.storeHealth.Fail(ctx, "heartbeat", err)
		return rows
	}
	kept := rows[:0]
	for i, r := range rows {
		if !statuses[i].Held {
			c.logger.WarnContext(ctx, "job claim came back after its lease was lost, not running it",
				slog.Int64(logKeyJobID, r.ID), slog.String(logKeyQueue, r.Queue), slog.Duration(logKeyDuration, late))
			continue
		}
		r.LeaseUntil = now.Add(c.cfg.Lease)
		kept = append(kept, r)
	}
	return kept
}

// order returns the queues in the order to fetch from: as configured when
// strict (or a single queue), otherwise drawn by weight without replacement,
// so a queue with weight w comes first in w/total of the fetches and even a
// low-weight queue is never starved.
func (p *producer) order() []string {
	if p.weights == nil {
		return p.queues
	}
	queues := append([]string(nil), p.queues...)
	weights := append([]int(nil), p.weights...)
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
func (p *producer) nextWake(next time.Time) time.Duration {
	d := p.c.cfg.PollInterval
	if next.IsZero() {
		return d
	}
	if until := next.Sub(p.c.clock.Now()); until < d {
		d = max(until, 100*time.Microsecond)
	}
	return d
}

// handoff passes claimed jobs to a producer's worker goroutines. A worker
// that finishes a job takes the next one without parking; a parked worker is
// woken for a new batch, and each worker that takes a job wakes one more
// only while jobs remain. So a burst of short jobs costs a few scheduler
// wake-ups instead of one per job, and a batch of slow jobs still has every
// job started within microseconds. It holds at most as many jobs as there
// are free workers, because the producer claims no more.
type handoff struct {
	mu     sync.Mutex
	cond   *sync.Cond
	rows   []claimed
	head   int
	parked int
	closed bool
}

func newHandoff() *handoff {
	h := &handoff{}
	h.cond = sync.NewCond(&h.mu)
	return h
}

// claimed is a job handed to a worker. reserved says its handler starts
// at its AttemptedAt, not before, and run whether it may run at all: a
// claim that came back after its reserved start is put back unrun
// (ratestart.go).
type claimed struct {
	row           *store.JobRow
	reserved, run bool
}

// push adds claimed jobs and wakes a parked worker.
func (h *handoff) push(rows []*store.JobRow, reserved, run bool) {
	if len(rows) == 0 {
		return
	}
	h.mu.Lock()
	for _, r := range rows {
		h.rows = append(h.rows, claimed{r, reserved, run})
	}
	wake := h.parked > 0
	h.mu.Unlock()
	if wake {
		h.cond.Signal()
	}
}

// close makes next return nil once the jobs already pushed are taken.
func (h *handoff) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cond.Broadcast()
}

// next returns the next job, waiting for one; a nil row once closed and
// empty.
func (h *handoff) next() claimed {
	h.mu.Lock()
	for h.head == len(h.rows) && !h.closed {
		h.parked++
		h.cond.Wait()
		h.parked--
	}
	if h.head == len(h.rows) {
		h.mu.Unlock()
		return claimed{}
	}
	row := h.rows[h.head]
	h.rows[h.head] = claimed{}
	h.head++
	if h.head == len(h.rows) {
		h.rows, h.head = h.rows[:0], 0
	}
	more := h.head < len(h.rows) && h.parked > 0
	h.mu.Unlock()
	if more {
		h.cond.Signal()
	}
	return row
}
