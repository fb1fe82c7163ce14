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
// again, and theirs in turn (depgraph.Revive). A job whose unique key is
// held or whose other dependency is gone stays cancelled, listed for the
// next retry of id. Dependents that are not waiting after all (none can
// be, as id is pending) are made ready, their queues added to qs.
func (s *Store) revive(id int64, now time.Time, qs *queueSet) {
	_ = depgraph.Revive(reviver{s, now, qs}, id) // in memory: cannot fail
}

// reviver is the memory store's part of depgraph.Revive.
type reviver struct {
	s   *Store
	now time.Time
	qs  *queueSet
}

// CancelledBy implements depgraph.Reviver: it takes x's list from
// cascaded, skipping the jobs that left it since.
func (v reviver) CancelledBy(x int64) ([]*job, error) {
	ys, ok := v.s.cascaded[x]
	if !ok {
		return nil, nil
	}
	delete(v.s.cascaded, x)
	var out []*job
	for _, y := range ys {
		if v.s.jobs.get(y.row.ID) == y && y.st == stCancelled && y.row.CancelledBy == x {
			out = append(out, y)
		}
	}
	return out, nil
}

// Revive implements depgraph.Reviver. A job that cannot wait again goes
// back on its cause's list.
func (v reviver) Revive(y *job) (int64, error) {
	s := v.s
	if !s.revivable(y) {
		s.cascaded[y.row.CancelledBy] = append(s.cascaded[y.row.CancelledBy], y)
		return 0, nil
	}
	y.row.CancelledBy = 0
	s.unlane(y)
	y.row.FinalizedAt = time.Time{}
	s.hold(y)
	if s.waitFor(y) {
		s.setState(y, stWaiting)
	} else {
		s.ready(y, v.now)
		v.qs.add(y.row.Queue)
	}
	return y.row.ID, nil
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
// (cancelled for a deleted job), with depgraph.Cascade: see the comment at
// the top of this file. Dependents made available or scheduled add their
// queue to qs.
func (s *Store) settle(id int64, st uint8, now time.Time, qs *queueSet) {
	deleted := s.jobs.get(id) == nil
	_ = depgraph.Cascade(settler{s, now, qs}, []int64{id}, stateNames[st], deleted) // in memory: cannot fail
}

// settler is the memory store's part of depgraph.Cascade.
type settler struct {
	s   *Store
	now time.Time
	qs  *queueSet
}

// Dependents implements depgraph.Cascader. It returns a dependent once per
// dependency of ids it waits for, as each one counts in its waitN.
func (c settler) Dependents(ids []int64) ([]depgraph.Dependent[depRef], error) {
	var out []depgraph.Dependent[depRef]
	for _, id := range ids {
		ds, ok := c.s.dependents[id]
		if !ok {
			continue
		}
		delete(c.s.dependents, id)
		for _, ref := range ds {
			if c.waits(ref) {
				out = append(out, depgraph.Dependent[depRef]{Dep: id, Ignore: ref.j.row.IgnoreDepFailure, Row: ref})
			}
		}
	}
	return out, nil
}

// waits reports whether ref's job still waits in the wait ref was made in.
func (c settler) waits(ref depRef) bool {
	w := ref.j
	return w.st == stWaiting && ref.gen == w.waitGen && c.s.jobs.get(w.row.ID) == w
}

// Apply implements depgraph.Cascader: a released dependent is ready once
// its waitN drops to zero.
func (c settler) Apply(ds []depgraph.Dependent[depRef]) ([]int64, error) {
	var next []int64
	for _, d := range ds {
		if !c.waits(d.Row) {
			continue // an earlier link of this level cancelled it
		}
		w := d.Row.j
		if d.Fate.Release {
			if w.waitN--; w.waitN == 0 {
				c.s.ready(w, c.now)
				c.qs.add(w.row.Queue)
			}
			continue
		}
		appendError(w, &store.AttemptError{Message: d.Fate.Message}, c.now)
		c.s.finalize(w, stCancelled, c.now)
		if d.Fate.By != 0 {
			c.s.cancelledBy(w, d.Fate.By)
		}
		next = append(next, w.row.ID)
	}
	return next, nil
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
