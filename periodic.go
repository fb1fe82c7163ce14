package sortie

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sortiehq/sortie/internal/cron"
	"github.com/sortiehq/sortie/internal/names"
	"github.com/sortiehq/sortie/internal/periodic"
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
				if err := names.Queue(o.Queue); err != nil {
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
	if len(name) > names.MaxLen {
		return fmt.Errorf("is longer than %d bytes", names.MaxLen)
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

// periodicRunner is a schedule this client runs and its runner.
type periodicRunner struct {
	job    *PeriodicJob
	runner *periodic.Runner
}

// schedules describes the client's periodic schedules for the registry.
func (rs *runState) schedules() []store.ProcessSchedule {
	var out []store.ProcessSchedule
	for _, p := range rs.periodic {
		st := p.runner.Status()
		spec := p.job.Cron
		if spec == "" {
			spec = "every " + p.job.Interval.String()
		}
		out = append(out, store.ProcessSchedule{Name: p.job.Name, Spec: spec, Misfire: p.job.Misfire.String(), Next: st.Next,
			MissedAt: st.MissedAt, Missed: st.Missed, Enqueued: st.Enqueued})
	}
	return out
}

// missedKept is how many of the latest missed slots pj's misfire policy
// enqueues.
func (pj *PeriodicJob) missedKept() int {
	switch pj.Misfire {
	case MisfireRunOnce:
		return 1
	case MisfireCatchUp:
		return pj.CatchUpMax
	}
	return 0
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

// args calls the schedule's Args, turning a panic into an error.
func (pj *PeriodicJob) args(slot time.Time) (args JobArgs, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("PeriodicJob.Args panicked: %v", p)
		}
	}()
	return pj.Args(slot), nil
}

// periodicKey is the UniqueKey of a schedule's job for one slot.
func periodicKey(name string, slot time.Time) string {
	return "periodic:" + name + ":" + slot.UTC().Format(time.RFC3339Nano)
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
