package memstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/steps"
	"github.com/sortiehq/sortie/store/internal/transition"
)

// Steps: Store.steps holds each job's recorded steps, whole, in order. A
// spawned child names its parent and spawn step in its row; setState and
// drop call childMoved whenever a child enters or leaves the pending
// states, which keeps the step's Pending and, at zero, releases a parent
// waiting at that step. A finished child of a parent still stored stays
// out of the finished lanes (JobPrune reads only those) until the parent
// is dropped.

// stepOf returns job id's step named name, or nil.
func (s *Store) stepOf(id int64, name string) *store.JobStep {
	list := s.steps[id]
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// addStep appends st to job id's steps.
func (s *Store) addStep(id int64, st store.JobStep) {
	if s.steps == nil {
		s.steps = make(map[int64][]store.JobStep)
	}
	s.steps[id] = append(s.steps[id], st)
}

// claimed returns job id if it is running under token: nil otherwise.
func (s *Store) claimed(id, token int64) *job {
	j := s.jobs.get(id)
	if j == nil || j.st != stRunning || j.row.ClaimToken != token {
		return nil
	}
	return j
}

// StepList returns a job's steps, whole. See store.Store.
func (s *Store) StepList(ctx context.Context, p *store.StepListParams) ([]store.JobStep, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if s.jobs.get(p.ID) == nil {
		return nil, fmt.Errorf("list steps of job %d: %w", p.ID, store.ErrNotFound)
	}
	out := make([]store.JobStep, len(s.steps[p.ID]))
	for i, st := range s.steps[p.ID] {
		st.Result, st.Children = bytes.Clone(st.Result), slices.Clone(st.Children)
		out[i] = st
	}
	return out, nil
}

// StepRecord records steps of running attempts. See store.Store.
func (s *Store) StepRecord(ctx context.Context, p *store.StepRecordParams) ([]store.StepResult, error) {
	if err := steps.CheckRecords(p.Steps); err != nil {
		return nil, err
	}
	res := make([]store.StepResult, len(p.Steps))
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	for i, r := range p.Steps {
		j := s.claimed(r.ID, r.ClaimToken)
		switch {
		case j == nil:
		case s.stepOf(r.ID, r.Name) != nil:
			res[i] = store.StepResult{Applied: true, Exists: true}
		default:
			s.addStep(r.ID, store.JobStep{Name: r.Name, Kind: store.StepRun, Attempt: j.row.Attempt, RecordedAt: p.Now,
				Size: len(r.Result), Result: bytes.Clone(r.Result)})
			res[i] = store.StepResult{Applied: true}
		}
	}
	return res, nil
}

// StepSleep ends a running attempt at a durable sleep. See store.Store.
func (s *Store) StepSleep(ctx context.Context, p *store.StepSleepParams) (*store.StepResult, error) {
	if err := steps.CheckSleep(p); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	var qs queueSet
	res, err := s.sleep(p, &qs)
	s.mu.Unlock()
	s.notify(qs)
	return res, err
}

func (s *Store) sleep(p *store.StepSleepParams, qs *queueSet) (*store.StepResult, error) {
	j := s.claimed(p.ID, p.ClaimToken)
	if j == nil {
		return &store.StepResult{}, nil
	}
	if j.row.CancelRequested {
		return &store.StepResult{Applied: true, CancelRequested: true}, nil
	}
	until, exists := p.Until, false
	if st := s.stepOf(p.ID, p.Name); st != nil {
		if err := steps.Existing(p.ID, st, store.StepSleep); err != nil {
			return nil, err
		}
		until, exists = st.Until, true
	} else {
		s.addStep(p.ID, store.JobStep{Name: p.Name, Kind: store.StepSleep, Attempt: j.row.Attempt, RecordedAt: p.Now, Until: until})
	}
	state := steps.SleepState(until, p.Now)
	s.apply(j, transition.Step{State: state, RunAt: until, Uncount: true}, false, p.Now, qs)
	j.row.WaitsFor = p.Name
	res := steps.Suspended(state)
	res.Exists = exists
	return res, nil
}

// StepAwait ends a running attempt until the children of one of its spawn
// steps have finished. See store.Store.
func (s *Store) StepAwait(ctx context.Context, p *store.StepAwaitParams) (*store.StepResult, error) {
	if err := steps.CheckAwait(p); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	var qs queueSet
	res, err := s.await(p, &qs)
	s.mu.Unlock()
	s.notify(qs)
	return res, err
}

func (s *Store) await(p *store.StepAwaitParams, qs *queueSet) (*store.StepResult, error) {
	j := s.claimed(p.ID, p.ClaimToken)
	if j == nil {
		return &store.StepResult{}, nil
	}
	if j.row.CancelRequested {
		return &store.StepResult{Applied: true, CancelRequested: true}, nil
	}
	st := s.stepOf(p.ID, p.Name)
	if st == nil || st.Kind != store.StepSpawn {
		return nil, steps.NoSpawnError(p.ID, p.Name)
	}
	if st.Pending == 0 {
		return &store.StepResult{Applied: true}, nil
	}
	s.stopRunning(j)
	if set := &j.q.set; set.MaxRunning > 0 || set.PartitionMaxRunning > 0 {
		qs.add(j.row.Queue)
	}
	j.row.Attempt--
	j.row.RunAt = p.Now
	j.row.WaitsFor = p.Name
	s.setState(j, stWaiting)
	return steps.Suspended(store.JobStateWaiting), nil
}

// StepSpawn enqueues children of a running job once, recording them as a
// step. See store.Store.
func (s *Store) StepSpawn(ctx context.Context, p *store.StepSpawnParams) (*store.StepResult, error) {
	if err := steps.CheckSpawn(p); err != nil {
		return nil, err
	}
	jobs, deps, err := build(nil, p.Jobs, p.Now)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		j.row.ParentID, j.row.SpawnStep, j.row.CancelWithParent = p.ID, p.Name, p.CancelWithParent
	}
	res := make([]store.EnqueueResult, len(jobs))
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	var qs queueSet
	out, err := s.spawn(p, jobs, res, deps, &qs)
	s.mu.Unlock()
	s.notify(qs)
	return out, err
}

func (s *Store) spawn(p *store.StepSpawnParams, jobs []*job, res []store.EnqueueResult, deps bool, qs *queueSet) (*store.StepResult, error) {
	parent := s.claimed(p.ID, p.ClaimToken)
	if parent == nil {
		return &store.StepResult{}, nil
	}
	if st := s.stepOf(p.ID, p.Name); st != nil {
		if err := steps.Existing(p.ID, st, store.StepSpawn); err != nil {
			return nil, err
		}
		return &store.StepResult{Applied: true, Exists: true, Children: slices.Clone(st.Children)}, nil
	}
	if err := s.enqueue(jobs, p.Jobs, res, deps, p.Now, false, qs); err != nil {
		return nil, err
	}
	ids, pending := steps.Children(res)
	s.addStep(p.ID, store.JobStep{Name: p.Name, Kind: store.StepSpawn, Attempt: parent.row.Attempt, RecordedAt: p.Now,
		ChildCount: len(ids), Children: ids, Pending: pending})
	return &store.StepResult{Applied: true, Children: slices.Clone(ids)}, nil
}

// childMoved records that child j entered (d = 1) or left (d = -1) the
// pending states, and releases its parent when that leaves none of the
// parent's step pending while the parent awaits it.
func (s *Store) childMoved(j *job, d int) {
	st := s.stepOf(j.row.ParentID, j.row.SpawnStep)
	if st == nil {
		return
	}
	st.Pending += d
	if st.Pending != 0 || d > 0 {
		return
	}
	p := s.jobs.get(j.row.ParentID)
	if p == nil || p.st != stWaiting || p.row.WaitsFor != st.Name {
		return
	}
	p.row.WaitsFor = ""
	s.toAvailable(p)
	// Outside any caller's queue set: the hub's signal never blocks.
	s.hub.Notify(p.row.Queue)
}

// cancelChildren cancels the pending children of job id (being cancelled,
// or deleted when deleted) that have CancelWithParent, as JobCancel would,
// and theirs in turn.
func (s *Store) cancelChildren(id int64, deleted bool, now time.Time, qs *queueSet) {
	for _, st := range s.steps[id] {
		for _, c := range st.Children {
			cj := s.jobs.get(c)
			if cj == nil || !cj.row.CancelWithParent || !isPending(cj.st) {
				continue
			}
			if cj.st == stRunning {
				cj.row.CancelRequested = true
			} else {
				appendError(cj, &store.AttemptError{Message: steps.ParentCancelledMessage(id, deleted)}, now)
				s.finalize(cj, stCancelled, now)
				s.ended(cj, now, qs)
			}
			s.cancelChildren(c, false, now, qs)
		}
	}
}

// heldByParent reports whether finished job j stays out of the finished
// lanes: its parent is still stored.
func (s *Store) heldByParent(j *job) bool {
	return j.row.ParentID != 0 && s.jobs.get(j.row.ParentID) != nil
}

// dropSteps forgets the steps of job j, just dropped, and lets its
// finished children be pruned.
func (s *Store) dropSteps(j *job) {
	list, ok := s.steps[j.row.ID]
	if !ok {
		return
	}
	delete(s.steps, j.row.ID)
	for _, st := range list {
		for _, c := range st.Children {
			if cj := s.jobs.get(c); cj != nil && !isPending(cj.st) && cj.lane == nil {
				s.toFinished(cj)
			}
		}
	}
}

// withSteps returns row with its steps as JobGet shows them.
func (s *Store) withSteps(row store.JobRow) store.JobRow {
	row.WaitsFor = steps.WaitsFor(row.State, row.WaitsFor)
	list := s.steps[row.ID]
	if len(list) == 0 {
		return row
	}
	row.Steps = make([]store.JobStep, len(list))
	for i, st := range list {
		row.Steps[i] = steps.Summary(st)
	}
	return row
}
