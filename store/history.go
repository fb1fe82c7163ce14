package store

import (
	"cmp"
	"slices"
	"time"
)

// HistoryOutcome is what the history counts of a job: how it finished, or
// that an attempt failed and the job will run again.
type HistoryOutcome string

// The history outcomes.
const (
	// HistoryCompleted: the job completed.
	HistoryCompleted HistoryOutcome = "completed"
	// HistoryCancelled: the job was cancelled (by its handler, an
	// operator, a dependency's ending or a full queue).
	HistoryCancelled HistoryOutcome = "cancelled"
	// HistoryDead: the job used its attempts and is dead.
	HistoryDead HistoryOutcome = "dead"
	// HistoryRetried: an attempt failed (its handler returned an error, or
	// its lease was lost) and the job will run again.
	HistoryRetried HistoryOutcome = "retried"
)

// HistoryOutcomes lists the outcomes in the order history rows sort by.
var HistoryOutcomes = []HistoryOutcome{HistoryCompleted, HistoryCancelled, HistoryDead, HistoryRetried}

// Valid reports whether o is one of the outcomes.
func (o HistoryOutcome) Valid() bool { return slices.Contains(HistoryOutcomes, o) }

// rank is o's place in HistoryOutcomes.
func (o HistoryOutcome) rank() int { return slices.Index(HistoryOutcomes, o) }

// HistoryRow counts the jobs of one queue that reached one outcome in one
// minute.
type HistoryRow struct {
	Queue string
	// At is the start of the minute, in UTC.
	At      time.Time
	Outcome HistoryOutcome
	Count   int64
}

// HistoryMinute returns the minute t falls in: t truncated to the minute,
// in UTC. A store counts every outcome of a call in the minute of the
// call's Now (a finished job's FinalizedAt).
func HistoryMinute(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }

// CompareHistoryRows orders history rows by minute, queue and outcome
// (HistoryOutcomes order), the order Store.JobHistory returns them in.
func CompareHistoryRows(a, b HistoryRow) int {
	if c := a.At.Compare(b.At); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Queue, b.Queue); c != 0 {
		return c
	}
	return cmp.Compare(a.Outcome.rank(), b.Outcome.rank())
}

// JobHistoryParams are the arguments of Store.JobHistory.
type JobHistoryParams struct {
	// Queue, when set, limits the rows to one queue.
	Queue string
	// Since and Until bound the minutes returned: Since <= At < Until. A
	// zero Until means no end.
	Since, Until time.Time
}

// JobHistoryPruneParams are the arguments of Store.JobHistoryPrune.
type JobHistoryPruneParams struct {
	// Before is the first minute kept.
	Before time.Time
	// Limit is the most rows to delete in one call; at least 1.
	Limit int
}

// QueueLatencyParams are the arguments of Store.QueueLatency.
type QueueLatencyParams struct {
	// Queue, when set, limits the answer to one queue.
	Queue string
	// Now decides which scheduled and retrying jobs are due.
	Now time.Time
}

// QueueLatencyRow is the oldest due job of one queue.
type QueueLatencyRow struct {
	Queue string
	// OldestRunAt is the RunAt of the queue's oldest due job; the queue's
	// latency is Now - OldestRunAt.
	OldestRunAt time.Time
}
