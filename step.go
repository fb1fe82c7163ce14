package sortie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sortiehq/sortie/internal/strictjson"
	"github.com/sortiehq/sortie/store"
)

// JobStep is one step a job recorded (see Step, Sleep and Spawn).
type JobStep = store.JobStep

// StepKind says what a recorded step is: a step, a sleep or a spawn.
type StepKind = store.StepKind

// The kinds of step.
const (
	StepRun   = store.StepRun
	StepSleep = store.StepSleep
	StepSpawn = store.StepSpawn
)

// ErrStepReused: a handler used one step name twice in one attempt. Each
// step needs a name of its own, stable across deploys.
var ErrStepReused = errors.New("sortie: step name used twice in one attempt")

// Suspended reports whether a Sleep or Await ended the attempt in the
// store (see held.Run).
func (rj *runningJob) Suspended() bool { return rj.suspension() != nil }

// suspension returns the error of a Sleep or Await that ended the attempt,
// or nil.
func (rj *runningJob) suspension() *suspendError {
	rj.steps.mu.Lock()
	defer rj.steps.mu.Unlock()
	return rj.steps.suspended
}

// begin starts step name of kind: it checks the name, refuses one used
// already in this attempt (a spawn's name may be awaited), loads the
// recorded steps once, and returns the recorded step of that name (nil
// when there is none), checking its kind. A step begun must be ended
// with end or forgotten with forget.
func (rj *runningJob) begin(ctx context.Context, name string, kind store.StepKind) (*store.JobStep, error) {
	if err := store.ValidateStepName(name); err != nil {
		return nil, fmt.Errorf("sortie: %w", err)
	}
	s := &rj.steps
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.suspended != nil {
		return nil, s.suspended
	}
	if s.used[name] {
		return nil, fmt.Errorf("step %q of job %d: %w", name, rj.row.ID, ErrStepReused)
	}
	if err := rj.loadSteps(ctx); err != nil {
		return nil, err
	}
	rec := s.recorded[name]
	if rec != nil && rec.Kind != kind {
		return nil, invalidf("step %q of job %d is recorded as a %s, not a %s: a step name used for two things (renamed?)", name, rj.row.ID, rec.Kind, kind)
	}
	if s.used == nil {
		s.used = make(map[string]bool)
	}
	s.used[name] = true
	return rec, nil
}

// loadSteps reads the steps earlier attempts recorded, once per attempt.
// The caller holds rj.steps.mu.
func (rj *runningJob) loadSteps(ctx context.Context) error {
	s := &rj.steps
	if s.loaded {
		return nil
	}
	list, err := rj.c.store.StepList(ctx, &store.StepListParams{ID: rj.row.ID})
	if err != nil {
		return fmt.Errorf("sortie: read the steps of job %d: %w", rj.row.ID, err)
	}
	s.recorded = make(map[string]*store.JobStep, len(list))
	for i := range list {
		s.recorded[list[i].Name] = &list[i]
	}
	s.loaded = true
	return nil
}

// forget undoes begin for a step that failed: its name may be used again
// in this attempt.
func (rj *runningJob) forget(name string) {
	rj.steps.mu.Lock()
	delete(rj.steps.used, name)
	rj.steps.mu.Unlock()
}

// recorded notes step st as recorded by this attempt.
func (rj *runningJob) noteRecorded(st *store.JobStep) {
	rj.steps.mu.Lock()
	rj.steps.recorded[st.Name] = st
	rj.steps.mu.Unlock()
}

// suspend records that the store ended the attempt at a step.
func (rj *runningJob) suspend(e *suspendError) error {
	rj.steps.mu.Lock()
	rj.steps.suspended = e
	rj.steps.mu.Unlock()
	return e
}

// unusedSteps returns the names of recorded steps this attempt never used,
// in the order they were recorded: after a deploy that renamed or removed
// a step, the recorded one is never replayed.
func (rj *runningJob) unusedSteps() []string {
	s := &rj.steps
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded {
		return nil
	}
	var out []*store.JobStep
	for name, st := range s.recorded {
		if !s.used[name] {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b *store.JobStep) int { return a.RecordedAt.Compare(b.RecordedAt) })
	names := make([]string, len(out))
	for i, st := range out {
		names[i] = st.Name
	}
	return names
}

// Step runs fn once per job: its result is encoded as JSON and recorded in
// the store under the attempt's claim before Step returns it, and every
// later attempt of the job (after an error, a snooze, a rescue after a
// crash, a forced stop) gets the recorded result back without running fn.
// So code inside steps runs once per job, and code outside them on every
// attempt. Step returns the result as recorded (decoded from its JSON),
// the first time too.
//
// An error from fn records nothing and is returned as it is (the handler
// usually returns it, and the job is retried). Step also fails, without
// recording, when ctx is not a running job's (ErrNotInJob), name is not 1
// to 255 bytes of UTF-8, name was used already in this attempt
// (ErrStepReused), the result does not encode as JSON or is larger than
// Config.MaxResultBytes (ErrResultTooLarge), or the attempt's claim was
// lost (ErrLeaseLost: the job was rescued or cancelled; the result is not
// recorded, and the handler should return). A name recorded as a Sleep or
// Spawn is refused (ErrInvalidArgument).
//
// Names identify steps across deploys: rename a step, and its recorded
// result is not found (the step runs again) and the recorded one is
// reported unused when the job completes.
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	rj := runningJobFrom(ctx)
	if rj == nil {
		return zero, fmt.Errorf("step %q: %w", name, ErrNotInJob)
	}
	rec, err := rj.begin(ctx, name, store.StepRun)
	if err != nil {
		return zero, err
	}
	if rec != nil {
		return decodeStep[T](rj, name, rec.Result)
	}
	v, err := fn(ctx)
	if err != nil {
		rj.forget(name)
		return zero, err
	}
	b, err := rj.encodeStep(name, v)
	if err != nil {
		rj.forget(name)
		return zero, err
	}
	if b, err = rj.recordStep(ctx, name, b); err != nil {
		rj.forget(name)
		return zero, err
	}
	return decodeStep[T](rj, name, b)
}

// decodeStep decodes the recorded result b of step name.
func decodeStep[T any](rj *runningJob, name string, b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("sortie: decode the recorded result of step %q of job %d: %w", name, rj.row.ID, err)
	}
	return v, nil
}

// encodeStep encodes the result v of step name, within the size limit.
func (rj *runningJob) encodeStep(name string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, invalidf("result of step %q of job %d does not encode as JSON: %v", name, rj.row.ID, err)
	}
	if err := strictjson.ValidText(b); err != nil {
		return nil, invalidf("result of step %q of job %d: its JSON %v", name, rj.row.ID, err)
	}
	if limit := rj.c.cfg.MaxResultBytes; len(b) > limit {
		return nil, fmt.Errorf("sortie: result of step %q of job %d is %d bytes, more than Config.MaxResultBytes (%d): %w",
			name, rj.row.ID, len(b), limit, ErrResultTooLarge)
	}
	return b, nil
}

// recordStep records step name's result b under the attempt's claim and
// returns the result recorded: b, or the one an earlier record of the
// same name holds.
func (rj *runningJob) recordStep(ctx context.Context, name string, b []byte) ([]byte, error) {
	row := rj.row
	res, err := rj.c.recordStep(ctx, &store.StepRecord{ID: row.ID, ClaimToken: row.ClaimToken, Name: name, Result: b})
	if err != nil {
		return nil, fmt.Errorf("sortie: record step %q of job %d: %w", name, row.ID, err)
	}
	if !res.Applied {
		return nil, fmt.Errorf("sortie: step %q of job %d not recorded: %w", name, row.ID, errLeaseLost)
	}
	if res.Exists {
		list, err := rj.c.store.StepList(ctx, &store.StepListParams{ID: row.ID})
		if err != nil {
			return nil, fmt.Errorf("sortie: read step %q of job %d: %w", name, row.ID, err)
		}
		for i := range list {
			if list[i].Name == name {
				rj.noteRecorded(&list[i])
				return list[i].Result, nil
			}
		}
	}
	rj.noteRecorded(&store.JobStep{Name: name, Kind: store.StepRun, Attempt: row.Attempt, Size: len(b), Result: b})
	return b, nil
}

// Sleep pauses the job for d, durably: the first time, it records the
// wake time (now + d) as step name and ends the attempt, without counting
// it, until then. It returns an error that the handler must return at
// once; the job holds no worker, connection or lease while it sleeps, for
// days if need be. The job comes back at the wake time, its recorded
// steps replay at once, and this Sleep returns nil. A Sleep whose wake
// time has passed (d not above zero, or SleepUntil a past time) returns
// nil at once and records nothing. Errors are those of Step, and
// ErrLeaseLost when the claim was lost; a job cancelled while running ends
// cancelled instead of sleeping.
func Sleep(ctx context.Context, name string, d time.Duration) error {
	rj := runningJobFrom(ctx)
	if rj == nil {
		return fmt.Errorf("sleep %q: %w", name, ErrNotInJob)
	}
	return rj.sleep(ctx, name, rj.c.clock.Now().Add(d))
}

// SleepUntil is Sleep until t.
func SleepUntil(ctx context.Context, name string, t time.Time) error {
	rj := runningJobFrom(ctx)
	if rj == nil {
		return fmt.Errorf("sleep %q: %w", name, ErrNotInJob)
	}
	return rj.sleep(ctx, name, t)
}

func (rj *runningJob) sleep(ctx context.Context, name string, until time.Time) error {
	rec, err := rj.begin(ctx, name, store.StepSleep)
	if err != nil {
		return err
	}
	now := rj.c.clock.Now()
	if rec != nil {
		until = rec.Until
	}
	if !until.After(now) {
		return nil // woken, or a first sleep whose time has already passed
	}
	res, err := rj.c.store.StepSleep(ctx, &store.StepSleepParams{ID: rj.row.ID, ClaimToken: rj.row.ClaimToken,
		Name: name, Until: until, Now: now})
	if err != nil {
		rj.forget(name)
		return fmt.Errorf("sortie: sleep %q of job %d: %w", name, rj.row.ID, err)
	}
	return rj.suspended(name, res, until)
}

// suspended turns the store's answer to a Sleep or Await that ended, or
// would have ended, the attempt into the error the handler returns.
func (rj *runningJob) suspended(name string, res *store.StepResult, until time.Time) error {
	switch {
	case !res.Applied:
		return fmt.Errorf("sortie: step %q of job %d: %w", name, rj.row.ID, errLeaseLost)
	case res.CancelRequested:
		return Cancel(errCancelRequested)
	case !res.Suspended:
		return nil
	}
	return rj.suspend(&suspendError{step: name, state: res.State, until: until})
}

// SpawnOpts are the options of Spawn. A nil *SpawnOpts means all defaults.
type SpawnOpts struct {
	// CancelWithParent cancels the children still pending when the job
	// that spawned them is cancelled or deleted (JobCancel, JobDelete, a
	// bulk action, the dashboard, the CLI); a running child is asked to
	// stop. By default children are left alone.
	CancelWithParent bool
}

// Spawn enqueues jobs as children of the running job, once: the first
// time, it inserts them and records their IDs as step name, both in one
// store step; every later attempt gets the recorded IDs back and enqueues
// nothing. The children are enqueued as EnqueueMany would (Config's
// enqueue middleware included), except that none may have a UniqueKey
// (the spawn step already enqueues them once). Await waits for them.
// Errors are those of Step and of EnqueueMany; nothing is enqueued when
// one is returned.
func Spawn(ctx context.Context, name string, jobs []EnqueueParams, opts *SpawnOpts) ([]int64, error) {
	rj := runningJobFrom(ctx)
	if rj == nil {
		return nil, fmt.Errorf("spawn %q: %w", name, ErrNotInJob)
	}
	if len(jobs) == 0 {
		return nil, invalidf("Spawn %q: no jobs", name)
	}
	var o SpawnOpts
	if opts != nil {
		o = *opts
	}
	rec, err := rj.begin(ctx, name, store.StepSpawn)
	if err != nil {
		return nil, err
	}
	if rec != nil {
		return slices.Clone(rec.Children), nil
	}
	ids, err := rj.spawn(ctx, name, jobs, o)
	if err != nil {
		rj.forget(name)
		return nil, err
	}
	return ids, nil
}

func (rj *runningJob) spawn(ctx context.Context, name string, jobs []EnqueueParams, o SpawnOpts) ([]int64, error) {
	c, row := rj.c, rj.row
	now := c.clock.Now()
	rows := make([]*NewJob, len(jobs))
	for i, j := range jobs {
		rows[i] = new(NewJob)
		if err := c.fillJob(rows[i], j.Args, j.Opts, now); err != nil {
			return nil, fmt.Errorf("spawn %q: %w", name, &BatchJobError{Index: i, Len: len(jobs), Err: err})
		}
		if rows[i].UniqueKey != "" {
			return nil, invalidf("Spawn %q: jobs[%d].Opts.UniqueKey is set: a spawned job cannot have one (the spawn step enqueues it once)", name, i)
		}
	}
	var res *store.StepResult
	inner := func(ctx context.Context, nj []*NewJob) ([]EnqueueResult, error) {
		var err error
		res, err = c.store.StepSpawn(ctx, &store.StepSpawnParams{ID: row.ID, ClaimToken: row.ClaimToken, Name: name,
			Jobs: nj, CancelWithParent: o.CancelWithParent, Now: c.clock.Now()})
		if err != nil || !res.Applied {
			return nil, err
		}
		out := make([]EnqueueResult, len(res.Children))
		for i, id := range res.Children {
			out[i] = EnqueueResult{ID: id}
		}
		return out, nil
	}
	f := EnqueueFunc(inner)
	for i := len(c.cfg.EnqueueMiddleware) - 1; i >= 0; i-- {
		f = c.cfg.EnqueueMiddleware[i](f)
	}
	out, err := f(ctx, rows)
	switch {
	case err != nil:
		return nil, fmt.Errorf("sortie: spawn %q of job %d: %w", name, row.ID, err)
	case res == nil:
		return nil, fmt.Errorf("sortie: spawn %q of job %d: the enqueue middleware did not enqueue the jobs", name, row.ID)
	case !res.Applied:
		return nil, fmt.Errorf("sortie: spawn %q of job %d: %w", name, row.ID, errLeaseLost)
	}
	if !res.Exists {
		c.events.publishEnqueued(now, rows, out)
	}
	rj.noteRecorded(&store.JobStep{Name: name, Kind: store.StepSpawn, Attempt: row.Attempt, ChildCount: len(res.Children),
		Children: res.Children})
	return slices.Clone(res.Children), nil
}

// Child is how a job that a Spawn step enqueued ended, as Await returns it.
type Child struct {
	ID int64
	// State is completed, cancelled or dead; empty for a child no longer
	// in the store (deleted, or not imported with its parent).
	State JobState
	// Result is a completed child's result (see SetResult).
	Result json.RawMessage
	// Err is the last error of a child that did not complete, if any.
	Err *AttemptError
}

// Await waits for the children that Spawn step name enqueued: while any
// is pending, it ends the attempt, without counting it, and returns an
// error that the handler must return at once; the job waits, holding no
// worker, until the last child finishes (or is deleted), then runs again,
// its recorded steps replaying at once, and this Await returns each
// child's end, in the order spawned. It fails with ErrInvalidArgument when
// the job has no Spawn step name, ErrLeaseLost when the claim was lost,
// and ErrNotInJob outside a handler; a job cancelled while running ends
// cancelled instead of waiting.
func Await(ctx context.Context, name string) ([]Child, error) {
	rj := runningJobFrom(ctx)
	if rj == nil {
		return nil, fmt.Errorf("await %q: %w", name, ErrNotInJob)
	}
	rec, err := rj.spawnStep(ctx, name)
	if err != nil {
		return nil, err
	}
	c := rj.c
	res, err := c.store.StepAwait(ctx, &store.StepAwaitParams{ID: rj.row.ID, ClaimToken: rj.row.ClaimToken, Name: name, Now: c.clock.Now()})
	if err != nil {
		return nil, fmt.Errorf("sortie: await %q of job %d: %w", name, rj.row.ID, err)
	}
	if err := rj.suspended(name, res, time.Time{}); err != nil {
		return nil, err
	}
	return c.children(ctx, rj.row.ID, rec.Children)
}

// spawnStep returns the Spawn step name of the running job.
func (rj *runningJob) spawnStep(ctx context.Context, name string) (*store.JobStep, error) {
	s := &rj.steps
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.suspended != nil {
		return nil, s.suspended
	}
	if err := rj.loadSteps(ctx); err != nil {
		return nil, err
	}
	rec := s.recorded[name]
	if rec == nil || rec.Kind != store.StepSpawn {
		return nil, invalidf("Await %q: job %d has no Spawn step of that name", name, rj.row.ID)
	}
	return rec, nil
}

// childPage is how many children Await reads per store call.
const childPage = 1000

// children returns how the jobs ids, children of job parent, ended, in
// the order of ids.
func (c *Client) children(ctx context.Context, parent int64, ids []int64) ([]Child, error) {
	want := make(map[int64]int, len(ids))
	for i, id := range ids {
		want[id] = i
	}
	out := make([]Child, len(ids))
	for i, id := range ids {
		out[i].ID = id
	}
	after := slices.Min(ids) - 1
	last := slices.Max(ids)
	for after < last {
		rows, err := c.store.JobList(ctx, &store.JobListParams{ParentID: parent, AfterID: after, Limit: childPage})
		if err != nil {
			return nil, fmt.Errorf("sortie: read the children of job %d: %w", parent, err)
		}
		for _, r := range rows {
			if i, ok := want[r.ID]; ok {
				out[i] = childOf(r)
			}
		}
		if len(rows) < childPage {
			break
		}
		after = rows[len(rows)-1].ID
	}
	return out, nil
}

// childOf returns how child r ended.
func childOf(r *JobRow) Child {
	ch := Child{ID: r.ID, State: r.State}
	if r.State == JobStateCompleted {
		ch.Result = r.Result
	} else if n := len(r.Errors); n > 0 {
		e := r.Errors[n-1]
		ch.Err = &e
	}
	return ch
}
