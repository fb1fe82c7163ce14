package sortie

import (
	"fmt"
	"time"

	"github.com/sortiehq/sortie/internal/cron"
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
				if err := store.ValidateQueueName(o.Queue); err != nil {
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
	if len(name) > store.MaxNameLen {
		return fmt.Errorf("is longer than %d bytes", store.MaxNameLen)
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

// periodicRunner is a schedule this client runs and its runner.
type periodicRunner struct {
	job    *PeriodicJob
	runner *periodic.Runner
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
