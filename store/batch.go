package store

import (
	"fmt"
	"slices"
	"time"
)

// The rules of JobEnqueueMany that do not depend on how a store keeps its
// rows. Every store calls them, so a batch means the same on each.

// StartState returns the state and RunAt a new job starts with, before its
// dependencies are looked at: available at now when runAt is zero or not
// after now (a zero runAt is stored as now), scheduled at runAt otherwise.
func StartState(runAt, now time.Time) (JobState, time.Time) {
	if runAt.IsZero() {
		return JobStateAvailable, now
	}
	if runAt.After(now) {
		return JobStateScheduled, runAt
	}
	return JobStateAvailable, runAt
}

// MarkBatchDuplicates applies the in-batch half of the unique-key rule: a
// job whose UniqueKey an earlier job of the same batch has is a duplicate
// of that job. It sets such a job's result to Duplicate with ID -1-i, i
// the index of the batch's first job with the key, for
// ResolveBatchDuplicates to fill in once that job's ID and state are known,
// and reports whether any job of the batch has a unique key.
func MarkBatchDuplicates(jobs []*NewJob, results []EnqueueResult) (unique bool) {
	var first map[string]int
	for i, j := range jobs {
		if j.UniqueKey == "" {
			continue
		}
		unique = true
		if f, ok := first[j.UniqueKey]; ok {
			results[i] = EnqueueResult{ID: int64(-1 - f), Duplicate: true}
			continue
		}
		if first == nil {
			first = make(map[string]int)
		}
		first[j.UniqueKey] = i
	}
	return unique
}

// ResolveBatchDuplicates fills in the results MarkBatchDuplicates marked
// with the ID and state of the batch's job they duplicate (itself a new job,
// or a duplicate of a pending holder).
func ResolveBatchDuplicates(results []EnqueueResult) {
	for i := range results {
		if results[i].Duplicate && results[i].ID < 0 {
			first := results[-1-results[i].ID]
			results[i] = EnqueueResult{ID: first.ID, Duplicate: true, State: first.State}
		}
	}
}

// HasDeps reports whether j depends on other jobs.
func (j *NewJob) HasDeps() bool {
	return len(j.DependsOn) > 0 || len(j.DependsOnIndex) > 0
}

// DependencyIDs returns the IDs of the jobs j depends on, each once, in
// order: its DependsOn, then its DependsOnIndex resolved through results,
// the results of its batch so far (the earlier jobs have their IDs; a
// duplicate's is its holder's).
func DependencyIDs(j *NewJob, results []EnqueueResult) []int64 {
	ids := make([]int64, 0, len(j.DependsOn)+len(j.DependsOnIndex))
	for _, d := range j.DependsOn {
		if !slices.Contains(ids, d) {
			ids = append(ids, d)
		}
	}
	for _, x := range j.DependsOnIndex {
		if d := results[x].ID; !slices.Contains(ids, d) {
			ids = append(ids, d)
		}
	}
	return ids
}

// DepsVerdict is what a new job's dependencies make of it at enqueue.
type DepsVerdict struct {
	// State is the job's state: its start state (see StartState) when every
	// dependency completed, waiting while one is pending or holds it back,
	// cancelled when one ended dead or cancelled and the job does not
	// ignore failures.
	State JobState
	// CancelledBy is the first failed dependency, when State is cancelled.
	CancelledBy int64
	// Message is the error recorded on a cancelled job.
	Message string
}

// JudgeDeps decides the state of a new job that starts in state start
// (see StartState) and depends on the jobs deps, whose current states
// states holds in the same order. A failed dependency (dead or cancelled)
// cancels the job unless ignoreFailure; a pending one keeps it waiting; a
// completed one, or a failed one the job ignores, does neither.
func JudgeDeps(start JobState, ignoreFailure bool, deps []int64, states []JobState) DepsVerdict {
	waiting := false
	for k, st := range states {
		switch {
		case st == JobStateCompleted:
		case st.Finished():
			if !ignoreFailure {
				return DepsVerdict{State: JobStateCancelled, CancelledBy: deps[k], Message: DependencyEndedMessage(deps[k], st)}
			}
		default:
			waiting = true
		}
	}
	if waiting {
		return DepsVerdict{State: JobStateWaiting}
	}
	return DepsVerdict{State: start}
}

// DependencyEndedMessage is the error recorded on a job cancelled because
// its dependency dep ended in state st (dead or cancelled). Stores find the
// dependency again in this text when they upgrade old data, so it must not
// change.
func DependencyEndedMessage(dep int64, st JobState) string {
	return fmt.Sprintf("dependency job %d ended %s", dep, st)
}

// DependencyDeletedMessage is the error recorded on a waiting job
// cancelled because its dependency dep was deleted or pruned.
func DependencyDeletedMessage(dep int64) string {
	return fmt.Sprintf("dependency job %d was deleted", dep)
}

// UnknownDependencyError is the error of a batch whose job i (kind kind) of
// n depends on job dep, which does not exist.
func UnknownDependencyError(i, n int, kind string, dep int64) error {
	return fmt.Errorf("job %d of %d (kind %q) depends on job %d: %w", i+1, n, kind, dep, ErrNotFound)
}
