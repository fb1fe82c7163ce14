package sortie

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sortiehq/sortie/internal/cron"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/store"
)

// Misfire says what happens to periodic slots missed while no client ran
// the schedule (every process down, or the store unreachable).
type Misfire int

// The misfire policies.
const (
	// MisfireRunOnce enqueues one job for the most recent missed slot. The
	// default.
	MisfireRunOnce Misfire = iota
	// MisfireSkip enqueues nothing for missed slots.
	MisfireSkip
	// MisfireCatchUp enqueues one job per missed slot, at most
	// PeriodicJob.CatchUpMax (the most recent ones).
	MisfireCatchUp
)

func (m Misfire) String() string {
	switch m {
	case MisfireRunOnce:
		return "run_once"
	case MisfireSkip:
		return "skip"
	case MisfireCatchUp:
		return "catch_up"
	}
	return fmt.Sprintf("Misfire(%d)", int(m))
}

// PeriodicJob enqueues a job on a schedule. Every client with the same
// PeriodicJob runs the schedule; the store makes sure each slot is enqueued
// once, and the last slot enqueued is persisted, so restarts neither miss
// nor repeat a run.
//
// A slot is enqueued when it comes, by whichever client gets there first.
// A slot that came while no client ran the schedule, or while the store
// was unreachable, is missed, and Misfire decides what becomes of it. A
// schedule no client ever ran starts with its first slot after the start:
// nothing is enqueued for the past.
type PeriodicJob struct {
	// Name identifies the schedule in the store; required and unique, 1 to
	// 128 of a-z A-Z 0-9 _ - . :
	Name string
	// Cron is a cron expression: 5 fields (minute hour day month weekday)
	// or 6 (with seconds first), optionally prefixed by "CRON_TZ=Zone " (or
	// "TZ=Zone "). Descriptors like "@hourly" work too; "@every" does not
	// (use Interval). Set Cron or Interval.
	Cron string
	// Interval runs the job every Interval, slots aligned to the Unix epoch
	// (an hourly interval enqueues on the hour). At least 1 second, in whole
	// milliseconds.
	Interval time.Duration
	// Location is the time zone of Cron when it has no CRON_TZ prefix.
	// Defaults to UTC.
	Location *time.Location
	// Args returns the job's args for a slot (the slot's scheduled time, in
	// the schedule's time zone). Required. It must not block: it runs on
	// the scheduler's goroutine.
	Args func(slot time.Time) JobArgs
	// Opts are the enqueue options of each job; nil for the kind's defaults.
	// The UniqueKey is set by the scheduler ("periodic:Name:slot", the slot
	// in RFC 3339 UTC), so it must be empty; RunAt must be zero (RunIn
	// delays each job). Jobs go through Config.EnqueueMiddleware like any
	// other enqueue.
	Opts *EnqueueOpts
	// Misfire says what to do with slots missed while nothing ran. Defaults
	// to MisfireRunOnce.
	Misfire Misfire
	// CatchUpMax caps the slots enqueued by MisfireCatchUp. Defaults to 10.
	CatchUpMax int
}

// defaultCatchUpMax is PeriodicJob.CatchUpMax's default.
const defaultCatchUpMax = 10

// validatePeriodic checks the schedules of Config.Periodic and returns
// copies with defaults filled in, so later changes to the caller's values
// do not reach a running client.
func validatePeriodic(jobs []*PeriodicJob) ([]*PeriodicJob, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	out := make([]*PeriodicJob, len(jobs))
	seen := make(map[string]int, len(jobs))
	for i, pj := range jobs {
		if pj == nil {
			return nil, invalidf("Config.Periodic[%d] is nil", i)
		}
		field := func(name string) string {
			if pj.Name == "" {
				return fmt.Sprintf("Config.Periodic[%d].%s", i, name)
			}
			return fmt.Sprintf("Config.Periodic[%d] (%q).%s", i, pj.Name, name)
		}
		if err := validatePeriodicName(pj.Name); err != nil {
			return nil, invalidf("%s: %v", field("Name"), err)
		}
		if j, dup := seen[pj.Name]; dup {
			return nil, invalidf("%s is also the name of Config.Periodic[%d]", field("Name"), j)
		}
		seen[pj.Name] = i
		if _, err := pj.schedule(); err != nil {
			switch {
			case pj.Cron != "" && pj.Interval != 0, pj.Cron == "" && pj.Interval == 0:
				return nil, invalidf("Config.Periodic[%d] (%q): %v", i, pj.Name, err)
			case pj.Cron != "":
				return nil, invalidf("%s: %v", field("Cron"), err)
			case pj.Location != nil:
				return nil, invalidf("%s: %v", field("Location"), err)
			default:
				return nil, invalidf("%s %v", field("Interval"), err)
			}
		}
		if pj.Args == nil {
			return nil, invalidf("%s is nil", field("Args"))
		}
		if pj.Misfire < MisfireRunOnce || pj.Misfire > MisfireCatchUp {
			return nil, invalidf("%s is %d, not one of the Misfire constants", field("Misfire"), int(pj.Misfire))
		}
		if pj.CatchUpMax < 0 {
			return nil, invalidf("%s must not be negative, got %d", field("CatchUpMax"), pj.CatchUpMax)
		}
		cp := *pj
		if cp.CatchUpMax == 0 {
			cp.CatchUpMax = defaultCatchUpMax
		}
		if o := pj.Opts; o != nil {
			switch {
			case o.UniqueKey != "":
				return nil, invalidf("%s must be empty: the scheduler sets it per slot", field("Opts.UniqueKey"))
			case !o.RunAt.IsZero():
				return nil, invalidf("%s must be zero (RunIn delays each job), got %s", field("Opts.RunAt"), o.RunAt)
			case o.RunIn < 0:
				return nil, invalidf("%s must not be negative, got %s", field("Opts.RunIn"), o.RunIn)
			case o.Priority != 0 && (o.Priority < 1 || o.Priority > 4):
				return nil, invalidf("%s must be 1 to 4, got %d", field("Opts.Priority"), o.Priority)
			case o.MaxAttempts < 0:
				return nil, invalidf("%s must not be negative, got %d", field("Opts.MaxAttempts"), o.MaxAttempts)
			case o.Timeout < 0:
				return nil, invalidf("%s must not be negative, got %s", field("Opts.Timeout"), o.Timeout)
			}
			if o.Queue != "" {
				if err := validateQueueName(o.Queue); err != nil {
					return nil, invalidf("%s: %v", field("Opts.Queue"), err)
				}
			}
			opts := *o
			opts.Tags = append([]string(nil), o.Tags...)
			cp.Opts = &opts
		}
		out[i] = &cp
	}
	return out, nil
}

// validatePeriodicName checks a schedule name: 1 to 128 of a-z A-Z 0-9 _ - . :
func validatePeriodicName(name string) error {
	if name == "" {
		return fmt.Errorf("is empty")
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("is longer than %d bytes", maxNameLen)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.', r == ':':
		default:
			return fmt.Errorf("%q may only contain letters, digits, '_', '-', '.' and ':'", name)
		}
	}
	return nil
}

// schedule parses pj's Cron or Interval.
func (pj *PeriodicJob) schedule() (cron.Schedule, error) {
	switch {
	case pj.Cron != "" && pj.Interval != 0:
		return nil, fmt.Errorf("set Cron or Interval, not both")
	case pj.Cron != "":
		return cron.Parse(pj.Cron, pj.Location)
	case pj.Interval == 0:
		return nil, fmt.Errorf("set Cron or Interval")
	case pj.Location != nil:
		return nil, fmt.Errorf("applies to Cron only; Interval slots are aligned to the Unix epoch")
	case pj.Interval < time.Second:
		return nil, fmt.Errorf("must be at least 1s, got %s", pj.Interval)
	case pj.Interval%time.Millisecond != 0:
		// Stores keep microseconds; whole milliseconds keep every slot exact.
		return nil, fmt.Errorf("must be a whole number of milliseconds, got %s", pj.Interval)
	}
	return cron.Every(pj.Interval), nil
}

// startPeriodic runs the periodic schedules until ctx ends: one goroutine
// per schedule, owned by rs.bg.
func (c *Client) startPeriodic(ctx context.Context, rs *runState) {
	for _, pj := range c.cfg.Periodic {
		sched, err := pj.schedule()
		if err != nil {
			// NewClient validated it; this is a bug.
			panic(fmt.Sprintf("sortie: periodic schedule %q: %v", pj.Name, err))
		}
		r := &periodicRunner{c: c, job: pj, sched: sched}
		rs.bg.Add(1)
		go func() { defer rs.bg.Done(); r.run(ctx) }()
	}
}

// periodicRunner runs one schedule in one client.
type periodicRunner struct {
	c     *Client
	job   *PeriodicJob
	sched cron.Schedule
	// failing is set while advances fail for a reason other than the store
	// (enqueue middleware refusing), so that is logged once.
	failing bool
}

// run enqueues the schedule's slots until ctx ends.
//
// It keeps last, the schedule's last slot as the store has it, and awaited,
// the slot it was waiting for when it came (zero until the runner has
// caught up after its start). Every step enqueues the slots in (last, now]
// in one PeriodicAdvance: awaited, which was on time (a store error may
// delay it, never drop it), and the others, which were missed and go by the
// misfire policy. If another client advanced first, the runner adopts its
// last slot; the store's compare-and-set makes each slot enqueued once.
func (r *periodicRunner) run(ctx context.Context) {
	last, ok := r.loadLast(ctx)
	if !ok {
		return
	}
	var awaited time.Time
	failures := 0
	for ctx.Err() == nil {
		now := r.c.clock.Now()
		lower := last
		if last.IsZero() {
			// Never advanced: start with the first slot after now.
			if awaited.IsZero() {
				awaited = r.sched.Next(now)
			}
			lower = awaited.Add(-time.Nanosecond)
		}
		next := r.sched.Next(lower)
		if next.IsZero() {
			r.c.logger.WarnContext(ctx, "periodic schedule has no slot left", slog.String(logKeySchedule, r.job.Name))
			<-ctx.Done()
			return
		}
		if next.After(now) {
			awaited = next
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
			health.Sleep(ctx, r.c.clock, nil, health.Backoff(failures))
			continue
		}
		if failures > 0 {
			failures = 0
			r.reportRecovery(ctx)
		}
		if !res.Applied {
			// Another client advanced the schedule: take its view.
			r.c.logger.DebugContext(ctx, "periodic slot taken by another client", slog.String(logKeySchedule, r.job.Name), slog.Time("last", res.Last))
			last, awaited = res.Last, time.Time{}
			if !last.IsZero() {
				awaited = r.sched.Next(last)
			}
			continue
		}
		if !onTime || p.To.After(next) {
			r.c.logger.InfoContext(ctx, "periodic schedule missed slots while nothing ran it",
				slog.String(logKeySchedule, r.job.Name), slog.String("misfire", r.job.Misfire.String()),
				slog.Time("missed_until", p.To), slog.Int(logKeyCount, len(p.Jobs)))
		}
		last = p.To
		if !res.Last.IsZero() {
			last = res.Last
		}
		awaited = r.sched.Next(last)
	}
}

// plan builds the advance from lower (exclusive) to the latest slot at or
// before now. next, the first slot after lower, is due; onTime says it is
// the slot the runner was waiting for, and so is enqueued whatever the
// misfire policy says about the slots after it.
func (r *periodicRunner) plan(ctx context.Context, lower, next time.Time, onTime bool, now time.Time) *store.PeriodicAdvanceParams {
	var slots []time.Time
	missedAfter := lower
	if onTime {
		slots = append(slots, next)
		missedAfter = next
	}
	keep := 0
	switch r.job.Misfire {
	case MisfireRunOnce:
		keep = 1
	case MisfireCatchUp:
		keep = r.job.CatchUpMax
	}
	missed := latestSlots(r.sched, missedAfter, now, max(keep, 1))
	to := next
	if len(missed) > 0 {
		to = missed[len(missed)-1]
		if keep < len(missed) {
			missed = missed[len(missed)-keep:]
		}
		slots = append(slots, missed...)
	}
	p := &store.PeriodicAdvanceParams{Name: r.job.Name, To: to, Now: now}
	for _, slot := range slots {
		if j := r.newJob(ctx, slot, now); j != nil {
			p.Jobs = append(p.Jobs, j)
		}
	}
	return p
}

// newJob builds the job of one slot with the client's enqueue rules, or
// returns nil (logged) when Args or the options give an invalid job: that
// will not mend on a retry, so the slot passes without its job rather than
// stopping the schedule.
func (r *periodicRunner) newJob(ctx context.Context, slot, now time.Time) *NewJob {
	var opts EnqueueOpts
	if r.job.Opts != nil {
		opts = *r.job.Opts
	}
	opts.UniqueKey = periodicKey(r.job.Name, slot)
	args, err := r.args(slot)
	var nj *NewJob
	if err == nil {
		nj, err = r.c.newJob(args, &opts, now)
	}
	if err != nil {
		r.c.logger.ErrorContext(ctx, "periodic job is invalid, slot passes without it",
			slog.String(logKeySchedule, r.job.Name), slog.Time("slot", slot), slog.String(logKeyError, err.Error()))
		return nil
	}
	return nj
}

// args calls the schedule's Args, turning a panic into an error.
func (r *periodicRunner) args(slot time.Time) (args JobArgs, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("PeriodicJob.Args panicked: %v", p)
		}
	}()
	return r.job.Args(slot), nil
}

// periodicKey is the UniqueKey of a schedule's job for one slot.
func periodicKey(name string, slot time.Time) string {
	return "periodic:" + name + ":" + slot.UTC().Format(time.RFC3339Nano)
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

// advance runs one PeriodicAdvance. Jobs go through Config.EnqueueMiddleware
// like every enqueue: the chain is built per call around an inner function
// that makes the PeriodicAdvance call instead of JobEnqueueMany, with the
// jobs as the middleware left them. If another client advanced first, the
// middleware sees every job as a Duplicate (ID 0: the holder is not known).
// A middleware that returns without calling next drops the jobs; the slots
// still pass. storeFailed says the error came from the store.
func (r *periodicRunner) advance(ctx context.Context, p *store.PeriodicAdvanceParams, now time.Time) (*store.PeriodicAdvanceResult, bool, error) {
	var res *store.PeriodicAdvanceResult
	storeFailed := false
	call := func(ctx context.Context, jobs []*NewJob) error {
		q := *p
		q.Jobs = jobs
		got, err := r.c.store.PeriodicAdvance(ctx, &q)
		if err != nil {
			storeFailed = true
			return fmt.Errorf("advance periodic schedule %q to %s: %w", p.Name, p.To.Format(time.RFC3339), err)
		}
		r.c.storeHealth.OK(ctx)
		res = got
		if res.Applied {
			r.c.events.publishEnqueued(now, jobs, res.Results)
		}
		return nil
	}
	if len(p.Jobs) == 0 {
		err := call(ctx, nil)
		return res, storeFailed, err
	}
	enqueue := EnqueueFunc(func(ctx context.Context, jobs []*NewJob) ([]EnqueueResult, error) {
		if err := call(ctx, jobs); err != nil {
			return nil, err
		}
		if !res.Applied {
			dup := make([]EnqueueResult, len(jobs))
			for i := range dup {
				dup[i].Duplicate = true
			}
			return dup, nil
		}
		return res.Results, nil
	})
	mw := r.c.cfg.EnqueueMiddleware
	for i := len(mw) - 1; i >= 0; i-- {
		enqueue = mw[i](enqueue)
	}
	if _, err := enqueue(ctx, p.Jobs); err != nil {
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
func (r *periodicRunner) loadLast(ctx context.Context) (time.Time, bool) {
	for failures := 1; ; failures++ {
		rows, err := r.c.store.PeriodicList(ctx, &store.PeriodicListParams{})
		if err == nil {
			r.c.storeHealth.OK(ctx)
			for _, row := range rows {
				if row.Name == r.job.Name {
					return row.Last, true
				}
			}
			return time.Time{}, true
		}
		if ctx.Err() != nil {
			return time.Time{}, false
		}
		r.c.storeHealth.Fail(ctx, "periodic list", err)
		if !health.Sleep(ctx, r.c.clock, nil, health.Backoff(failures)) {
			return time.Time{}, false
		}
	}
}

// wait waits d on the client's clock, or until ctx ends.
func (r *periodicRunner) wait(ctx context.Context, d time.Duration) {
	t := r.c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}

func (r *periodicRunner) reportFailure(ctx context.Context, storeFailed bool, err error) {
	if storeFailed {
		r.c.storeHealth.Fail(ctx, "periodic advance", err)
		return
	}
	if !r.failing {
		r.failing = true
		r.c.logger.WarnContext(ctx, "periodic enqueue failing, retrying",
			slog.String(logKeySchedule, r.job.Name), slog.String(logKeyError, err.Error()))
	}
}

func (r *periodicRunner) reportRecovery(ctx context.Context) {
	if r.failing {
		r.failing = false
		r.c.logger.InfoContext(ctx, "periodic enqueue succeeded again", slog.String(logKeySchedule, r.job.Name))
	}
}

// PeriodicSchedule is the persisted state of one periodic schedule: its
// name and the last slot enqueued.
type PeriodicSchedule = store.PeriodicRow

// PeriodicList returns the state of every periodic schedule in the store,
// by name, whichever client runs it.
func (c *Client) PeriodicList(ctx context.Context) ([]PeriodicSchedule, error) {
	rows, err := c.store.PeriodicList(ctx, &store.PeriodicListParams{})
	if err != nil {
		return nil, fmt.Errorf("list periodic schedules: %w", err)
	}
	return rows, nil
}
