package sortie

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
)

// HistoryOutcome is what the history counts of a job: how it finished, or
// that an attempt failed and the job will run again; see
// store.HistoryOutcome.
type HistoryOutcome = store.HistoryOutcome

// The history outcomes, in the order rows sort by.
const (
	HistoryCompleted = store.HistoryCompleted
	HistoryCancelled = store.HistoryCancelled
	HistoryDead      = store.HistoryDead
	HistoryRetried   = store.HistoryRetried
)

// HistoryRow counts the jobs of one queue that reached one outcome in one
// period (a minute, or JobHistoryParams.Step): At is the period's start.
type HistoryRow = store.HistoryRow

// JobHistoryParams choose the history JobHistory returns.
type JobHistoryParams struct {
	// Queue, when set, limits the history to one queue.
	Queue string
	// Since is the start of the period: its minute (or its Step, when
	// Step is longer) is the first counted. Required.
	Since time.Time
	// Until ends the period (exclusive): the counts of the minute it falls
	// in are included. Defaults to now.
	Until time.Time
	// Step sums the minutes into periods of Step, aligned on the Unix
	// epoch (time.Hour sums each hour, in UTC). A whole number of minutes;
	// defaults to one minute.
	Step time.Duration
}

// JobHistory returns how many jobs of each queue finished (completed,
// cancelled or dead) and how many attempts failed with the job to run
// again (retried), per Step from Since to Until, oldest first, then by
// queue and outcome; periods without any are left out. The counts are
// kept in the store, in the same step as each outcome, by every process
// that uses it, and survive restarts; they are kept for
// Config.HistoryRetention (7 days by default). Deleting or retrying jobs
// does not change them.
func (c *Client) JobHistory(ctx context.Context, p *JobHistoryParams) ([]HistoryRow, error) {
	var q JobHistoryParams
	if p != nil {
		q = *p
	}
	if q.Step == 0 {
		q.Step = time.Minute
	}
	if q.Step < time.Minute || q.Step%time.Minute != 0 {
		return nil, invalidf("JobHistoryParams.Step must be a whole number of minutes, got %s", q.Step)
	}
	if q.Since.IsZero() {
		return nil, invalidf("JobHistoryParams.Since is required")
	}
	if q.Until.IsZero() {
		q.Until = c.clock.Now()
	}
	since := q.Since.UTC().Truncate(q.Step)
	until := store.HistoryMinute(q.Until).Add(time.Minute)
	if !since.Before(until) {
		return nil, invalidf("JobHistoryParams.Since (%s) must be before Until (%s)", q.Since.UTC().Format(time.RFC3339), q.Until.UTC().Format(time.RFC3339))
	}
	rows, err := c.store.JobHistory(ctx, &store.JobHistoryParams{Queue: q.Queue, Since: since, Until: until})
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	if q.Step == time.Minute {
		return rows, nil
	}
	type key struct {
		queue   string
		at      int64
		outcome HistoryOutcome
	}
	sums := make(map[key]int64)
	for _, r := range rows {
		sums[key{r.Queue, r.At.Truncate(q.Step).Unix(), r.Outcome}] += r.Count
	}
	out := make([]HistoryRow, 0, len(sums))
	for k, n := range sums {
		out = append(out, HistoryRow{Queue: k.queue, At: time.Unix(k.at, 0).UTC(), Outcome: k.outcome, Count: n})
	}
	slices.SortFunc(out, store.CompareHistoryRows)
	return out, nil
}

// QueueLatency is how long the oldest due job of a queue has waited.
type QueueLatency struct {
	Queue string
	// OldestRunAt is when the queue's oldest due job became due: the
	// earliest RunAt among its available jobs and its scheduled and
	// retrying jobs that are due.
	OldestRunAt time.Time
	// Latency is how long that job has waited: now - OldestRunAt (zero
	// when the clock is behind it).
	Latency time.Duration
}

// QueueLatency returns the latency of each queue that has due jobs, by
// name, or of queue alone when it is not empty; a queue whose jobs all run
// (or are waiting or scheduled for later) is left out. It reads the head
// of the store's index of each priority, a few reads per queue, however
// many jobs wait. A paused queue's latency keeps growing.
func (c *Client) QueueLatency(ctx context.Context, queue string) ([]QueueLatency, error) {
	now := c.clock.Now()
	rows, err := c.store.QueueLatency(ctx, &store.QueueLatencyParams{Queue: queue, Now: now})
	if err != nil {
		return nil, fmt.Errorf("read queue latency: %w", err)
	}
	out := make([]QueueLatency, len(rows))
	for i, r := range rows {
		out[i] = QueueLatency{Queue: r.Queue, OldestRunAt: r.OldestRunAt, Latency: max(now.Sub(r.OldestRunAt), 0)}
	}
	return out, nil
}
