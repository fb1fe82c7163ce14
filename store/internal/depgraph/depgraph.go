// Package depgraph holds the rules of job dependencies that do not depend on
// how a store keeps its rows: the IDs a new job depends on, the state its
// dependencies give it at enqueue, and the walk that revives or cancels
// the jobs waiting on a job an operator retried or cancelled. Every Go
// backend calls them (the Redis store's scripts keep their own copy), so a
// dependency means the same on each; only the backends import this package.
package depgraph

import (
	"fmt"
	"slices"

	"github.com/sortiehq/sortie/store"
)

// IDs returns the IDs of the jobs j depends on, each once, in
// order: its DependsOn, then its DependsOnIndex resolved through results,
// the results of its batch so far (the earlier jobs have their IDs; a
// duplicate's is its holder's).
func IDs(j *store.NewJob, results []store.EnqueueResult) []int64 {
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

// Verdict is what a new job's dependencies make of it at enqueue.
type Verdict struct {
	// State is the job's state: its start state (see intake.StartState) when every
	// dependency completed, waiting while one is pending or holds it back,
	// cancelled when one ended dead or cancelled and the job does not
	// ignore failures.
	State store.JobState
	// CancelledBy is the first failed dependency, when State is cancelled.
	CancelledBy int64
	// Message is the error recorded on a cancelled job.
	Message string
}

// Judge decides the state of a new job that starts in state start
// (see intake.StartState) and depends on the jobs deps, whose current states
// states holds in the same order. A failed dependency (dead or cancelled)
// cancels the job unless ignoreFailure; a pending one keeps it waiting; a
// completed one, or a failed one the job ignores, does neither.
func Judge(start store.JobState, ignoreFailure bool, deps []int64, states []store.JobState) Verdict {
	waiting := false
	for k, st := range states {
		switch {
		case st == store.JobStateCompleted:
		case st.Finished():
			if !ignoreFailure {
				return Verdict{State: store.JobStateCancelled, CancelledBy: deps[k], Message: store.DependencyEndedMessage(deps[k], st)}
			}
		default:
			waiting = true
		}
	}
	if waiting {
		return Verdict{State: store.JobStateWaiting}
	}
	return Verdict{State: start}
}

// DeletedMessage is the error recorded on a waiting job
// cancelled because its dependency dep was deleted or pruned.
func DeletedMessage(dep int64) string {
	return fmt.Sprintf("dependency job %d was deleted", dep)
}

// UnknownError is the error of a batch whose job i (kind kind) of
// n depends on job dep, which does not exist.
func UnknownError(i, n int, kind string, dep int64) error {
	return fmt.Errorf("job %d of %d (kind %q) depends on job %d: %w", i+1, n, kind, dep, store.ErrNotFound)
}
