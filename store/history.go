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

// OutcomeOf returns the history outcome of a job entering state next, and
// whether it counts at all: a finished state counts as itself; a job that
// goes back to wait for another attempt after a failed one (failed: a
// ReportFailed outcome, or a lost lease) counts as retried; anything else
// (a snooze, a release, a promotion, a retry by an operator) does not
// count.
func OutcomeOf(next JobState, failed bool) (HistoryOutcome, bool) {
	switch {
	case next.Finished():
		return HistoryOutcome(next), true
	case failed && next.Pending() && next != JobStateRunning:
		return HistoryRetried, true
	}
	return "", false
}

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

// HistoryTally adds up the history counts of one store call, or of the
// calls one transaction commits together, so the store writes one
// increment per queue, minute and outcome touched, however many jobs moved.
// The zero value is empty and ready to use.
type HistoryTally struct {
	rows []HistoryRow
}

// Add counts n jobs of queue reaching outcome o at now (counted in
// HistoryMinute(now)).
func (t *HistoryTally) Add(queue string, now time.Time, o HistoryOutcome, n int64) {
	t.add(HistoryRow{Queue: queue, At: HistoryMinute(now), Outcome: o, Count: n})
}

func (t *HistoryTally) add(r HistoryRow) {
	for i := range t.rows {
		if x := &t.rows[i]; x.Queue == r.Queue && x.Outcome == r.Outcome && x.At.Equal(r.At) {
			x.Count += r.Count
			return
		}
	}
	t.rows = append(t.rows, r)
}

// Merge adds the counts of o.
func (t *HistoryTally) Merge(o *HistoryTally) {
	for _, r := range o.rows {
		t.add(r)
	}
}

// Rows returns the counts, one row per queue, minute and outcome, in
// CompareHistoryRows order. The slice is the tally's own until Reset.
func (t *HistoryTally) Rows() []HistoryRow {
	slices.SortFunc(t.rows, CompareHistoryRows)
	return t.rows
}

// Len returns the number of rows.
func (t *HistoryTally) Len() int { return len(t.rows) }

// Reset empties the tally, keeping its memory.
func (t *HistoryTally) Reset() { t.rows = t.rows[:0] }

// OldestDue returns the RunAt of a queue's oldest due job from the two
// reads every store makes for Store.QueueLatency: available, the earliest
// RunAt among its available jobs, and waiting, the earliest among its
// scheduled and retrying jobs (each zero when there is none). A waiting
// job counts only when it is due (its RunAt not after now): a fetch would
// claim it. Zero when no job is due.
func OldestDue(available, waiting, now time.Time) time.Time {
	if waiting.IsZero() || waiting.After(now) {
		return available
	}
	if available.IsZero() || waiting.Before(available) {
		return waiting
	}
	return available
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
