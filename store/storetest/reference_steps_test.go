package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
)

// The reference store's steps: db.steps holds each job's steps, whole;
// a spawn step's Pending is counted from its children whenever it is
// read, and a parent waiting at an Await is released by the call that
// leaves none of its children pending (awaitsBefore, releaseAwaits).

// stepNamed returns job id's step named name, or nil.
func (db *refDB) stepNamed(id int64, name string) *store.JobStep {
	for i := range db.steps[id] {
		if db.steps[id][i].Name == name {
			return &db.steps[id][i]
		}
	}
	return nil
}

// pendingOf counts the pending children of spawn step st.
func (db *refDB) pendingOf(st *store.JobStep) int {
	n := 0
	for _, c := range st.Children {
		if j, ok := db.jobs[c]; ok && j.State.Pending() {
			n++
		}
	}
	if db.bug == "await-counts-finished" {
		n = 0
		for _, c := range st.Children {
			if j, ok := db.jobs[c]; ok && j.State != store.JobStateCompleted {
				n++
			}
		}
	}
	return n
}

// shown returns j as JobGet shows it: its steps summed up, WaitsFor only
// in the states that wait at a step.
func (db *refDB) shown(j *store.JobRow) *store.JobRow {
	c := clone(j)
	if c.State != store.JobStateWaiting && c.State != store.JobStateScheduled {
		c.WaitsFor = ""
	}
	c.Steps = nil
	for _, st := range db.steps[j.ID] {
		st.Result, st.Children = nil, nil
		if st.Kind == store.StepSpawn {
			st.Pending = db.pendingOf(db.stepNamed(j.ID, st.Name))
		}
		c.Steps = append(c.Steps, st)
	}
	return c
}

// awaitsBefore returns, for each job waiting at an Await, how many of its
// children are pending, before a call changes anything.
func (db *refDB) awaitsBefore() map[int64]int {
	m := make(map[int64]int)
	for id, j := range db.jobs {
		if j.State == store.JobStateWaiting && j.WaitsFor != "" {
			if st := db.stepNamed(id, j.WaitsFor); st != nil {
				m[id] = db.pendingOf(st)
			}
		}
	}
	return m
}

// releaseAwaits makes available each job that waited at an Await with
// children pending before the call (before) and has none now.
func (db *refDB) releaseAwaits(before map[int64]int, woke map[string]struct{}) {
	if db.bug == "await-never-released" {
		return
	}
	for id, n := range before {
		j, ok := db.jobs[id]
		if !ok || n == 0 || j.State != store.JobStateWaiting || j.WaitsFor == "" {
			continue
		}
		if db.pendingOf(db.stepNamed(id, j.WaitsFor)) == 0 {
			j.State, j.WaitsFor = store.JobStateAvailable, ""
			woke[j.Queue] = struct{}{}
		}
	}
}

// cancelChildren cancels the pending children of job id with
// CancelWithParent, and theirs; deleted says id was deleted.
func (db *refDB) cancelChildren(id int64, deleted bool, now time.Time, woke map[string]struct{}) {
	if db.bug == "children-not-cancelled" {
		return
	}
	for _, st := range db.steps[id] {
		for _, c := range st.Children {
			j, ok := db.jobs[c]
			if !ok || !j.CancelWithParent || !j.State.Pending() {
				continue
			}
			if j.State == store.JobStateRunning {
				j.CancelRequested = true
			} else {
				msg := fmt.Sprintf("parent job %d was cancelled", id)
				if deleted {
					msg = fmt.Sprintf("parent job %d was deleted", id)
				}
				j.Errors = append(j.Errors, store.AttemptError{Attempt: j.Attempt, At: now, Message: msg})
				j.State, j.FinalizedAt = store.JobStateCancelled, now
				db.ended(j, now, woke)
			}
			db.cancelChildren(c, false, now, woke)
		}
	}
}

// claimedRef returns job id if it runs under token, the caller holding mu.
func (db *refDB) claimedRef(id, token int64) *store.JobRow {
	j, ok := db.jobs[id]
	if !ok || j.State != store.JobStateRunning || (j.ClaimToken != token && db.bug != "step-no-fencing") {
		return nil
	}
	return j
}

func (s *refStore) StepList(_ context.Context, p *store.StepListParams) ([]store.JobStep, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if _, err := db.find(p.ID); err != nil {
		return nil, err
	}
	var out []store.JobStep
	for _, st := range db.steps[p.ID] {
		st.Result, st.Children = slices.Clone(st.Result), slices.Clone(st.Children)
		if st.Kind == store.StepSpawn {
			st.Pending = db.pendingOf(&st)
		}
		out = append(out, st)
	}
	return out, nil
}

func refStepErr(err error) error { return fmt.Errorf("%v: %w", err, store.ErrInvalidArgument) }

func (s *refStore) StepRecord(_ context.Context, p *store.StepRecordParams) ([]store.StepResult, error) {
	for _, r := range p.Steps {
		if err := store.ValidateStepName(r.Name); err != nil {
			return nil, err
		}
		if !json.Valid(r.Result) {
			return nil, refStepErr(fmt.Errorf("step %q: result is not JSON", r.Name))
		}
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	res := make([]store.StepResult, len(p.Steps))
	for i, r := range p.Steps {
		j := db.claimedRef(r.ID, r.ClaimToken)
		switch {
		case j == nil:
		case db.stepNamed(r.ID, r.Name) != nil && db.bug != "step-overwrites":
			res[i] = store.StepResult{Applied: true, Exists: true}
		default:
			if st := db.stepNamed(r.ID, r.Name); st != nil {
				st.Result, st.Size = slices.Clone(r.Result), len(r.Result)
			} else {
				db.steps[r.ID] = append(db.steps[r.ID], store.JobStep{Name: r.Name, Kind: store.StepRun, Attempt: j.Attempt,
					RecordedAt: p.Now, Size: len(r.Result), Result: slices.Clone(r.Result)})
			}
			res[i] = store.StepResult{Applied: true}
		}
	}
	return res, nil
}

func (s *refStore) StepSleep(_ context.Context, p *store.StepSleepParams) (*store.StepResult, error) {
	if err := store.ValidateStepName(p.Name); err != nil {
		return nil, err
	}
	if p.Until.Before(store.EarliestRunAt) || p.Until.After(store.LatestRunAt) {
		return nil, refStepErr(fmt.Errorf("until %v out of range", p.Until))
	}
	db := s.db
	db.mu.Lock()
	woke := make(map[string]struct{})
	defer func() { db.mu.Unlock(); db.hub.NotifyAll(woke) }()
	j := db.claimedRef(p.ID, p.ClaimToken)
	if j == nil {
		return &store.StepResult{}, nil
	}
	if j.CancelRequested {
		return &store.StepResult{Applied: true, CancelRequested: true}, nil
	}
	until, exists := p.Until, false
	if st := db.stepNamed(p.ID, p.Name); st != nil {
		if st.Kind != store.StepSleep {
			return nil, refStepErr(fmt.Errorf("step %q is a %s", p.Name, st.Kind))
		}
		until, exists = st.Until, true
	} else {
		db.steps[p.ID] = append(db.steps[p.ID], store.JobStep{Name: p.Name, Kind: store.StepSleep, Attempt: j.Attempt,
			RecordedAt: p.Now, Until: until})
	}
	j.State, j.RunAt, j.LeaseUntil, j.WaitsFor = store.JobStateScheduled, until, time.Time{}, p.Name
	if db.bug != "sleep-counts-attempt" {
		j.Attempt--
	}
	if !until.After(p.Now) {
		j.State = store.JobStateAvailable
	}
	woke[j.Queue] = struct{}{}
	return &store.StepResult{Applied: true, Exists: exists, Suspended: true, State: j.State}, nil
}

func (s *refStore) StepAwait(_ context.Context, p *store.StepAwaitParams) (*store.StepResult, error) {
	if err := store.ValidateStepName(p.Name); err != nil {
		return nil, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	j := db.claimedRef(p.ID, p.ClaimToken)
	if j == nil {
		return &store.StepResult{}, nil
	}
	if j.CancelRequested {
		return &store.StepResult{Applied: true, CancelRequested: true}, nil
	}
	st := db.stepNamed(p.ID, p.Name)
	if st == nil || st.Kind != store.StepSpawn {
		return nil, refStepErr(fmt.Errorf("no spawn step %q", p.Name))
	}
	if db.pendingOf(st) == 0 {
		return &store.StepResult{Applied: true}, nil
	}
	j.State, j.RunAt, j.LeaseUntil, j.WaitsFor = store.JobStateWaiting, p.Now, time.Time{}, p.Name
	j.Attempt--
	return &store.StepResult{Applied: true, Suspended: true, State: j.State}, nil
}

func (s *refStore) StepSpawn(_ context.Context, p *store.StepSpawnParams) (*store.StepResult, error) {
	if err := store.ValidateStepName(p.Name); err != nil {
		return nil, err
	}
	if len(p.Jobs) == 0 || len(p.Jobs) > store.MaxSpawn {
		return nil, refStepErr(fmt.Errorf("%d jobs", len(p.Jobs)))
	}
	for _, nj := range p.Jobs {
		if nj != nil && nj.UniqueKey != "" {
			return nil, refStepErr(fmt.Errorf("spawned job with a unique key"))
		}
	}
	db := s.db
	db.mu.Lock()
	woke := make(map[string]struct{})
	defer func() { db.mu.Unlock(); db.hub.NotifyAll(woke) }()
	parent := db.claimedRef(p.ID, p.ClaimToken)
	if parent == nil {
		return &store.StepResult{}, nil
	}
	if st := db.stepNamed(p.ID, p.Name); st != nil && db.bug != "spawn-twice" {
		if st.Kind != store.StepSpawn {
			return nil, refStepErr(fmt.Errorf("step %q is a %s", p.Name, st.Kind))
		}
		return &store.StepResult{Applied: true, Exists: true, Children: slices.Clone(st.Children)}, nil
	}
	before := db.awaitsBefore()
	res, err := db.enqueue(p.Jobs, p.Now, false, woke)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
		c := db.jobs[r.ID]
		c.ParentID, c.SpawnStep, c.CancelWithParent = p.ID, p.Name, p.CancelWithParent
	}
	db.releaseAwaits(before, woke)
	db.steps[p.ID] = append(db.steps[p.ID], store.JobStep{Name: p.Name, Kind: store.StepSpawn, Attempt: parent.Attempt,
		RecordedAt: p.Now, ChildCount: len(ids), Children: ids})
	return &store.StepResult{Applied: true, Children: slices.Clone(ids)}, nil
}

// importStepsRef writes the steps of imported job j and, once every job of
// the call is written, releases the jobs of touched that wait at an
// Await no child holds back (pending, or not in the store).
func (db *refDB) importAwaits(touched []int64, woke map[string]struct{}) {
	for _, id := range touched {
		j, ok := db.jobs[id]
		if !ok || j.State != store.JobStateWaiting || j.WaitsFor == "" {
			continue
		}
		st := db.stepNamed(id, j.WaitsFor)
		if st == nil || db.pendingOf(st) > 0 {
			continue
		}
		held := true
		for _, c := range st.Children {
			if _, ok := db.jobs[c]; !ok {
				held = false
			}
		}
		if held {
			j.State, j.WaitsFor = store.JobStateAvailable, ""
			woke[j.Queue] = struct{}{}
		}
	}
}
