// Package periodic runs a client's periodic schedules: for each, it waits
// for the next slot, plans what a misfire leaves of the missed ones and
// advances the schedule in the store, which makes each slot enqueued once.
// The client builds the slots' jobs and publishes their events.
package periodic

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/cron"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/logkey"
	"github.com/sortiehq/sortie/store"
)

// Store is the part of store.Store a Runner uses.
type Store interface {
	// PeriodicAdvance is store.Store.PeriodicAdvance.
	PeriodicAdvance(ctx context.Context, p *store.PeriodicAdvanceParams) (*store.PeriodicAdvanceResult, error)
	// PeriodicList is store.Store.PeriodicList.
	PeriodicList(ctx context.Context, p *store.PeriodicListParams) ([]store.PeriodicRow, error)
}

// EnqueueFunc makes the store call that enqueues jobs.
type EnqueueFunc func(ctx context.Context, jobs []*store.NewJob) ([]store.EnqueueResult, error)

// Config is one schedule and what its Runner works with.
type Config struct {
	// Name identifies the schedule in the store.
	Name     string
	Schedule cron.Schedule
	// Misfire names the misfire policy in the log.
	Misfire string
	// Keep is how many of the latest missed slots are enqueued.
	Keep int

	Store  Store
	Clock  clock.Clock
	Health *health.Health
	Logger *slog.Logger
	// NewJob builds the job of one slot, or returns nil (having logged why)
	// when the slot passes without one.
	NewJob func(ctx context.Context, slot, now time.Time) *store.NewJob
	// Enqueue passes jobs through the client's enqueue middleware to next,
	// the advance's store call.
	Enqueue func(ctx context.Context, jobs []*store.NewJob, next EnqueueFunc) error
	// Enqueued publishes the events of jobs an advance enqueued.
	Enqueued func(now time.Time, jobs []*store.NewJob, results []store.EnqueueResult)
}

// New returns the runner of cfg's schedule; its owner calls Run in a
// goroutine and ends it by cancelling Run's context.
func New(cfg *Config) *Runner {
	return &Runner{cfg: cfg}
}

// Runner runs one schedule in one client.
type Runner struct {
	cfg *Config
	// failing is set while advances fail for a reason other than the store
	// (enqueue middleware refusing), so that is logged once.
	failing bool

	mu     sync.Mutex
	status Status
}

// Status is what a runner last saw of its schedule, for the process
// registry: the slot it waits for, and what its misfire policy last did.
type Status struct {
	Next time.Time
	// MissedAt is when it last found slots missed while nothing ran the
	// schedule; Missed counts them, Enqueued those the policy enqueued.
	MissedAt         time.Time
	Missed, Enqueued int
}

// Status returns what the runner last saw.
func (r *Runner) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

func (r *Runner) setNext(next time.Time) {
	r.mu.Lock()
	r.status.Next = next
	r.mu.Unlock()
}

// Run enqueues the schedule's slots until ctx ends.
//
// It keeps last, the schedule's last slot as the store has it, and awaited,
// the slot it was waiting for when it came (zero until the runner has
// caught up after its start). Every step enqueues the slots in (last, now]
// in one PeriodicAdvance: awaited, which was on time (a store error may
// delay it, never drop it), and the others, which were missed and go by the
// misfire policy. If another client advanced first, the runner adopts its
// last slot; the store's compare-and-set makes each slot enqueued once.
func (r *Runner) Run(ctx context.Context) {
	last, ok := r.loadLast(ctx)
	if !ok {
		return
	}
	var awaited time.Time
	failures := 0
	for ctx.Err() == nil {
		now := r.cfg.Clock.Now()
		lower := last
		if last.IsZero() {
			// Never advanced: start with the first slot after now.
			if awaited.IsZero() {
				awaited = r.cfg.Schedule.Next(now)
			}
			lower = awaited.Add(-time.Nanosecond)
		}
		next := r.cfg.Schedule.Next(lower)
		if next.IsZero() {
			r.cfg.Logger.WarnContext(ctx, "periodic schedule has no slot left", slog.String(logkey.Schedule, r.cfg.Name))
			<-ctx.Done()
			return
		}
		if next.After(now) {
			awaited = next
			r.setNext(next)
			r.wait(ctx, next.Sub(now))
			continue
		}
		onTime := !awaited.IsZero() && awaited.Equal(next)
		p := r.plan(ctx, lower, next, onTime, now)
		p.From = last
		res, storeFailed, err := r.advance(ctx, p, now)
		if err == nil && !res.Applied && res.Last.Equal(p.From) {
			// A conflict that left the slot we compared with: retrying at
			// once would spin, so treat it as a failure.
			err = fmt.Errorf("store refused to advance periodic schedule %q from %s but kept it", p.Name, p.From.Format(time.RFC3339Nano))
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			r.reportFailure(ctx, storeFailed, err)
			health.Sleep(ctx, r.cfg.Clock, nil, health.Backoff(failures))
			continue
		}
		if failures > 0 {
			failures = 0
			r.reportRecovery(ctx)
		}
		if !res.Applied {
			// Another client advanced the schedule: take its view.
			r.cfg.Logger.DebugContext(ctx, "periodic slot taken by another client", slog.String(logkey.Schedule, r.cfg.Name), slog.Time("last", res.Last))
			last, awaited = res.Last, time.Time{}
			if !last.IsZero() {
				awaited = r.cfg.Schedule.Next(last)
			}
			continue
		}
		if !onTime || p.To.After(next) {
			r.cfg.Logger.InfoContext(ctx, "periodic schedule missed slots while nothing ran it",
				slog.String(logkey.Schedule, r.cfg.Name), slog.String("misfire", r.cfg.Misfire),
				slog.Time("missed_until", p.To), slog.Int(logkey.Count, len(p.Jobs)))
			r.mu.Lock()
			r.status.MissedAt, r.status.Missed, r.status.Enqueued = now, r.missedCount(lower, p.To, onTime), len(p.Jobs)
			r.mu.Unlock()
		}
		last = p.To
		if !res.Last.IsZero() {
			last = res.Last
		}
		awaited = r.cfg.Schedule.Next(last)
	}
}

// missedCount counts the slots in (lower, to] that were missed: all of
// them but the awaited one when it came on time. It stops counting at
// maxMissedCount.
func (r *Runner) missedCount(lower, to time.Time, onTime bool) int {
	n := 0
	for t := r.cfg.Schedule.Next(lower); !t.IsZero() && !t.After(to) && n < maxMissedCount; t = r.cfg.Schedule.Next(t) {
		n++
	}
	if onTime && n > 0 {
		n--
	}
	return n
}

// maxMissedCount bounds missedCount's walk over a long outage.
const maxMissedCount = 100000

// plan builds the advance from lower (exclusive) to the latest slot at or
// before now. next, the first slot after lower, is due; onTime says it is
// the slot the runner was waiting for, and so is enqueued whatever the
// misfire policy says about the slots after it.
func (r *Runner) plan(ctx context.Context, lower, next time.Time, onTime bool, now time.Time) *store.PeriodicAdvanceParams {
	var slots []time.Time
	missedAfter := lower
	if onTime {
		slots = append(slots, next)
		missedAfter = next
	}
	keep := r.cfg.Keep
	missed := latestSlots(r.cfg.Schedule, missedAfter, now, max(keep, 1))
	to := next
	if len(missed) > 0 {
		to = missed[len(missed)-1]
		if keep < len(missed) {
			missed = missed[len(missed)-keep:]
		}
		slots = append(slots, missed...)
	}
	p := &store.PeriodicAdvanceParams{Name: r.cfg.Name, To: to, Now: now}
	for _, slot := range slots {
		if j := r.cfg.NewJob(ctx, slot, now); j != nil {
			p.Jobs = append(p.Jobs, j)
		}
	}
	return p
}

// latestSlots returns up to n of the latest slots in (after, until],
// oldest first. It looks back from until in widening windows, so a
// schedule down for a year with a slot every second costs about n calls
// to Next, not thirty million.
func latestSlots(s cron.Schedule, after, until time.Time, n int) []time.Time {
	ring := make([]time.Time, 0, n)
	for w := time.Second; ; w *= 4 {
		from, final := until.Add(-w), false
		if !from.After(after) || w > 100*365*24*time.Hour {
			from, final = after, true
		}
		ring = ring[:0]
		count := 0
		for t := s.Next(from); !t.IsZero() && !t.After(until); t = s.Next(t) {
			if len(ring) < n {
				ring = append(ring, t)
			} else {
				copy(ring, ring[1:])
				ring[n-1] = t
			}
			count++
		}
		if count >= n || final {
			return ring
		}
	}
}

// advance runs one PeriodicAdvance. Jobs go through Config.Enqueue (the
// client's enqueue middleware) like every enqueue: the chain is built per call around an inner function
// that makes the PeriodicAdvance call instead of JobEnqueueMany, with the
// jobs as the middleware left them. If another client advanced first, the
// middleware sees every job as a Duplicate (ID 0: the holder is not known).
// A middleware that returns without calling next drops the jobs; the slots
// still pass. storeFailed says the error came from the store.
func (r *Runner) advance(ctx context.Context, p *store.PeriodicAdvanceParams, now time.Time) (*store.PeriodicAdvanceResult, bool, error) {
	var res *store.PeriodicAdvanceResult
	storeFailed := false
	call := func(ctx context.Context, jobs []*store.NewJob) error {
		q := *p
		q.Jobs = jobs
		got, err := r.cfg.Store.PeriodicAdvance(ctx, &q)
		if err != nil {
			storeFailed = true
			return fmt.Errorf("advance periodic schedule %q to %s: %w", p.Name, p.To.Format(time.RFC3339), err)
		}
		r.cfg.Health.OK(ctx)
		res = got
		if res.Applied {
			r.cfg.Enqueued(now, jobs, res.Results)
		}
		return nil
	}
	if len(p.Jobs) == 0 {
		err := call(ctx, nil)
		return res, storeFailed, err
	}
	enqueue := func(ctx context.Context, jobs []*store.NewJob) ([]store.EnqueueResult, error) {
		if err := call(ctx, jobs); err != nil {
			return nil, err
		}
		if !res.Applied {
			dup := make([]store.EnqueueResult, len(jobs))
			for i := range dup {
				dup[i].Duplicate = true
			}
			return dup, nil
		}
		return res.Results, nil
	}
	if err := r.cfg.Enqueue(ctx, p.Jobs, enqueue); err != nil {
		return nil, storeFailed, err
	}
	if res == nil {
		// The middleware dropped the jobs without calling next.
		err := call(ctx, nil)
		return res, storeFailed, err
	}
	return res, false, nil
}

// loadLast reads the schedule's last slot, retrying while the store fails.
// It reports false when ctx ended first.
func (r *Runner) loadLast(ctx context.Context) (time.Time, bool) {
	for failures := 1; ; failures++ {
		rows, err := r.cfg.Store.PeriodicList(ctx, &store.PeriodicListParams{})
		if err == nil {
			r.cfg.Health.OK(ctx)
			for _, row := range rows {
				if row.Name == r.cfg.Name {
					return row.Last, true
				}
			}
			return time.Time{}, true
		}
		if ctx.Err() != nil {
			return time.Time{}, false
		}
		r.cfg.Health.Fail(ctx, "periodic list", err)
		if !health.Sleep(ctx, r.cfg.Clock, nil, health.Backoff(failures)) {
			return time.Time{}, false
		}
	}
}

// wait waits d on the client's clock, or until ctx ends.
func (r *Runner) wait(ctx context.Context, d time.Duration) {
	t := r.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}

func (r *Runner) reportFailure(ctx context.Context, storeFailed bool, err error) {
	if storeFailed {
		r.cfg.Health.Fail(ctx, "periodic advance", err)
		return
	}
	if !r.failing {
		r.failing = true
		r.cfg.Logger.WarnContext(ctx, "periodic enqueue failing, retrying",
			slog.String(logkey.Schedule, r.cfg.Name), slog.String(logkey.Error, err.Error()))
	}
}

func (r *Runner) reportRecovery(ctx context.Context) {
	if r.failing {
		r.failing = false
		r.cfg.Logger.InfoContext(ctx, "periodic enqueue succeeded again", slog.String(logkey.Schedule, r.cfg.Name))
	}
}
