package memstore

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/imported"
	"github.com/sortiehq/sortie/store/internal/steps"
)

// JobImport writes exported jobs as they were, all or none. See
// store.Store.
func (s *Store) JobImport(ctx context.Context, p *store.JobImportParams) ([]store.ImportResult, error) {
	if err := store.ImportValidate(p.Jobs); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	res, conflict := s.importCheck(p.Jobs)
	if conflict || p.DryRun {
		s.mu.Unlock()
		return res, nil
	}
	var qs queueSet
	var awaiting []int64 // jobs waiting at an Await that this call may release
	for i, r := range p.Jobs {
		if res[i].Status != store.ImportAdded {
			continue
		}
		s.importJob(r, p.Now, &qs)
		if r.WaitsFor != "" && r.State == store.JobStateWaiting {
			awaiting = append(awaiting, r.ID)
		}
		if r.ParentID != 0 {
			awaiting = append(awaiting, r.ParentID)
		}
	}
	s.importAwaits(awaiting, &qs)
	s.mu.Unlock()
	s.notify(qs)
	return res, nil
}

// importCheck says what JobImport would do with each job, and whether any
// conflicts.
func (s *Store) importCheck(rows []*store.JobRow) (_ []store.ImportResult, conflict bool) {
	return imported.Statuses(rows, func(id int64) *store.JobRow {
		if j := s.jobs.get(id); j != nil {
			return &j.row
		}
		return nil
	}, func(key string) (int64, bool) {
		if h := s.unique[key]; h != nil {
			return h.row.ID, true
		}
		return 0, false
	})
}

// importJob stores a copy of src in its state (see imported.State),
// with everything that state holds: lanes, lease, unique key, the
// dependencies it waits for, the cause of its cancellation.
func (s *Store) importJob(src *store.JobRow, now time.Time, qs *queueSet) {
	j := &job{row: *src, leaseIdx: -1}
	r := &j.row
	r.Args, r.Meta, r.Result = bytes.Clone(src.Args), bytes.Clone(src.Meta), bytes.Clone(src.Result)
	r.Tags, r.Errors, r.DependsOn = slices.Clone(src.Tags), slices.Clone(src.Errors), slices.Clone(src.DependsOn)
	r.CancelledBy = 0
	if r.State == store.JobStateWaiting {
		holds := make([]bool, len(r.DependsOn))
		for k, d := range r.DependsOn {
			dj := s.jobs.get(d)
			holds[k] = dj != nil && stateNames[dj.st].HoldsBack(r.IgnoreDepFailure)
		}
		r.State = imported.State(r, holds, now)
	}
	r.Steps = nil
	j.st = uint8(stateIndex(r.State))
	j.q = s.queue(r.Queue)
	j.q.counts[j.st]++
	s.jobs.add(j)
	s.nextID = max(s.nextID, r.ID+1)
	s.lastToken = max(s.lastToken, r.ClaimToken)
	s.importSteps(j, src.Steps)
	if !isPending(j.st) {
		s.toFinished(j)
		if src.CancelledBy != 0 {
			s.cancelledBy(j, src.CancelledBy)
		}
		return
	}
	s.hold(j)
	if r.ParentID != 0 {
		s.childMoved(j, 1)
	}
	qs.add(r.Queue)
	switch j.st {
	case stWaiting:
		s.waitFor(j)
	case stAvailable:
		j.sub.avail.push(makeEntry(r.RunAt, j))
		j.lane = &j.sub.avail
	case stScheduled, stRetrying:
		j.sub.wait.push(makeEntry(r.RunAt, j))
		j.lane = &j.sub.wait
	case stRunning:
		j.lsec, j.lnsec = r.LeaseUntil.Unix(), int32(r.LeaseUntil.Nanosecond())
		s.leases.push(j)
		if j.part != nil {
			j.part.running++
		}
	}
}

// importSteps stores the steps of imported job j, a spawn step's Pending
// counting the children already stored that are pending.
func (s *Store) importSteps(j *job, list []store.JobStep) {
	for _, st := range list {
		st.Result, st.Children = bytes.Clone(st.Result), slices.Clone(st.Children)
		st.ChildCount, st.Pending = len(st.Children), 0
		for _, c := range st.Children {
			if cj := s.jobs.get(c); cj != nil && isPending(cj.st) && cj.row.ParentID == j.row.ID {
				st.Pending++
			}
		}
		if st.Kind == store.StepRun {
			st.Size = len(st.Result)
		}
		s.addStep(j.row.ID, st)
	}
}

// importAwaits releases the jobs of ids (imported ones and parents of
// imported children) that wait at an Await their children no longer hold
// back (steps.ImportAwaitReady).
func (s *Store) importAwaits(ids []int64, qs *queueSet) {
	for _, id := range ids {
		j := s.jobs.get(id)
		if j == nil || j.st != stWaiting || j.row.WaitsFor == "" {
			continue
		}
		st := s.stepOf(id, j.row.WaitsFor)
		if st == nil || !steps.ImportAwaitReady(st, func(c int64) bool { return s.jobs.get(c) != nil }) {
			continue
		}
		j.row.WaitsFor = ""
		s.toAvailable(j)
		qs.add(j.row.Queue)
	}
}
