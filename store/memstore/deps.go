package memstore

import (
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/depgraph"
)

// Dependencies: a waiting job counts in waitN the dependencies that hold
// it back, and sits in Store.dependents under each of them. When one ends,
// settle visits only its own dependents: a completed dependency (or a
// failed one a dependent ignores) decrements waitN, and the dependent is
// released at zero; a failed one cancels the dependent, records the cause
// (Store.cascaded and its CancelledBy) and goes on down the graph. An entry of
// dependents carries the job's waitGen when it was made: a job that left
// the waiting state (retried, cancelled, deleted) and entered it again has
// a new waitGen, so the entries of its earlier wait are skipped.
//
// JobRetry of a job revives the jobs its ending cancelled: it takes its
// list from cascaded and makes each job whose cause is still this one wait
// again (waitFor), then does the same for theirs.

// depRef is an entry of Store.dependents: a waiting job and its waitGen.
type depRef struct {
	j   *job
	gen uint32
}

// linkDeps resolves the dependencies of new job j (nj's DependsOn and
// DependsOnIndex, the latter through the batch's results so far), and sets
// j's state: cancelled at now when a dependency already failed (unless j
// ignores failures), waiting while one has not finished, or left as it is.
// The batch was validated: every DependsOn ID exists, every index is
// earlier.
func (s *Store) linkDeps(j *job, nj *store.NewJob, res []store.EnqueueResult, now time.Time) {
	deps := depgraph.IDs(nj, res)
	j.row.DependsOn = deps
	states := make([]store.JobState, len(deps))
	for k, d := range deps {
		states[k] = s.jobs.get(d).row.State
	}
	v := depgraph.Judge(j.row.State, j.row.IgnoreDepFailure, deps, states)
	switch v.State {
	case store.JobStateCancelled:
		j.st, j.row.State, j.row.FinalizedAt = stCancelled, store.JobStateCancelled, now
		s.count(j.q, now, store.HistoryCancelled)
		appendError(j, &store.AttemptError{Message: v.Message}, now)
		s.cancelledBy(j, v.CancelledBy)
	case store.JobStateWaiting:
		s.waitFor(j)
		j.st, j.row.State = stWaiting, store.JobStateWaiting
	}
}

// waitFor links j, about to enter the waiting state, to the dependencies
// that hold it back (pending ones, and dead or cancelled ones unless it
// ignores failures) and reports whether any does. A dependency that no
// longer exists does not.
func (s *Store) waitFor(j *job) bool {
	j.waitN = 0
	j.waitGen++
	for _, d := range j.row.DependsOn {
		if dj := s.jobs.get(d); dj != nil && stateNames[dj.st].HoldsBack(j.row.IgnoreDepFailure) {
			if s.dependents == nil {
				s.dependents = make(map[int64][]depRef)
			}
			s.dependents[d] = append(s.dependents[d], depRef{j, j.waitGen})
			j.waitN++
		}
	}
	return j.waitN > 0
}

// cancelledBy records that j was cancelled because its dependency d ended
// dead or cancelled, so that a retry of d revives it.
func (s *Store) cancelledBy(j *job, d int64) {
	if s.cascaded == nil {
		s.cascaded = make(map[int64][]*job)
	}
	j.row.CancelledBy = d
	s.cascaded[d] = append(s.cascaded[d], j)
}

// forgetCause forgets why j was cancelled, as it leaves that state.
func (s *Store) forgetCause(j *job) { j.row.CancelledBy = 0 }

// revive makes the jobs cancelled because of job id, just retried, wait
// again, and theirs in turn (see JobRetry). A job whose unique key is held
// or whose other dependency is gone stays cancelled, listed for the next
// retry of id. Dependents that are not waiting after all (none can be, as
// id is pending) are made ready, their queues added to qs.
func (s *Store) revive(id int64, now time.Time, qs *queueSet) {
	stack := []int64{id}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		ys, ok := s.cascaded[x]
		if !ok {
			continue
		}
		delete(s.cascaded, x)
		var kept []*job
		for _, y := range ys {
			if s.jobs.get(y.row.ID) != y || y.st != stCancelled || y.row.CancelledBy != x {
				continue
			}
			if !s.revivable(y) {
				kept = append(kept, y)
				continue
			}
			y.row.CancelledBy = 0
			s.unlane(y)
			y.row.FinalizedAt = time.Time{}
			s.hold(y)
			if s.waitFor(y) {
				s.setState(y, stWaiting)
			} else {
				s.ready(y, now)
				qs.add(y.row.Queue)
			}
			stack = append(stack, y.row.ID)
		}
		if len(kept) > 0 {
			s.cascaded[x] = kept
		}
	}
}

// revivable reports whether cancelled job y can wait again: its unique key
// is free and every dependency still exists.
func (s *Store) revivable(y *job) bool {
	if k := y.row.UniqueKey; k != "" && s.unique[k] != nil {
		return false
	}
	for _, d := range y.row.DependsOn {
		if s.jobs.get(d) == nil {
			return false
		}
	}
	return true
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
		for _, ref := range ds {
			w := ref.j
			if w.st != stWaiting || ref.gen != w.waitGen || s.jobs.get(w.row.ID) != w {
				continue
			}
			if e.st == stCompleted || w.row.IgnoreDepFailure {
				if w.waitN--; w.waitN == 0 {
					s.ready(w, now)
					qs.add(w.row.Queue)
				}
				continue
			}
			msg := store.DependencyDeletedMessage(e.id)
			if s.jobs.get(e.id) != nil {
				msg = store.DependencyEndedMessage(e.id, stateNames[e.st])
			}
			appendError(w, &store.AttemptError{Message: msg}, now)
			s.finalize(w, stCancelled, now)
			if s.jobs.get(e.id) != nil {
				s.cancelledBy(w, e.id)
			}
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
