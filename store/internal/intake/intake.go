// Package intake holds the rules of a JobEnqueueMany batch that do not
// depend on how a store keeps its rows: the state a new job starts in, the
// in-batch half of the unique-key rule and the room a queue's MaxDepth
// leaves. Every Go backend calls them, so a batch means the same on each;
// only the backends import this package.
package intake

import (
	"time"

	"github.com/sortiehq/sortie/store"
)

// StartState returns the state and RunAt a new job starts with, before its
// dependencies are looked at: available at now when runAt is zero or not
// after now (a zero runAt is stored as now), scheduled at runAt otherwise.
func StartState(runAt, now time.Time) (store.JobState, time.Time) {
	if runAt.IsZero() {
		return store.JobStateAvailable, now
	}
	if runAt.After(now) {
		return store.JobStateScheduled, runAt
	}
	return store.JobStateAvailable, runAt
}

// MarkDuplicates applies the in-batch half of the unique-key rule: a
// job whose UniqueKey an earlier job of the same batch has is a duplicate
// of that job. It sets such a job's result to Duplicate with ID -1-i, i
// the index of the batch's first job with the key, for
// ResolveDuplicates to fill in once that job's ID and state are known,
// and reports whether any job of the batch has a unique key.
func MarkDuplicates(jobs []*store.NewJob, results []store.EnqueueResult) (unique bool) {
	var first map[string]int
	for i, j := range jobs {
		if j.UniqueKey == "" {
			continue
		}
		unique = true
		if f, ok := first[j.UniqueKey]; ok {
			results[i] = store.EnqueueResult{ID: int64(-1 - f), Duplicate: true}
			continue
		}
		if first == nil {
			first = make(map[string]int)
		}
		first[j.UniqueKey] = i
	}
	return unique
}

// ResolveDuplicates fills in the results MarkDuplicates marked
// with the ID and state of the batch's job they duplicate (itself a new job,
// or a duplicate of a pending holder).
func ResolveDuplicates(results []store.EnqueueResult) {
	for i := range results {
		if results[i].Duplicate && results[i].ID < 0 {
			first := results[-1-results[i].ID]
			results[i] = store.EnqueueResult{ID: first.ID, Duplicate: true, State: first.State}
		}
	}
}

// DepthExcess returns how many queued jobs a queue holding queued jobs would
// have past its maxDepth if adding more were enqueued: 0 when they fit or
// the queue has no MaxDepth.
func DepthExcess(queued, adding int64, maxDepth int) int64 {
	if maxDepth <= 0 || adding <= 0 {
		return 0
	}
	return max(queued+adding-int64(maxDepth), 0)
}
