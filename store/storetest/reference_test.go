package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sortiehq/sortie/internal/notify"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/fetchplan"
	"github.com/sortiehq/sortie/store/internal/imported"
	"github.com/sortiehq/sortie/store/internal/registry"
	"github.com/sortiehq/sortie/store/internal/transition"
)

// refStore is the suite's own reference store: the contract written as
// plainly as possible (one mutex, one map, full scans), so the suite can
// test itself without a real backend. Several refStores can share one
// refDB, which is how the self-test "reopens" a database and opens a
// second handle on it.
type refStore struct {
	db *refDB
	// own is what a buggy store keeps in its handle instead of the database
	// (the *-per-handle mutants); the correct store never reads it.
	own *refHandle
}

// refHandle is the state of one handle. Its fields are guarded by the
// refDB's mu, except mu itself.
type refHandle struct {
	// mu serializes this handle's fetches (claim-per-handle).
	mu       sync.Mutex
	paused   map[string]bool                // pause-per-handle
	settings map[string]store.QueueSettings // settings-per-handle
	starts   []refStart                     // rate-starts-per-handle
	cancels  map[int64]bool                 // cancel-per-handle
	tokens   map[int64]int64                // fencing-per-handle: job -> token handed out here
}

// handle returns a new handle on db.
func (db *refDB) handle() *refStore {
	return &refStore{db: db, own: &refHandle{
		paused:   make(map[string]bool),
		settings: make(map[string]store.QueueSettings),
		cancels:  make(map[int64]bool),
		tokens:   make(map[int64]int64),
	}}
}

var _ store.Store = (*refStore)(nil)

type refDB struct {
	hub notify.Hub
	// bug names a deliberate mistake (see mutants in storetest_test.go);
	// empty for the correct store.
	bug string

	procs registry.Table

	mu       sync.Mutex
	jobs     map[int64]*store.JobRow
	lastID   int64
	token    int64
	queues   map[string]*store.QueueRow
	periodic map[string]*store.PeriodicRow
	// starts records every claim: queue, partition key and time, for the
	// sliding-window rate limits.
	starts []refStart
	// finished is closed (and replaced) whenever a job finishes or is
	// deleted, to wake JobWait.
	finished chan struct{}
	// owner is the handle each job was enqueued through, and enqueuer the
	// handle enqueueing now (unique-per-handle).
	owner    map[int64]*refHandle
	enqueuer *refHandle
	// cause maps a cancelled job to the dependency whose ending cancelled
	// it, until it leaves the cancelled state.
	cause map[int64]int64
	// history counts outcomes by queue, minute and outcome (JobHistory).
	history map[refHistKey]int64
	// steps holds each job's steps (reference_steps_test.go).
	steps map[int64][]store.JobStep
}

type refHistKey struct {
	queue   string
	minute  int64 // Unix seconds of the minute's start
	outcome store.HistoryOutcome
}

// count counts one job of queue reaching outcome o at now. The caller
// holds mu.
func (db *refDB) count(queue string, now time.Time, o store.HistoryOutcome) {
	db.history[refHistKey{queue, store.HistoryMinute(now).Unix(), o}]++
}

type refStart struct {
	queue, key string
	at         time.Time
}

func newRefStore(bug string) *refStore {
	db := &refDB{
		jobs:     make(map[int64]*store.JobRow),
		queues:   make(map[string]*store.QueueRow),
		periodic: make(map[string]*store.PeriodicRow),
		finished: make(chan struct{}),
		owner:    make(map[int64]*refHandle),
		cause:    make(map[int64]int64),
		history:  make(map[refHistKey]int64),
		steps:    make(map[int64][]store.JobStep),
		bug:      bug,
	}
	return db.handle()
}

func clone(r *store.JobRow) *store.JobRow {
	c := *r
	c.Args = slices.Clone(r.Args)
	c.Meta = slices.Clone(r.Meta)
	c.Tags = slices.Clone(r.Tags)
	c.Errors = slices.Clone(r.Errors)
	c.Result = slices.Clone(r.Result)
	c.DependsOn = slices.Clone(r.DependsOn)
	return &c
}

// holder returns the pending job holding key, if any. The caller holds mu.
func (db *refDB) holder(key string) *store.JobRow {
	if key == "" {
		return nil
	}
	for _, j := range db.jobs {
		if j.UniqueKey == key && j.State.Pending() && !(db.bug == "unique-ignores-running" && j.State == store.JobStateRunning) &&
			!(db.bug == "waiting-not-pending" && j.State == store.JobStateWaiting) &&
			!(db.bug == "unique-per-handle" && db.owner[j.ID] != db.enqueuer) {
			return j
		}
	}
	return nil
}

func (db *refDB) find(id int64) (*store.JobRow, error) {
	j, ok := db.jobs[id]
	if !ok {
		return nil, fmt.Errorf("job %d: %w", id, store.ErrNotFound)
	}
	return j, nil
}

// wakeWaiters wakes every JobWait. The caller holds mu.
func (db *refDB) wakeWaiters() {
	close(db.finished)
	db.finished = make(chan struct{})
}

// queue returns the settings row of q, or nil. The caller holds mu.
func (db *refDB) queue(q string) *store.QueueRow { return db.queues[q] }

// queueRow returns the row of q, creating it. The caller holds mu.
func (db *refDB) queueRow(q string) *store.QueueRow {
	r := db.queues[q]
	if r == nil {
		r = &store.QueueRow{Name: q}
		db.queues[q] = r
	}
	return r
}

// depsDone reports whether no dependency holds j back: each completed, is
// gone, or (when j ignores failures) ended dead or cancelled. The caller
// holds mu.
func (db *refDB) depsDone(j *store.JobRow) bool {
	for _, d := range j.DependsOn {
		if dep, ok := db.jobs[d]; ok && dep.State.HoldsBack(j.IgnoreDepFailure) {
			return false
		}
	}
	return true
}

// release makes a waiting job available, or scheduled when its RunAt is
// later. The caller holds mu.
func (db *refDB) release(j *store.JobRow, now time.Time, woke map[string]struct{}) {
	j.State = store.JobStateAvailable
	if j.RunAt.After(now) {
		j.State = store.JobStateScheduled
	}
	woke[j.Queue] = struct{}{}
}

// depEnded handles the waiting dependents of job id, which ended in state
// s (cancelled for a deleted job). The caller holds mu.
func (db *refDB) depEnded(id int64, s store.JobState, now time.Time, woke map[string]struct{}) {
	for _, j := range db.jobs {
		if j.State != store.JobStateWaiting || !slices.Contains(j.DependsOn, id) {
			continue
		}
		if s == store.JobStateCompleted || j.IgnoreDepFailure {
			if db.depsDone(j) {
				db.release(j, now, woke)
			}
			continue
		}
		j.State, j.FinalizedAt = store.JobStateCancelled, now
		j.Errors = append(j.Errors, store.AttemptError{Attempt: j.Attempt, At: now, Message: fmt.Sprintf("dependency %d ended %s", id, s)})
		db.count(j.Queue, now, store.HistoryCancelled)
		if _, ok := db.jobs[id]; ok {
			db.cause[j.ID], j.CancelledBy = id, id
		}
		if db.bug != "cascade-one-level" {
			db.depEnded(j.ID, store.JobStateCancelled, now, woke)
		}
	}
}

// ended is called when job j reached a finished state. The caller holds mu.
func (db *refDB) ended(j *store.JobRow, now time.Time, woke map[string]struct{}) {
	if db.bug != "history-misses-cancel" || j.State != store.JobStateCancelled {
		db.count(j.Queue, now, store.HistoryOutcome(j.State))
	}
	if db.bug != "cascade-missing" || j.State == store.JobStateCompleted {
		db.depEnded(j.ID, j.State, now, woke)
	}
	db.wakeWaiters()
}

// JobActMany is one single call per ID, in order. The mutants act in
// reverse order (act-many-reversed), fail the call at the first refusal
// (act-many-refusal-fails) or take any number of IDs
// (act-many-unbounded).
func (s *refStore) JobActMany(ctx context.Context, p *store.JobActManyParams) ([]store.ActResult, error) {
	if err := store.ValidateActMany(p); err != nil && (s.db.bug != "act-many-unbounded" || p.Action.Valid()) {
		return nil, err
	}
	out := make([]store.ActResult, len(p.IDs))
	for k := range p.IDs {
		i := k
		if s.db.bug == "act-many-reversed" {
			i = len(p.IDs) - 1 - k
		}
		id := p.IDs[i]
		var err error
		switch p.Action {
		case store.ActionRetry:
			_, err = s.JobRetry(ctx, &store.JobRetryParams{ID: id, Now: p.Now})
		case store.ActionCancel:
			_, err = s.JobCancel(ctx, &store.JobCancelParams{ID: id, Now: p.Now})
		case store.ActionDelete:
			_, err = s.JobDelete(ctx, &store.JobDeleteParams{ID: id, Now: p.Now})
		}
		if err != nil && s.db.bug == "act-many-refusal-fails" {
			return nil, err
		}
		out[i].Err = err
	}
	return out, nil
}

func (s *refStore) JobCancel(_ context.Context, p *store.JobCancelParams) (*store.JobRow, error) {
	db := s.db
	db.mu.Lock()
	woke := make(map[string]struct{})
	defer func() { db.mu.Unlock(); db.hub.NotifyAll(woke) }()
	j, err := db.find(p.ID)
	if err != nil {
		return nil, err
	}
	before := db.awaitsBefore()
	defer db.releaseAwaits(before, woke)
	if j.State.Pending() {
		defer db.cancelChildren(j.ID, false, p.Now, woke)
	}
	switch {
	case j.State == store.JobStateRunning:
		if db.bug == "cancel-running-refused" {
			return nil, fmt.Errorf("cancel job %d: %w", p.ID, store.ErrJobRunning)
		}
		if db.bug == "cancel-per-handle" {
			s.own.cancels[j.ID] = true
			c := clone(j)
			c.CancelRequested = true
			return c, nil
		}
		j.CancelRequested = true
	case j.State.Pending():
		j.State, j.FinalizedAt = store.JobStateCancelled, p.Now
		if db.bug == "cancel-keeps-finalized-zero" {
			j.FinalizedAt = time.Time{}
		}
		db.ended(j, p.Now, woke)
	}
	return db.shown(j), nil
}

func (s *refStore) JobCounts(_ context.Context, p *store.JobCountsParams) ([]store.QueueStateCount, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	m := make(map[countKey]int64)
	for _, j := range db.jobs {
		if p.Queue == "" || j.Queue == p.Queue || db.bug == "counts-ignore-queue" {
			m[countKey{j.Queue, j.State}]++
		}
	}
	var out []store.QueueStateCount
	for k, n := range m {
		out = append(out, store.QueueStateCount{Queue: k.Queue, State: k.State, Count: n})
	}
	return out, nil
}

func (s *refStore) JobDelete(_ context.Context, p *store.JobDeleteParams) (*store.JobRow, error) {
	db := s.db
	db.mu.Lock()
	woke := make(map[string]struct{})
	defer func() { db.mu.Unlock(); db.hub.NotifyAll(woke) }()
	j, err := db.find(p.ID)
	if err != nil {
		return nil, err
	}
	if j.State == store.JobStateRunning {
		return nil, fmt.Errorf("delete job %d: %w", p.ID, store.ErrJobRunning)
	}
	before := db.awaitsBefore()
	db.cancelChildren(j.ID, true, p.Now, woke)
	shown := db.shown(j)
	delete(db.steps, p.ID)
	delete(db.jobs, p.ID)
	delete(db.cause, p.ID)
	if db.bug != "cascade-missing" {
		// JobDeleteParams has no Now: the dependents' FinalizedAt comes
		// from the clock, the one place the reference store reads it.
		db.depEnded(j.ID, store.JobStateCancelled, p.Now, woke)
	}
	db.releaseAwaits(before, woke)
	db.wakeWaiters()
	return shown, nil
}

// enqueue inserts p.Jobs (see JobEnqueueMany); on error it changes nothing.
// The caller holds mu; woke collects the queues to notify after commit.
func (db *refDB) enqueue(jobs []*store.NewJob, now time.Time, workflow bool, woke map[string]struct{}) ([]store.EnqueueResult, error) {
	if db.bug == "ranges-unchecked" {
		// Store what comes, wrapped to 32 bits as an integer column would.
		for _, nj := range jobs {
			nj.MaxAttempts = int(int32(nj.MaxAttempts))
		}
	} else if err := store.ValidateJobs(jobs); err != nil {
		return nil, err
	}
	for i, nj := range jobs {
		for _, d := range nj.DependsOn {
			if _, ok := db.jobs[d]; !ok {
				return nil, fmt.Errorf("job %d of the batch: dependency %d: %w", i, d, store.ErrNotFound)
			}
		}
	}
	// Dry run: which jobs are duplicates, and how many take room per queue.
	dup := make([]bool, len(jobs))
	keys := make(map[string]bool)
	room := make(map[string]int)
	for i, nj := range jobs {
		if nj.UniqueKey != "" && (keys[nj.UniqueKey] || db.holder(nj.UniqueKey) != nil) {
			dup[i] = true
			if db.bug != "depth-counts-duplicates" {
				continue
			}
		}
		keys[nj.UniqueKey] = nj.UniqueKey != ""
		room[nj.Queue]++
	}
	var drops []*store.JobRow
	for q, n := range room {
		qr := db.queue(q)
		if qr == nil || qr.Settings.MaxDepth == 0 {
			continue
		}
		var queued []*store.JobRow
		for _, j := range db.jobs {
			if j.Queue == q && j.State.Queued() {
				queued = append(queued, j)
			}
		}
		over := len(queued) + n - qr.Settings.MaxDepth
		if over <= 0 {
			continue
		}
		if qr.Settings.Overflow == store.OverflowReject {
			return nil, store.QueueFullError(q, qr.Settings.MaxDepth, int64(len(queued)), int64(n))
		}
		sort.Slice(queued, func(a, b int) bool { return (queued[a].ID < queued[b].ID) != (db.bug == "drop-newest") })
		drops = append(drops, queued[:min(over, len(queued))]...)
	}
	for _, j := range drops {
		j.State, j.FinalizedAt = store.JobStateCancelled, now
		j.Errors = append(j.Errors, store.AttemptError{Attempt: j.Attempt, At: now, Message: store.DroppedMessage(j.Queue, db.queue(j.Queue).Settings.MaxDepth)})
		db.queueRow(j.Queue).Dropped++
		db.ended(j, now, woke)
	}

	res := make([]store.EnqueueResult, len(jobs))
	var first int64
	for i, nj := range jobs {
		if h := db.holder(nj.UniqueKey); h != nil {
			res[i] = store.EnqueueResult{ID: h.ID, Duplicate: true, State: h.State}
			continue
		}
		db.lastID++
		if first == 0 {
			first = db.lastID
		}
		j := &store.JobRow{
			ID: db.lastID, Kind: nj.Kind, Queue: nj.Queue, Args: slices.Clone(nj.Args),
			State: store.JobStateAvailable, Priority: nj.Priority, MaxAttempts: nj.MaxAttempts,
			RunAt: nj.RunAt, CreatedAt: now, UniqueKey: nj.UniqueKey, Tags: slices.Clone(nj.Tags),
			Meta: slices.Clone(nj.Meta), Timeout: nj.Timeout, PartitionKey: nj.PartitionKey,
			DependsOn: slices.Clone(nj.DependsOn), IgnoreDepFailure: nj.IgnoreDepFailure,
		}
		for _, x := range nj.DependsOnIndex {
			if !slices.Contains(j.DependsOn, res[x].ID) {
				j.DependsOn = append(j.DependsOn, res[x].ID)
			}
		}
		if workflow {
			j.WorkflowID = first
		}
		if j.RunAt.IsZero() {
			j.RunAt = now
		}
		if j.RunAt.After(now) {
			j.State = store.JobStateScheduled
		}
		for _, d := range j.DependsOn {
			dep := db.jobs[d]
			switch {
			case dep.State == store.JobStateCompleted:
			case dep.State.Finished() && !j.IgnoreDepFailure:
				if j.State != store.JobStateCancelled {
					j.State, j.FinalizedAt = store.JobStateCancelled, now
					j.Errors = append(j.Errors, store.AttemptError{At: now, Message: fmt.Sprintf("dependency %d ended %s", d, dep.State)})
					db.count(j.Queue, now, store.HistoryCancelled)
					db.cause[j.ID], j.CancelledBy = d, d
				}
			case !dep.State.Finished() && j.State != store.JobStateCancelled:
				j.State = store.JobStateWaiting
			}
		}
		db.jobs[j.ID] = j
		db.owner[j.ID] = db.enqueuer
		woke[j.Queue] = struct{}{}
		res[i] = store.EnqueueResult{ID: j.ID, State: j.State}
	}
	return res, nil
}

func (s *refStore) JobEnqueueMany(_ context.Context, p *store.JobEnqueueManyParams) ([]store.EnqueueResult, error) {
	db := s.db
	if db.bug == "enqueue-partial" {
		// Insert the jobs before the first invalid one, then fail.
		for i, nj := range p.Jobs {
			if nj.Kind == "" || nj.Queue == "" {
				db.mu.Lock()
				_, _ = db.enqueue(p.Jobs[:i], p.Now, p.Workflow, make(map[string]struct{}))
				db.mu.Unlock()
				return nil, fmt.Errorf("job %d of the batch: empty kind or queue", i)
			}
		}
	}
	if db.bug == "notify-before-commit" {
		for _, nj := range p.Jobs {
			db.hub.Notify(nj.Queue)
		}
		time.Sleep(time.Millisecond) // a commit takes a while
	}
	db.mu.Lock()
	woke := make(map[string]struct{})
	db.enqueuer = s.own
	before := db.awaitsBefore()
	res, err := db.enqueue(p.Jobs, p.Now, p.Workflow, woke)
	db.releaseAwaits(before, woke)
	db.enqueuer = nil
	db.mu.Unlock()
	if db.bug != "notify-before-commit" {
		db.hub.NotifyAll(woke)
	}
	return res, err
}

// forgetStart deletes the start that running job j's claim recorded.
func (db *refDB) forgetStart(j *store.JobRow) {
	if i := slices.IndexFunc(db.starts, func(st refStart) bool {
		return st.queue == j.Queue && st.key == j.PartitionKey && st.at.Equal(j.AttemptedAt)
	}); i >= 0 {
		db.starts = slices.Delete(db.starts, i, i+1)
	}
}

// inWindow counts the starts of queue (and key, when key is not empty)
// after now-period; starts recorded with a later clock count too. The
// caller holds mu.
func (db *refDB) inWindow(queue, key string, now time.Time, period time.Duration) []time.Time {
	var out []time.Time
	for _, s := range db.starts {
		after := s.at.After(now.Add(-period)) || db.bug == "rate-window-closed" && s.at.Equal(now.Add(-period))
		if db.bug == "rate-ignores-later-starts" && s.at.After(now) {
			continue
		}
		if s.queue == queue && (key == "" || s.key == key) && after {
			out = append(out, s.at)
		}
	}
	return out
}

// due returns the jobs of queue a fetch at now may claim, in claim order.
// The caller holds mu.
func (db *refDB) due(queue string, kinds []string, now time.Time) []*store.JobRow {
	var due []*store.JobRow
	for _, j := range db.jobs {
		ready := j.State == store.JobStateAvailable ||
			(j.State == store.JobStateScheduled || j.State == store.JobStateRetrying) && !j.RunAt.After(now)
		if ready && j.Queue == queue && (len(kinds) == 0 || slices.Contains(kinds, j.Kind) || db.bug == "kinds-ignored") {
			due = append(due, j)
		}
	}
	sort.Slice(due, func(a, b int) bool {
		x, y := due[a], due[b]
		if x.Priority != y.Priority && db.bug != "order-ignores-priority" {
			return x.Priority < y.Priority
		}
		if !x.RunAt.Equal(y.RunAt) {
			return x.RunAt.Before(y.RunAt)
		}
		return x.ID < y.ID
	})
	return due
}

func (s *refStore) JobFetch(_ context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	if err := store.ValidateLimit("JobFetchParams", p.Limit); err != nil {
		return nil, err
	}
	jobs, err := s.fetch(p)
	if err != nil {
		return nil, err
	}
	res := &store.JobFetchResult{Jobs: jobs}
	if len(jobs) < p.Limit {
		res.NextAt = s.nextAt(p.Queue, p.Now)
	}
	return res, nil
}

func (s *refStore) fetch(p *store.JobFetchParams) ([]*store.JobRow, error) {
	db := s.db
	if db.bug == "claim-per-handle" {
		// One fetch at a time per handle, as if this process were alone.
		s.own.mu.Lock()
		defer s.own.mu.Unlock()
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.bug == "rate-starts-per-handle" {
		// The window holds only this handle's starts.
		db.starts, s.own.starts = s.own.starts, db.starts
		defer func() { db.starts, s.own.starts = s.own.starts, db.starts }()
	}
	var set store.QueueSettings
	if qr := db.queue(p.Queue); qr != nil {
		paused := qr.Paused
		if db.bug == "pause-per-handle" {
			paused = s.own.paused[p.Queue]
		}
		if paused && db.bug != "pause-ignored" {
			return nil, nil
		}
		set = qr.Settings
	}
	if db.bug == "settings-per-handle" {
		// Settings read once per handle and never again.
		if cached, ok := s.own.settings[p.Queue]; ok {
			set = cached
		}
		s.own.settings[p.Queue] = set
	}
	due := db.due(p.Queue, p.Kinds, p.Now)
	if db.bug == "claim-not-atomic" || db.bug == "claim-per-handle" {
		// Select, then claim in a second step without checking again.
		db.mu.Unlock()
		runtime.Gosched()
		db.mu.Lock()
	}
	limit := p.Limit
	running := make(map[string]int) // per partition key; "" is the queue
	for _, j := range db.jobs {
		if j.Queue == p.Queue && j.State == store.JobStateRunning {
			running[""]++
			if j.PartitionKey != "" {
				running[j.PartitionKey]++
			}
		}
	}
	if set.MaxRunning > 0 && db.bug != "max-running-ignored" {
		limit = min(limit, set.MaxRunning-running[""])
	}
	if set.RateLimit > 0 && db.bug != "rate-limit-ignored" {
		limit = min(limit, set.RateLimit-len(db.inWindow(p.Queue, "", p.Now, set.RatePeriod)))
	}
	started := make(map[string]int)
	out := make([]*store.JobRow, 0)
	for _, j := range due {
		if len(out) >= limit {
			break
		}
		if k := j.PartitionKey; k != "" && db.bug != "partition-limit-ignored" {
			held := set.PartitionMaxRunning > 0 && running[k] >= set.PartitionMaxRunning ||
				set.PartitionRateLimit > 0 && len(db.inWindow(p.Queue, k, p.Now, set.PartitionRatePeriod))+started[k] >= set.PartitionRateLimit
			if held {
				if db.bug == "partition-blocks-queue" {
					break
				}
				continue
			}
		}
		running[j.PartitionKey]++
		started[j.PartitionKey]++
		db.token++
		j.State, j.Attempt, j.AttemptedAt, j.AttemptedBy = store.JobStateRunning, j.Attempt+1, fetchplan.AttemptedAt(p.Now, j), p.Worker
		if db.bug == "attempted-at-now" {
			j.AttemptedAt = p.Now
		}
		j.LeaseUntil, j.ClaimToken, j.WaitsFor = p.Now.Add(p.Lease), db.token, ""
		if db.bug == "token-is-attempt" {
			j.ClaimToken = int64(j.Attempt)
		}
		s.own.tokens[j.ID] = j.ClaimToken
		out = append(out, clone(j))
	}
	// The starts are recorded after the loop: the partition rate check above
	// counts this fetch's own starts in started.
	for _, j := range out {
		db.starts = append(db.starts, refStart{queue: j.Queue, key: j.PartitionKey, at: j.AttemptedAt})
	}
	return out, nil
}

func (s *refStore) JobFinish(_ context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	db := s.db
	db.mu.Lock()
	woke := make(map[string]struct{})
	defer func() { db.mu.Unlock(); db.hub.NotifyAll(woke) }()
	defer db.releaseAwaits(db.awaitsBefore(), woke)
	res := make([]store.ReportResult, len(p.Reports))
	for i, o := range p.Reports {
		j, ok := db.jobs[o.ID]
		// fencing-per-handle trusts a token this handle handed out.
		mine := db.bug == "fencing-per-handle" && s.own.tokens[o.ID] == o.ClaimToken
		if !ok || j.State != store.JobStateRunning || j.ClaimToken != o.ClaimToken && db.bug != "no-fencing" && !mine {
			continue
		}
		if db.bug != "finish-keeps-lease" {
			j.LeaseUntil = time.Time{}
		}
		j.CancelRequested = false
		switch o.Kind {
		case store.ReportCompleted:
			j.State, j.FinalizedAt = store.JobStateCompleted, p.Now
			if db.bug != "result-not-recorded" {
				j.Result = slices.Clone(o.Result)
			}
		case store.ReportFailed:
			j.Errors = append(j.Errors, transition.FillError(o.Error, j.Attempt, p.Now))
			if j.Attempt >= j.MaxAttempts {
				j.State, j.FinalizedAt = store.JobStateDead, p.Now
			} else {
				j.State, j.RunAt = store.JobStateRetrying, o.RunAt
				woke[j.Queue] = struct{}{}
				db.count(j.Queue, p.Now, store.HistoryRetried)
			}
		case store.ReportCancelled:
			if o.Error != nil {
				j.Errors = append(j.Errors, transition.FillError(o.Error, j.Attempt, p.Now))
			}
			j.State, j.FinalizedAt = store.JobStateCancelled, p.Now
		case store.ReportSnoozed:
			j.State, j.RunAt, j.Attempt = store.JobStateScheduled, o.RunAt, j.Attempt-1
			if db.bug == "snooze-counts-attempt" {
				j.Attempt++
			}
			if !o.RunAt.After(p.Now) {
				j.State = store.JobStateAvailable
			}
			if db.bug == "history-counts-snooze" {
				db.count(j.Queue, p.Now, store.HistoryRetried)
			}
			woke[j.Queue] = struct{}{}
		case store.ReportReleased:
			if o.Unstarted && db.bug != "unstarted-keeps-start" || db.bug == "release-gives-back-start" {
				db.forgetStart(j)
			}
			j.State, j.Attempt = store.JobStateAvailable, j.Attempt-1
			woke[j.Queue] = struct{}{}
		default:
			return nil, fmt.Errorf("job %d: unknown outcome %v", o.ID, o.Kind)
		}
		if j.State.Finished() {
			db.ended(j, p.Now, woke)
		}
		res[i] = store.ReportResult{Applied: true, State: j.State}
	}
	return res, nil
}

func (s *refStore) JobGet(_ context.Context, p *store.JobGetParams) (*store.JobRow, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	j, err := db.find(p.ID)
	if err != nil {
		return nil, err
	}
	return db.shown(j), nil
}

func (s *refStore) JobList(_ context.Context, p *store.JobListParams) ([]*store.JobRow, error) {
	if err := store.ValidateLimit("JobListParams", p.Limit); err != nil {
		return nil, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	var out []*store.JobRow
	for _, j := range db.jobs {
		if (p.Queue == "" || j.Queue == p.Queue) && (p.State == "" || j.State == p.State) && (p.Kind == "" || j.Kind == p.Kind) &&
			(p.WorkflowID == 0 || j.WorkflowID == p.WorkflowID) && (p.ParentID == 0 || j.ParentID == p.ParentID) &&
			(p.AfterID == 0 || !p.Desc && j.ID > p.AfterID || p.Desc && (j.ID < p.AfterID) != (db.bug == "list-desc-cursor")) {
			out = append(out, db.shown(j))
		}
	}
	sort.Slice(out, func(a, b int) bool { return (out[a].ID < out[b].ID) != p.Desc })
	return out[:min(p.Limit, len(out))], nil
}

func (s *refStore) nextAt(queue string, now time.Time) time.Time {
	p := struct {
		Queue string
		Now   time.Time
	}{queue, now}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	var next time.Time
	for _, j := range db.jobs {
		if j.Queue == p.Queue && (j.State == store.JobStateScheduled || j.State == store.JobStateRetrying || db.bug == "next-run-at-any-state") &&
			(next.IsZero() || j.RunAt.Before(next)) {
			next = j.RunAt
		}
	}
	qr := db.queue(p.Queue)
	if qr == nil || qr.Settings.RateLimit == 0 || db.bug == "next-run-at-ignores-rate" || len(db.due(p.Queue, nil, p.Now)) == 0 {
		return next
	}
	starts := db.inWindow(p.Queue, "", p.Now, qr.Settings.RatePeriod)
	if len(starts) < qr.Settings.RateLimit {
		return next
	}
	slices.SortFunc(starts, time.Time.Compare)
	// The window (T-period, T] holds fewer than RateLimit starts once it has
	// left behind the oldest len-RateLimit+1 of them.
	allowed := starts[len(starts)-qr.Settings.RateLimit].Add(qr.Settings.RatePeriod)
	if next.IsZero() || allowed.Before(next) {
		next = allowed
	}
	return next
}

func (s *refStore) JobPrune(_ context.Context, p *store.JobPruneParams) (int, error) {
	if err := store.ValidateLimit("JobPruneParams", p.Limit); err != nil {
		return 0, err
	}
	db := s.db
	db.mu.Lock()
	cutoff := map[store.JobState]time.Time{
		store.JobStateCompleted: p.CompletedBefore,
		store.JobStateCancelled: p.CancelledBefore,
		store.JobStateDead:      p.DeadBefore,
	}
	n := 0
	woke := make(map[string]struct{})
	for id, j := range db.jobs {
		if _, ok := db.jobs[j.ParentID]; ok && db.bug != "prune-children-early" {
			continue
		}
		if c, ok := cutoff[j.State]; ok && n < p.Limit && (j.FinalizedAt.Before(c) || db.bug == "prune-inclusive" && j.FinalizedAt.Equal(c)) {
			delete(db.steps, id)
			delete(db.jobs, id)
			delete(db.cause, id)
			if db.bug != "prune-leaves-waiting" {
				db.depEnded(id, store.JobStateCancelled, p.Now, woke)
			}
			n++
		}
	}
	db.mu.Unlock()
	db.hub.NotifyAll(woke)
	return n, nil
}

func (s *refStore) JobRescue(_ context.Context, p *store.JobRescueParams) (int, error) {
	if err := store.ValidateLimit("JobRescueParams", p.Limit); err != nil {
		return 0, err
	}
	db := s.db
	db.mu.Lock()
	n := 0
	woke := make(map[string]struct{})
	before := db.awaitsBefore()
	for _, j := range db.jobs {
		expired := j.LeaseUntil.Before(p.Now) || db.bug == "rescue-inclusive" && j.LeaseUntil.Equal(p.Now)
		if n == p.Limit || j.State != store.JobStateRunning || !expired {
			continue
		}
		j.Errors = append(j.Errors, store.AttemptError{Attempt: j.Attempt, At: p.Now, Message: store.LeaseLostMessage})
		cancelled := j.CancelRequested
		j.LeaseUntil, j.CancelRequested = time.Time{}, false
		switch {
		case cancelled && db.bug != "rescue-ignores-cancel":
			j.State, j.FinalizedAt = store.JobStateCancelled, p.Now
			db.ended(j, p.Now, woke)
		case j.Attempt >= j.MaxAttempts && db.bug != "rescue-never-dead":
			j.State, j.FinalizedAt = store.JobStateDead, p.Now
			db.ended(j, p.Now, woke)
		default:
			j.State = store.JobStateAvailable
			woke[j.Queue] = struct{}{}
			db.count(j.Queue, p.Now, store.HistoryRetried)
		}
		n++
	}
	db.releaseAwaits(before, woke)
	db.mu.Unlock()
	if db.bug != "no-signal-on-rescue" {
		db.hub.NotifyAll(woke)
	}
	return n, nil
}

func (s *refStore) JobRetry(_ context.Context, p *store.JobRetryParams) (*store.JobRow, error) {
	db := s.db
	db.mu.Lock()
	j, err := db.find(p.ID)
	if err != nil {
		db.mu.Unlock()
		return nil, err
	}
	switch {
	case j.State == store.JobStateRunning:
		db.mu.Unlock()
		return nil, fmt.Errorf("retry job %d: %w", p.ID, store.ErrJobRunning)
	case j.State == store.JobStateAvailable, j.State == store.JobStateWaiting && db.bug != "retry-ignores-deps":
		db.mu.Unlock()
		return clone(j), nil
	}
	if j.State.Finished() && db.holder(j.UniqueKey) != nil && db.bug != "retry-ignores-unique" {
		db.mu.Unlock()
		return nil, fmt.Errorf("retry job %d: %w", p.ID, store.ErrUniqueConflict)
	}
	if j.Attempt >= j.MaxAttempts && db.bug != "retry-no-extra-attempt" {
		j.MaxAttempts = j.Attempt + 1
	}
	j.State, j.RunAt, j.FinalizedAt, j.WaitsFor = store.JobStateAvailable, p.Now, time.Time{}, ""
	delete(db.cause, j.ID)
	j.CancelledBy = 0
	if !db.depsDone(j) && db.bug != "retry-ignores-deps" {
		j.State = store.JobStateWaiting
	}
	if db.bug != "retry-revives-none" {
		db.revive(j.ID)
	}
	out := db.shown(j)
	db.mu.Unlock()
	if out.State == store.JobStateAvailable {
		db.hub.Notify(out.Queue)
	}
	return out, nil
}

func (s *refStore) JobImport(_ context.Context, p *store.JobImportParams) ([]store.ImportResult, error) {
	if err := store.ImportValidate(p.Jobs); err != nil {
		return nil, err
	}
	db := s.db
	db.mu.Lock()
	res, conflict := imported.Statuses(p.Jobs, func(id int64) *store.JobRow { return db.jobs[id] }, func(key string) (int64, bool) {
		if h := db.holder(key); h != nil {
			return h.ID, true
		}
		return 0, false
	})
	if conflict || p.DryRun {
		db.mu.Unlock()
		return res, nil
	}
	woke := make(map[string]struct{})
	var touched []int64
	for i, r := range p.Jobs {
		if res[i].Status != store.ImportAdded {
			continue
		}
		j := clone(r)
		for _, st := range r.Steps {
			st.Result, st.Children = slices.Clone(st.Result), slices.Clone(st.Children)
			st.ChildCount, st.Pending = len(st.Children), 0
			db.steps[j.ID] = append(db.steps[j.ID], st)
		}
		j.Steps = nil
		touched = append(touched, j.ID)
		if j.ParentID != 0 {
			touched = append(touched, j.ParentID)
		}
		if j.State == store.JobStateWaiting {
			holds := make([]bool, len(j.DependsOn))
			for k, d := range j.DependsOn {
				dep, ok := db.jobs[d]
				holds[k] = ok && dep.State.HoldsBack(j.IgnoreDepFailure)
			}
			j.State = imported.State(j, holds, p.Now)
		}
		if j.CancelledBy != 0 {
			db.cause[j.ID] = j.CancelledBy
		}
		db.jobs[j.ID] = j
		db.owner[j.ID] = s.own
		db.lastID = max(db.lastID, j.ID)
		db.token = max(db.token, j.ClaimToken)
		woke[j.Queue] = struct{}{}
	}
	db.importAwaits(touched, woke)
	db.mu.Unlock()
	db.hub.NotifyAll(woke)
	return res, nil
}

// revive makes the jobs cancelled because of job id (just retried) wait
// again, and theirs in turn; see JobRetry. The caller holds mu.
func (db *refDB) revive(id int64) {
	var ids []int64
	for _, j := range db.jobs {
		if j.State == store.JobStateCancelled && db.cancelledBy(j, id) {
			ids = append(ids, j.ID)
		}
	}
	slices.Sort(ids)
	for _, yid := range ids {
		y := db.jobs[yid]
		if db.holder(y.UniqueKey) != nil {
			continue
		}
		gone := slices.ContainsFunc(y.DependsOn, func(d int64) bool { _, ok := db.jobs[d]; return !ok })
		if gone {
			continue
		}
		y.State, y.FinalizedAt, y.CancelledBy = store.JobStateWaiting, time.Time{}, 0
		delete(db.cause, y.ID)
		db.revive(y.ID)
	}
}

// cancelledBy reports whether cancelled job j was cancelled because of job
// id. The caller holds mu.
func (db *refDB) cancelledBy(j *store.JobRow, id int64) bool {
	if db.bug != "revive-by-last-error" {
		c, ok := db.cause[j.ID]
		return ok && c == id
	}
	// The guess a store without a record of causes might make.
	n := len(j.Errors)
	return n > 0 && slices.Contains(j.DependsOn, id) &&
		regexp.MustCompile(fmt.Sprintf(`\b%d\b`, id)).MatchString(j.Errors[n-1].Message)
}

func (s *refStore) JobWait(ctx context.Context, p *store.JobWaitParams) (*store.JobRow, error) {
	db := s.db
	for {
		db.mu.Lock()
		j, err := db.find(p.ID)
		if err != nil {
			db.mu.Unlock()
			return nil, err
		}
		if j.State.Finished() {
			out := clone(j)
			db.mu.Unlock()
			return out, nil
		}
		ch := db.finished
		db.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for job %d: %w", p.ID, ctx.Err())
		}
	}
}

func (s *refStore) LeaseExtend(_ context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make([]store.LeaseStatus, len(p.Leases))
	for i, l := range p.Leases {
		j, ok := db.jobs[l.ID]
		if !ok || j.State != store.JobStateRunning {
			continue
		}
		progress, hasProgress := p.Progress[l]
		if hasProgress && db.bug == "progress-no-fencing" {
			j.Progress = progress
		}
		mine := db.bug == "fencing-per-handle" && s.own.tokens[l.ID] == l.ClaimToken
		if j.ClaimToken != l.ClaimToken && db.bug != "extend-ignores-token" && !mine {
			continue
		}
		j.LeaseUntil = p.Now.Add(p.Lease)
		switch {
		case hasProgress:
			j.Progress = progress
		case db.bug == "progress-clears":
			j.Progress = 0
		}
		cancel := j.CancelRequested || db.bug == "cancel-per-handle" && s.own.cancels[l.ID]
		out[i] = store.LeaseStatus{Held: true, CancelRequested: cancel && db.bug != "extend-hides-cancel"}
	}
	return out, nil
}

func (s *refStore) PeriodicAdvance(_ context.Context, p *store.PeriodicAdvanceParams) (*store.PeriodicAdvanceResult, error) {
	db := s.db
	db.mu.Lock()
	woke := make(map[string]struct{})
	defer func() { db.mu.Unlock(); db.hub.NotifyAll(woke) }()
	r := db.periodic[p.Name]
	var last time.Time
	if r != nil {
		last = r.Last
	}
	if !last.Equal(p.From) && db.bug != "periodic-no-cas" {
		return &store.PeriodicAdvanceResult{Last: last}, nil
	}
	if db.bug == "periodic-no-cas" {
		// Read, then write in a second step without checking again.
		db.mu.Unlock()
		runtime.Gosched()
		db.mu.Lock()
	}
	before := db.awaitsBefore()
	res, err := db.enqueue(p.Jobs, p.Now, false, woke)
	if err != nil {
		return nil, fmt.Errorf("advance periodic %q: %w", p.Name, err)
	}
	db.releaseAwaits(before, woke)
	db.periodic[p.Name] = &store.PeriodicRow{Name: p.Name, Last: p.To, UpdatedAt: p.Now}
	return &store.PeriodicAdvanceResult{Applied: true, Last: p.To, Results: res}, nil
}

func (s *refStore) PeriodicList(_ context.Context, _ *store.PeriodicListParams) ([]store.PeriodicRow, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make([]store.PeriodicRow, 0, len(db.periodic))
	for _, r := range db.periodic {
		out = append(out, *r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// validSettings checks queue settings the way a store must.
func validSettings(s store.QueueSettings) error {
	switch {
	case s.MaxRunning < 0 || s.RateLimit < 0 || s.RatePeriod < 0 || s.PartitionMaxRunning < 0 ||
		s.PartitionRateLimit < 0 || s.PartitionRatePeriod < 0 || s.MaxDepth < 0:
		return errors.New("negative queue setting")
	case s.RateLimit > 0 && s.RatePeriod == 0:
		return errors.New("RateLimit without RatePeriod")
	case s.PartitionRateLimit > 0 && s.PartitionRatePeriod == 0:
		return errors.New("PartitionRateLimit without PartitionRatePeriod")
	case s.Overflow != store.OverflowReject && s.Overflow != store.OverflowDropOldest:
		return fmt.Errorf("unknown Overflow %d", s.Overflow)
	}
	return nil
}

func (s *refStore) QueueConfigure(_ context.Context, p *store.QueueConfigureParams) (*store.QueueRow, error) {
	db := s.db
	if err := validSettings(p.Settings); err != nil && db.bug != "configure-unvalidated" {
		return nil, fmt.Errorf("configure queue %q: %w", p.Queue, err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	r := db.queueRow(p.Queue)
	r.Settings, r.UpdatedAt = p.Settings, p.Now
	c := *r
	return &c, nil
}

func (s *refStore) QueueDelete(_ context.Context, p *store.QueueDeleteParams) error {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	var jobs int64
	for _, j := range db.jobs {
		if j.Queue == p.Queue {
			jobs++
		}
	}
	if jobs > 0 && db.bug != "delete-nonempty-queue" {
		return store.QueueNotEmptyError(p.Queue, jobs)
	}
	delete(db.queues, p.Queue)
	if db.bug != "delete-keeps-rate-window" {
		db.starts = slices.DeleteFunc(db.starts, func(st refStart) bool { return st.queue == p.Queue })
	}
	return nil
}

func (s *refStore) QueueGet(_ context.Context, p *store.QueueGetParams) (*store.QueueRow, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if r := db.queue(p.Queue); r != nil {
		c := *r
		return &c, nil
	}
	return &store.QueueRow{Name: p.Queue}, nil
}

func (s *refStore) QueueList(_ context.Context, _ *store.QueueListParams) ([]*store.QueueRow, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	m := make(map[string]*store.QueueRow)
	for q, r := range db.queues {
		c := *r
		m[q] = &c
	}
	for _, j := range db.jobs {
		if m[j.Queue] == nil {
			m[j.Queue] = &store.QueueRow{Name: j.Queue}
		}
	}
	out := make([]*store.QueueRow, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

func (s *refStore) QueuePause(_ context.Context, p *store.QueuePauseParams) (*store.QueueRow, error) {
	db := s.db
	db.mu.Lock()
	r := db.queueRow(p.Queue)
	r.Paused, r.UpdatedAt = p.Paused, p.Now
	s.own.paused[p.Queue] = p.Paused
	c := *r
	db.mu.Unlock()
	if !p.Paused && db.bug != "resume-no-signal" {
		db.hub.Notify(p.Queue)
	}
	return &c, nil
}

func (s *refStore) QueueWatch(_ context.Context, p *store.QueueWatchParams) (*store.Watch, error) {
	return s.db.hub.Watch(p.Queue), nil
}

// unwatchable is a refStore whose QueueWatch is unsupported, to test that
// the suite accepts store.ErrUnsupported.
type unwatchable struct{ *refStore }

func (unwatchable) QueueWatch(context.Context, *store.QueueWatchParams) (*store.Watch, error) {
	return nil, store.ErrUnsupported
}

func (s *refStore) ProcessBeat(ctx context.Context, p *store.ProcessBeatParams) (*store.ProcessRow, error) {
	return s.db.procs.ProcessBeat(ctx, p)
}

func (s *refStore) ProcessCommand(ctx context.Context, p *store.ProcessCommandParams) (*store.ProcessRow, error) {
	return s.db.procs.ProcessCommand(ctx, p)
}

func (s *refStore) ProcessDelete(ctx context.Context, p *store.ProcessDeleteParams) error {
	return s.db.procs.ProcessDelete(ctx, p)
}

func (s *refStore) ProcessList(ctx context.Context, p *store.ProcessListParams) ([]*store.ProcessRow, error) {
	return s.db.procs.ProcessList(ctx, p)
}

func (s *refStore) JobHistory(_ context.Context, p *store.JobHistoryParams) ([]store.HistoryRow, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	var out []store.HistoryRow
	for k, n := range db.history {
		at := time.Unix(k.minute, 0).UTC()
		if (p.Queue == "" || k.queue == p.Queue) && !at.Before(p.Since) && (p.Until.IsZero() || at.Before(p.Until)) {
			out = append(out, store.HistoryRow{Queue: k.queue, At: at, Outcome: k.outcome, Count: n})
		}
	}
	slices.SortFunc(out, store.CompareHistoryRows)
	return out, nil
}

func (s *refStore) JobHistoryPrune(_ context.Context, p *store.JobHistoryPruneParams) (int, error) {
	if err := store.ValidateLimit("JobHistoryPruneParams", p.Limit); err != nil {
		return 0, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	var old []refHistKey
	for k := range db.history {
		if time.Unix(k.minute, 0).Before(p.Before) || db.bug == "history-prune-inclusive" && time.Unix(k.minute, 0).Equal(p.Before) {
			old = append(old, k)
		}
	}
	slices.SortFunc(old, func(a, b refHistKey) int { return cmp.Compare(a.minute, b.minute) })
	old = old[:min(len(old), p.Limit)]
	for _, k := range old {
		delete(db.history, k)
	}
	return len(old), nil
}

func (s *refStore) QueueLatency(_ context.Context, p *store.QueueLatencyParams) ([]store.QueueLatencyRow, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	oldest := map[string]time.Time{}
	var head map[string]*store.JobRow // latency-claim-head: the first job in claim order
	if db.bug == "latency-claim-head" {
		head = map[string]*store.JobRow{}
	}
	for _, j := range db.jobs {
		due := j.State == store.JobStateAvailable ||
			(j.State == store.JobStateScheduled || j.State == store.JobStateRetrying) && !j.RunAt.After(p.Now)
		if !due || p.Queue != "" && j.Queue != p.Queue {
			continue
		}
		if head != nil {
			if h := head[j.Queue]; h == nil || j.Priority < h.Priority || j.Priority == h.Priority && j.RunAt.Before(h.RunAt) {
				head[j.Queue] = j
				oldest[j.Queue] = j.RunAt
			}
			continue
		}
		if o, ok := oldest[j.Queue]; !ok || j.RunAt.Before(o) {
			oldest[j.Queue] = j.RunAt
		}
	}
	out := []store.QueueLatencyRow{}
	for _, q := range slices.Sorted(maps.Keys(oldest)) {
		out = append(out, store.QueueLatencyRow{Queue: q, OldestRunAt: oldest[q]})
	}
	return out, nil
}
