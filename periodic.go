package sortie

import (
	"context"
	"time"
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

// PeriodicJob enqueues a job on a schedule. Every client with the same
// PeriodicJob runs the schedule; the store makes sure each slot is enqueued
// once, and the last slot enqueued is persisted, so restarts neither miss
// nor repeat a run.
type PeriodicJob struct {
	// Name identifies the schedule in the store; required and unique.
	Name string
	// Cron is a cron expression: 5 fields (minute hour day month weekday)
	// or 6 (with seconds first), optionally prefixed by "CRON_TZ=Zone ".
	// Descriptors like "@hourly" work too. Set Cron or Interval.
	Cron string
	// Interval runs the job every Interval, slots aligned to the Unix epoch.
	Interval time.Duration
	// Location is the time zone of Cron when it has no CRON_TZ prefix.
	// Defaults to UTC.
	Location *time.Location
	// Args returns the job's args for a slot.
	Args func(slot time.Time) JobArgs
	// Opts are the enqueue options of each job; nil for the kind's defaults.
	// The UniqueKey is set by the scheduler ("periodic:Name:slot").
	Opts *EnqueueOpts
	// Misfire says what to do with slots missed while nothing ran.
	Misfire Misfire
	// CatchUpMax caps the slots enqueued by MisfireCatchUp. Defaults to 10.
	CatchUpMax int
}

// startPeriodic runs the periodic schedules until ctx ends.
func (c *Client) startPeriodic(ctx context.Context, rs *runState) {}
