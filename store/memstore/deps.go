package memstore

import (
	"fmt"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Dependencies: a waiting job counts in waitN the dependencies that have
// not finished, and sits in Store.dependents under each of them. When one
// ends, settle visits only its own dependents: a completed dependency (or a
// failed one a dependent ignores) decrements waitN, and the dependent is
// released at zero; a failed one cancels the dependent and goes on down the
// graph. Entries of dependents that left the waiting state (retried,
// cancelled, deleted) are skipped when their dependency ends.

// linkDeps resolves the dependencies of new job j (nj's DependsOn and
// DependsOnIndex, the latter through the batch's results so far), and sets
// j's state: cancelled at now when a dependency already failed (unless j
// ignores failures), waiting while one has not finished, or left as it is.
// The batch was validated: every DependsOn ID exists, every index is
// earlier.
func (s *Store) linkDeps(j *job, nj *store.NewJob, res []store.EnqueueResult, now time.Time) {
	deps := make([]int64, 0, len(nj.DependsOn)+len(nj.DependsOnIndex))
	for _, d := range nj.DependsOn {
		if !slices.Contains(deps, d) {
			deps = append(deps, d)
		}
	}
	for _, x := range nj.DependsOnIndex {
		if d := res[x].ID; !slices.Contains(deps, d) {
			deps = append(deps, d)
		}
	}
	j.row.DependsOn = deps
	if !j.row.IgnoreDepFailure {
		for _, d := range deps {
			if dj := s.jobs.get(d); dj != nil && (dj.st == stCancelled || dj.st == stDead) {
				j.st, j.row.State, j.row.FinalizedAt = stCancelled, store.JobStateCancelled, now
				appendError(j, &store.AttemptError{Message: depMessage(d, dj.row.State)}, now)
				return
			}
		}
	}
	for _, d := range deps {
		if dj := s.jobs.get(d); dj != nil && isPending(dj.st) {
			if s.dependents == nil {
				s.dependents = make(map[int64][]*job)
			}
			s.dependents[d] = append(s.dependents[d], j)
			j.waitN++
		}
	}
	if j.waitN > 0 {
		j.st, j.row.State = stWaiting, store.JobStateWaiting
	}
}

// depMessage is the error recorded on a job cancelled because dependency
// id ended in state st.
func depMessage(id int64, st store.JobState) string {
	return fmt.Sprintf("dependency %d ended %s", id, st)
}

// settle handles the waiting dependents of job id, which ended in state st
// (cancelled for a deleted job): see the comment at the top of this file.
// Dependents made available or scheduled add their queue to qs.
func (s *Store) settle(id int64, st uint8, now time.Time, qs *queueSet) {
	type end struct {
		id int64
		st uint8
	}
	stack := []end{{id, st}}
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		ds, ok := s.dependents[e.id]
		if !ok {
			continue
		}
		delete(s.dependents, e.id)
		for _, w := range ds {
			if w.st != stWaiting || s.jobs.get(w.row.ID) != w {
				continue
			}
			if e.st == stCompleted || w.row.IgnoreDepFailure {
				if w.waitN--; w.waitN == 0 {
					s.ready(w, now)
					qs.add(w.row.Queue)
				}
				continue
			}
			appendError(w, &store.AttemptError{Message: depMessage(e.id, stateNames[e.st])}, now)
			s.finalize(w, stCancelled, now)
			stack = append(stack, end{w.row.ID, stCancelled})
		}
	}
}

// ready makes waiting j available, or scheduled when its RunAt is after now.
func (s *Store) ready(j *job, now time.Time) {
	if j.row.RunAt.After(now) {
		s.toWaiting(j, stScheduled)
		return
	}
	s.toAvailable(j)
}

// ended settles the dependents of j, which just finished, if any job has
// dependents at all.
func (s *Store) ended(j *job, now time.Time, qs *queueSet) {
	if len(s.dependents) > 0 {
		s.settle(j.row.ID, j.st, now, qs)
	}
}
