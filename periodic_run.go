package sortie

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sortiehq/sortie/internal/periodic"
	"github.com/sortiehq/sortie/store"
)

// startPeriodic runs the periodic schedules until ctx ends: one goroutine
// per schedule, owned by rs.bg.
func (c *Client) startPeriodic(ctx context.Context, rs *runState) {
	for _, pj := range c.cfg.Periodic {
		sched, err := pj.schedule()
		if err != nil {
			// NewClient validated it; this is a bug.
			panic(fmt.Sprintf("sortie: periodic schedule %q: %v", pj.Name, err))
		}
		r := periodic.New(&periodic.Config{
			Name: pj.Name, Schedule: sched, Misfire: pj.Misfire.String(), Keep: pj.missedKept(),
			Store: c.store, Clock: c.clock, Health: &c.storeHealth, Logger: c.logger,
			NewJob: func(ctx context.Context, slot, now time.Time) *NewJob {
				return c.periodicJob(ctx, pj, slot, now)
			},
			Enqueue:  c.periodicEnqueue,
			Enqueued: c.events.publishEnqueued,
		})
		rs.periodic = append(rs.periodic, periodicRunner{job: pj, runner: r})
		rs.bg.Add(1)
		go func() { defer rs.bg.Done(); r.Run(ctx) }()
	}
}

// periodicEnqueue passes jobs through Config.EnqueueMiddleware like every
// enqueue, with next in place of JobEnqueueMany.
func (c *Client) periodicEnqueue(ctx context.Context, jobs []*NewJob, next periodic.EnqueueFunc) error {
	enqueue := EnqueueFunc(next)
	mw := c.cfg.EnqueueMiddleware
	for i := len(mw) - 1; i >= 0; i-- {
		enqueue = mw[i](enqueue)
	}
	_, err := enqueue(ctx, jobs)
	return err
}

// newJob builds the job of one slot with the client's enqueue rules, or
// returns nil (logged) when Args or the options give an invalid job: that
// will not mend on a retry, so the slot passes without its job rather than
// stopping the schedule.
func (c *Client) periodicJob(ctx context.Context, pj *PeriodicJob, slot, now time.Time) *NewJob {
	var opts EnqueueOpts
	if pj.Opts != nil {
		opts = *pj.Opts
	}
	opts.UniqueKey = periodicKey(pj.Name, slot)
	args, err := pj.args(slot)
	var nj *NewJob
	if err == nil {
		nj, err = c.newJob(args, &opts, now)
	}
	if err != nil {
		c.logger.ErrorContext(ctx, "periodic job is invalid, slot passes without it",
			slog.String(logKeySchedule, pj.Name), slog.Time("slot", slot), slog.String(logKeyError, err.Error()))
		return nil
	}
	return nj
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

// PeriodicStatus is one periodic schedule as the store and the processes
// running it see it.
type PeriodicStatus struct {
	// Name and Last (the last slot enqueued; zero before the first) come
	// from the store.
	Name      string
	Last      time.Time
	UpdatedAt time.Time
	// Spec (cron expression, or "every DURATION"), Misfire (the policy),
	// Next (the slot awaited) and the last misfire come from the live
	// process that beat last among those running it; empty when none
	// runs it now.
	Spec     string
	Misfire  string
	Next     time.Time
	MissedAt time.Time
	Missed   int
	Enqueued int
	// RunBy are the IDs of the live processes running it.
	RunBy []string
}

// PeriodicStatuses returns every periodic schedule known to the store or
// run by a live process, by name: the store's last slot with what the
// processes running it report in their beats (see Client.Processes).
func (c *Client) PeriodicStatuses(ctx context.Context) ([]PeriodicStatus, error) {
	rows, err := c.PeriodicList(ctx)
	if err != nil {
		return nil, err
	}
	procs, err := c.Processes(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]*PeriodicStatus{}
	var out []*PeriodicStatus
	get := func(name string) *PeriodicStatus {
		s := byName[name]
		if s == nil {
			s = &PeriodicStatus{Name: name}
			byName[name] = s
			out = append(out, s)
		}
		return s
	}
	for _, r := range rows {
		s := get(r.Name)
		s.Last, s.UpdatedAt = r.Last, r.UpdatedAt
	}
	slices.SortFunc(procs, func(a, b *ProcessRow) int { return a.LastBeat.Compare(b.LastBeat) })
	for _, p := range procs {
		if !c.ProcessAlive(p) {
			continue
		}
		for _, ps := range p.Periodic {
			s := get(ps.Name)
			s.Spec, s.Misfire, s.Next = ps.Spec, ps.Misfire, ps.Next
			s.MissedAt, s.Missed, s.Enqueued = ps.MissedAt, ps.Missed, ps.Enqueued
			s.RunBy = append(s.RunBy, p.ID)
		}
	}
	slices.SortFunc(out, func(a, b *PeriodicStatus) int { return strings.Compare(a.Name, b.Name) })
	res := make([]PeriodicStatus, len(out))
	for i, s := range out {
		res[i] = *s
	}
	return res, nil
}
