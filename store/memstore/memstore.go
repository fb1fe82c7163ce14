package memstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/internal/notify"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/ratelimit"
	"github.com/sortiehq/sortie/store/internal/registry"
	"github.com/sortiehq/sortie/store/internal/transition"
)

// State indexes, in the order of store.JobStates. The first five are the
// pending states.
const (
	stWaiting uint8 = iota
	stScheduled
	stAvailable
	stRunning
	stRetrying
	stCompleted
	stCancelled
	stDead
	numStates
)

var stateNames = [numStates]store.JobState{
	store.JobStateWaiting, store.JobStateScheduled, store.JobStateAvailable, store.JobStateRunning, store.JobStateRetrying,
	store.JobStateCompleted, store.JobStateCancelled, store.JobStateDead,
}

// stateIndex returns the index of s, or -1 when s is not a state.
func stateIndex(s store.JobState) int {
	for i, n := range stateNames {
		if n == s {
			return i
		}
	}
	return -1
}

func isPending(st uint8) bool { return st <= stRetrying }

// job is a stored job and its place in the store's structures.
type job struct {
	row store.JobRow
	st  uint8 // state index; row.State mirrors it
	// gen changes whenever the job leaves a lane, making the entries that
	// pointed at it stale.
	gen  uint32
	lane *lane // the lane holding the job's live entry, or nil
	// leaseIdx is the job's position in Store.leases while running, else -1;
	// lsec and lnsec are its LeaseUntil as a key.
	leaseIdx int
	lsec     int64
	lnsec    int32
	q        *queue
	sub      *sublane   // set while the job is pending
	part     *partition // set while the job is pending and has a PartitionKey
	// waitN counts the dependencies a waiting job still waits for.
	waitN int32
	// waitGen changes each time the job starts waiting: see depRef.
	waitGen uint32
}

// queue holds one queue's counters, its pending jobs and its shared state.
type queue struct {
	name   string
	counts [numStates]int64
	// lanes hold the pending jobs without a PartitionKey; parts hold the
	// others, by key, each with its own lanes.
	lanes
	parts map[string]*partition

	set       store.QueueSettings
	paused    bool
	limited   bool // paused, MaxRunning or RateLimit: JobFetch computes a cap
	dropped   int64
	updatedAt time.Time
	starts    window // starts in the RateLimit window, when RateLimit is set
}

type subKey struct {
	kind string
	prio int
}

// sublane holds the pending jobs of one kind and priority in one queue:
// available ones by (RunAt, ID) and scheduled or retrying ones by (RunAt,
// ID). Splitting by kind lets JobFetch with Kinds skip other kinds' jobs
// without looking at them; splitting by priority leaves a fetch to merge
// lanes of one priority by (RunAt, ID) only.
type sublane struct {
	kind    string
	prio    int
	owner   *lanes
	pending int // pending jobs of this sublane, running ones included
	avail   lane
	wait    lane
}

// maxIdleSublanes is how many sublanes a lanes keeps before it drops the
// ones without pending jobs.
const maxIdleSublanes = 8

// Store is an in-memory job store. The zero value is not usable; call New.
// It is safe for concurrent use by many goroutines.
type Store struct {
	hub    notify.Hub
	closed atomic.Bool
	// Table is the process registry (its methods are the Store's).
	registry.Table

	mu        sync.Mutex
	jobs      index
	nextID    int64
	lastToken int64
	queues    map[string]*queue
	names     []string        // queue names, sorted
	unique    map[string]*job // unique key -> the pending job holding it
	leases    leaseHeap
	finished  [3]lane // completed, cancelled and dead jobs by (FinalizedAt, ID)
	// dependents maps a job to the waiting jobs it holds back (see
	// deps.go).
	dependents map[int64][]depRef
	// cascaded maps a job that ended dead or cancelled to the jobs that
	// ending cancelled, each of which names it in CancelledBy while it
	// stays cancelled so: JobRetry revives them.
	cascaded map[int64][]*job
	// waiters maps a job to the channel closed when it finishes or is
	// deleted, while JobWait waits for it.
	waiters  map[int64]chan struct{}
	periodic map[string]*store.PeriodicRow
	// history counts outcomes per queue, minute and outcome (JobHistory),
	// written where jobs finish (finalize) or fail for a retry (apply).
	history map[histKey]int64
	// steps holds each job's recorded steps, whole, in order (steps.go).
	steps map[int64][]store.JobStep
}

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	return &Store{
		nextID: 1,
		queues: make(map[string]*queue),
		unique: make(map[string]*job),
	}
}

// Close drops every job. Later calls of any method, Close included, return
// store.ErrClosed. Watches already made stay open until closed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return store.ErrClosed
	}
	s.closed.Store(true)
	s.jobs = index{}
	s.queues, s.names, s.unique, s.leases = nil, nil, nil, nil
	s.finished = [3]lane{}
	s.dependents, s.cascaded, s.periodic, s.history, s.steps = nil, nil, nil, nil, nil
	for id, c := range s.waiters {
		close(c)
		delete(s.waiters, id)
	}
	return nil
}

// lock takes the mutex, unless ctx is done or the store closed.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return store.ErrClosed
	}
	return nil
}

// queue returns the queue named name, making it if needed.
func (s *Store) queue(name string) *queue {
	if q := s.queues[name]; q != nil {
		return q
	}
	q := &queue{name: name}
	s.queues[name] = q
	i, _ := slices.BinarySearch(s.names, name)
	s.names = slices.Insert(s.names, i, name)
	return q
}

// hold makes j, entering a pending state, count in its sublane and hold its
// unique key. The caller checked that the key is free.
func (s *Store) hold(j *job) {
	s.place(j)
	if k := j.row.UniqueKey; k != "" {
		s.unique[k] = j
	}
}

// place puts j, entering a pending state, in its sublane (its partition's,
// when it has a PartitionKey) and counts it there.
func (s *Store) place(j *job) {
	l := &j.q.lanes
	if k := j.row.PartitionKey; k != "" {
		j.part = j.q.partition(k)
		j.part.pending++
		l = &j.part.lanes
	}
	j.sub = l.sublane(j.row.Kind, j.row.Priority)
	j.sub.pending++
}

// release undoes hold when j leaves the pending states.
func (s *Store) release(j *job) {
	if k := j.row.UniqueKey; k != "" && s.unique[k] == j {
		delete(s.unique, k)
	}
	sub := j.sub
	j.sub = nil
	sub.pending--
	if sub.pending == 0 {
		sub.owner.idle(sub)
	}
	if p := j.part; p != nil {
		j.part = nil
		p.pending--
		j.q.partIdle(p)
	}
}

// setState moves j to state ns, keeping the counters, and releases what a
// pending job holds when j leaves the pending states.
func (s *Store) setState(j *job, ns uint8) {
	os := j.st
	if os == ns {
		return
	}
	j.st = ns
	j.row.State = stateNames[ns]
	j.q.counts[os]--
	j.q.counts[ns]++
	s.jobs.moved(j, os)
	if isPending(os) && !isPending(ns) {
		s.release(j)
	}
	if j.row.ParentID != 0 && isPending(os) != isPending(ns) {
		if isPending(ns) {
			s.childMoved(j, 1)
		} else {
			s.childMoved(j, -1)
		}
	}
}

// unlane takes j out of its lane, if any.
func (s *Store) unlane(j *job) {
	if l := j.lane; l != nil {
		j.lane = nil
		j.gen++
		l.forget()
	}
}

// popped records that j's entry was popped from its lane.
func popped(j *job) {
	j.lane = nil
	j.gen++
}

func (s *Store) toAvailable(j *job) {
	s.setState(j, stAvailable)
	j.sub.avail.push(makeEntry(j.row.RunAt, j))
	j.lane = &j.sub.avail
}

// toWaiting makes j scheduled or retrying (ns) until its RunAt.
func (s *Store) toWaiting(j *job, ns uint8) {
	s.setState(j, ns)
	j.sub.wait.push(makeEntry(j.row.RunAt, j))
	j.lane = &j.sub.wait
}

// finalize moves j to the finished state ns at now, counts it in the
// history and wakes its waiters. The caller settles its dependents.
func (s *Store) finalize(j *job, ns uint8, now time.Time) {
	s.unlane(j)
	s.setState(j, ns)
	j.row.FinalizedAt = now
	s.count(j.q, now, store.HistoryOutcome(j.row.State))
	s.toFinished(j)
	if s.waiters != nil {
		s.wake(j.row.ID)
	}
}

// toFinished puts finished j in the lane of its state.
func (s *Store) toFinished(j *job) {
	if s.heldByParent(j) {
		return
	}
	l := &s.finished[j.st-stCompleted]
	l.push(makeEntry(j.row.FinalizedAt, j))
	j.lane = l
}

// stopRunning takes running j out of the lease heap and its partition's
// running count.
func (s *Store) stopRunning(j *job) {
	s.leases.remove(j)
	j.row.LeaseUntil = time.Time{}
	j.row.CancelRequested = false
	if j.part != nil {
		j.part.running--
	}
}

// drop deletes j from the store and wakes its waiters. The caller settles
// its dependents.
func (s *Store) drop(j *job) {
	s.unlane(j)
	if isPending(j.st) {
		s.release(j)
		if j.row.ParentID != 0 {
			s.childMoved(j, -1)
		}
	}
	j.q.counts[j.st]--
	s.jobs.remove(j)
	if len(s.steps) > 0 {
		s.dropSteps(j)
	}
	if s.waiters != nil {
		s.wake(j.row.ID)
	}
	if len(s.cascaded) > 0 {
		delete(s.cascaded, j.row.ID)
	}
	// j may share its allocation with jobs still stored (see slabJobs):
	// let go of its payloads. Stale entries and dependents' lists may still
	// point at j, and read only its state, generation and ID.
	r := &j.row
	r.Args, r.Meta, r.Tags, r.Errors, r.Result, r.DependsOn = nil, nil, nil, nil, nil, nil
	r.UniqueKey, r.PartitionKey, r.AttemptedBy = "", "", ""
}

// wake closes the channel JobWait waits on for job id, if any.
func (s *Store) wake(id int64) {
	if c := s.waiters[id]; c != nil {
		close(c)
		delete(s.waiters, id)
	}
}

// appendError records e on j, its defaults filled in.
func appendError(j *job, ep *store.AttemptError, now time.Time) {
	e := transition.FillError(ep, j.row.Attempt, now)
	errs := make([]store.AttemptError, len(j.row.Errors)+1)
	copy(errs, j.row.Errors)
	errs[len(errs)-1] = e
	j.row.Errors = errs
}

// queueSet collects the queues to notify once the lock is released.
type queueSet []string

func (qs *queueSet) add(name string) {
	for _, n := range *qs {
		if n == name {
			return
		}
	}
	*qs = append(*qs, name)
}

func (s *Store) notify(qs queueSet) {
	for _, q := range qs {
		s.hub.Notify(q)
	}
}

// JobCancel cancels a waiting, scheduled, available or retrying job, or
// asks a running one to stop. See store.Store.
func (s *Store) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobRow, error) {
	return s.actOne(ctx, (*Store).cancel, p.ID, p.Now)
}

// cancel is JobCancel of job id under s.mu; the queues to signal are added
// to qs. It returns the job as it is afterwards.
func (s *Store) cancel(id int64, now time.Time, qs *queueSet) (store.JobRow, error) {
	j := s.jobs.get(id)
	if j == nil {
		return store.JobRow{}, fmt.Errorf("cancel job %d: %w", id, store.ErrNotFound)
	}
	switch {
	case j.st == stRunning:
		j.row.CancelRequested = true
	case isPending(j.st):
		s.finalize(j, stCancelled, now)
		s.ended(j, now, qs)
	default:
		return s.withSteps(j.row), nil
	}
	if len(s.steps[id]) > 0 {
		s.cancelChildren(id, false, now, qs)
	}
	return s.withSteps(j.row), nil
}

// An action is JobRetry, JobCancel or JobDelete of job id under s.mu: it
// adds the queues to signal to qs and returns the job as it is afterwards
// (as it was, for a deletion).
type action func(s *Store, id int64, now time.Time, qs *queueSet) (store.JobRow, error)

// actions are the actions of JobActMany, by name.
var actions = map[store.JobAction]action{
	store.ActionRetry: (*Store).retry, store.ActionCancel: (*Store).cancel, store.ActionDelete: (*Store).delete,
}

// actOne runs act on job id under s.mu, and signals the queues it names
// after unlocking.
func (s *Store) actOne(ctx context.Context, act action, id int64, now time.Time) (*store.JobRow, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	var qs queueSet
	row, err := act(s, id, now, &qs)
	s.mu.Unlock()
	s.notify(qs)
	if err != nil {
		return nil, err
	}
	return deepenOne(row), nil
}

// JobActMany applies p.Action to each job of p.IDs in order under one
// lock, as JobRetry, JobCancel or JobDelete would. See store.Store.
func (s *Store) JobActMany(ctx context.Context, p *store.JobActManyParams) ([]store.ActResult, error) {
	if err := store.ValidateActMany(p); err != nil {
		return nil, err
	}
	act := actions[p.Action]
	out := make([]store.ActResult, len(p.IDs))
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	var qs queueSet
	for i, id := range p.IDs {
		_, out[i].Err = act(s, id, p.Now, &qs)
	}
	s.mu.Unlock()
	s.notify(qs)
	return out, nil
}

// JobCounts returns the number of jobs per queue and state from maintained
// counters, queues in name order and states in life-cycle order. See
// store.Store.
func (s *Store) JobCounts(ctx context.Context, p *store.JobCountsParams) ([]store.QueueStateCount, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []store.QueueStateCount{}
	add := func(q *queue) {
		for st, n := range q.counts {
			if n != 0 {
				out = append(out, store.QueueStateCount{Queue: q.name, State: stateNames[st], Count: n})
			}
		}
	}
	if p != nil && p.Queue != "" {
		if q := s.queues[p.Queue]; q != nil {
			add(q)
		}
		return out, nil
	}
	for _, name := range s.names {
		add(s.queues[name])
	}
	return out, nil
}

// JobDelete removes a job that is not running. Its waiting dependents are
// cancelled at p.Now (or released, when they ignore failures). See
// store.Store.
func (s *Store) JobDelete(ctx context.Context, p *store.JobDeleteParams) (*store.JobRow, error) {
	return s.actOne(ctx, (*Store).delete, p.ID, p.Now)
}

// delete is JobDelete of job id under s.mu; the queues to signal are added
// to qs. It returns the job as it was.
func (s *Store) delete(id int64, now time.Time, qs *queueSet) (store.JobRow, error) {
	j := s.jobs.get(id)
	if j == nil {
		return store.JobRow{}, fmt.Errorf("delete job %d: %w", id, store.ErrNotFound)
	}
	if j.st == stRunning {
		return store.JobRow{}, fmt.Errorf("delete job %d: %w", id, store.ErrJobRunning)
	}
	if len(s.steps[id]) > 0 {
		s.cancelChildren(id, true, now, qs)
	}
	row := s.withSteps(j.row)
	s.drop(j)
	if len(s.dependents) > 0 {
		if _, ok := s.dependents[row.ID]; ok {
			s.settle(row.ID, stCancelled, now, qs)
		}
	}
	return row, nil
}

// JobFinish applies the outcomes of finished attempts in one step. An
// outcome of an unknown kind fails the whole call and applies nothing; a
// failed outcome without an Error still records one. See store.Store.
func (s *Store) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	if err := store.ValidateReports(p.Reports); err != nil {
		return nil, fmt.Errorf("finish: %w", err)
	}
	res := make([]store.ReportResult, len(p.Reports))
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	var qs queueSet
	for i, o := range p.Reports {
		j := s.jobs.get(o.ID)
		if j == nil || j.st != stRunning || j.row.ClaimToken != o.ClaimToken {
			continue
		}
		if o.Unstarted {
			s.giveBackStart(j)
		}
		s.apply(j, transition.Next(o, j.row.Attempt, j.row.MaxAttempts, p.Now), o.Kind == store.ReportFailed, p.Now, &qs)
		res[i] = store.ReportResult{Applied: true, State: j.row.State}
	}
	s.mu.Unlock()
	s.notify(qs)
	return res, nil
}

// giveBackStart forgets the start that running job j's claim logged in
// the rate windows that counted it, under the lock: its handler never
// started (store.Report.Unstarted). A claim logs each job's start at its
// AttemptedAt.
func (s *Store) giveBackStart(j *job) {
	at := j.row.AttemptedAt.UnixNano()
	if j.q.set.RateLimit > 0 {
		j.q.starts.remove(at)
	}
	if p := j.part; p != nil && j.q.set.PartitionRateLimit > 0 {
		p.starts.remove(at)
	}
}

// apply moves running job j on by step, under the lock. failed says the
// attempt failed (an error or a lost lease): a job that will run again
// counts as retried in the history.
func (s *Store) apply(j *job, step transition.Step, failed bool, now time.Time, qs *queueSet) {
	s.stopRunning(j)
	r := &j.row
	if set := &j.q.set; set.MaxRunning > 0 || set.PartitionMaxRunning > 0 {
		// A running slot freed up: workers held back may claim now.
		qs.add(r.Queue)
	}
	if step.Error != nil {
		appendError(j, step.Error, now)
	}
	if step.State == store.JobStateCompleted {
		r.Result = bytes.Clone(step.Result)
	}
	if step.Uncount {
		r.Attempt--
	}
	if !step.RunAt.IsZero() {
		r.RunAt = step.RunAt
	}
	if o, ok := transition.OutcomeOf(step.State, failed); ok && o == store.HistoryRetried {
		s.count(j.q, now, o)
	}
	switch step.State {
	case store.JobStateAvailable:
		s.toAvailable(j)
		qs.add(r.Queue)
	case store.JobStateScheduled, store.JobStateRetrying:
		s.toWaiting(j, uint8(stateIndex(step.State)))
		qs.add(r.Queue)
	default:
		s.finalize(j, uint8(stateIndex(step.State)), now)
		s.ended(j, now, qs)
	}
}

// JobGet returns one job. See store.Store.
func (s *Store) JobGet(ctx context.Context, p *store.JobGetParams) (*store.JobRow, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	j := s.jobs.get(p.ID)
	if j == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("get job %d: %w", p.ID, store.ErrNotFound)
	}
	row := s.withSteps(j.row)
	s.mu.Unlock()
	return deepenOne(row), nil
}

// JobList returns up to p.Limit jobs matching the filters in ID order. It
// walks jobs in ID order from the cursor, skipping blocks of IDs without a
// job in the wanted state; a WorkflowID filter starts at the workflow's
// first ID. An unknown p.State is an error. See store.Store.
func (s *Store) JobList(ctx context.Context, p *store.JobListParams) ([]*store.JobRow, error) {
	if err := store.ValidateLimit("JobListParams", p.Limit); err != nil {
		return nil, err
	}
	state := -1
	if p.State != "" {
		if state = stateIndex(p.State); state < 0 {
			return nil, fmt.Errorf("list jobs: unknown state %q", p.State)
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	if p.Queue != "" {
		q := s.queues[p.Queue]
		if q == nil || (state >= 0 && q.counts[state] == 0) {
			s.mu.Unlock()
			return []*store.JobRow{}, nil
		}
	}
	from := max(p.AfterID, 0) + 1
	if p.Desc {
		from = s.nextID - 1
		if p.AfterID > 0 {
			from = p.AfterID - 1
		}
	} else if p.WorkflowID > 0 {
		// A workflow's jobs have IDs from the workflow's ID up.
		from = max(from, p.WorkflowID)
	}
	if !p.Desc && p.ParentID > 0 {
		// A job's children come after it.
		from = max(from, p.ParentID+1)
	}
	var rows []store.JobRow
	s.jobs.walk(from, p.Desc, state, func(j *job) bool {
		if p.Desc && p.WorkflowID > 0 && j.row.ID < p.WorkflowID {
			return false
		}
		if (state >= 0 && int(j.st) != state) ||
			(p.Queue != "" && j.row.Queue != p.Queue) ||
			(p.Kind != "" && j.row.Kind != p.Kind) ||
			(p.WorkflowID != 0 && j.row.WorkflowID != p.WorkflowID) ||
			(p.ParentID != 0 && j.row.ParentID != p.ParentID) {
			return true
		}
		if rows == nil {
			rows = make([]store.JobRow, 0, min(p.Limit, 256))
		}
		rows = append(rows, s.withSteps(j.row))
		return len(rows) < p.Limit
	})
	s.mu.Unlock()
	return deepen(rows), nil
}

// nextAt returns when a fetch from q may claim more than one at now could
// (see store.Store.JobFetch): the earliest RunAt of its scheduled and
// retrying jobs, or the time its RateLimit next allows a start when that
// is earlier and the limit holds back due jobs.
func (q *queue) nextAt(now time.Time) time.Time {
	var best *entry
	scan := func(l *lanes) {
		for _, sub := range l.subs {
			if e := sub.wait.top(); e != nil && (best == nil || e.less(best)) {
				best = e
			}
		}
	}
	scan(&q.lanes)
	for _, pt := range q.parts {
		scan(&pt.lanes)
	}
	var next time.Time
	if best != nil {
		next = best.j.row.RunAt
	}
	if r := q.set.RateLimit; r > 0 && q.starts.room(now.UnixNano(), r, q.set.RatePeriod) <= 0 && q.due(now) {
		at := q.starts.freeAt(ratelimit.Queue(q.set), now).In(now.Location())
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// due reports whether q has a job a fetch at now could claim, limits aside.
func (q *queue) due(now time.Time) bool {
	sec, nsec := now.Unix(), int32(now.Nanosecond())
	if _, e, _ := q.best(nil, sec, nsec); e != nil {
		return true
	}
	for _, pt := range q.parts {
		if _, e, _ := pt.best(nil, sec, nsec); e != nil {
			return true
		}
	}
	return false
}

// JobPrune deletes up to p.Limit finished jobs finalized before the cutoffs,
// oldest first within each state. See store.Store.
func (s *Store) JobPrune(ctx context.Context, p *store.JobPruneParams) (int, error) {
	if err := store.ValidateLimit("JobPruneParams", p.Limit); err != nil {
		return 0, err
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	var qs queueSet
	defer func() { s.mu.Unlock(); s.notify(qs) }()
	n := 0
	for i, cut := range [3]time.Time{p.CompletedBefore, p.CancelledBefore, p.DeadBefore} {
		if cut.IsZero() {
			continue
		}
		sec, nsec := cut.Unix(), int32(cut.Nanosecond())
		l := &s.finished[i]
		for n < p.Limit {
			e := l.top()
			if e == nil || !e.before(sec, nsec) {
				break
			}
			j := e.j
			l.pop(e)
			popped(j)
			s.drop(j)
			if _, ok := s.dependents[j.row.ID]; ok {
				s.settle(j.row.ID, stCancelled, p.Now, &qs)
			}
			n++
		}
	}
	return n, nil
}

// JobRescue takes back up to p.Limit running jobs whose lease expired before
// p.Now, earliest expiry first. A rescued job keeps its RunAt; a cancel
// asked of it is forgotten, as for any ended attempt. See store.Store.
func (s *Store) JobRescue(ctx context.Context, p *store.JobRescueParams) (int, error) {
	if err := store.ValidateLimit("JobRescueParams", p.Limit); err != nil {
		return 0, err
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	nowSec, nowNsec := p.Now.Unix(), int32(p.Now.Nanosecond())
	var qs queueSet
	n := 0
	for n < p.Limit && len(s.leases) > 0 {
		j := s.leases[0]
		if j.lsec > nowSec || (j.lsec == nowSec && j.lnsec >= nowNsec) {
			break
		}
		state := transition.RescueState(j.row.Attempt, j.row.MaxAttempts, j.row.CancelRequested)
		e := transition.RescueError(j.row.Attempt, p.Now)
		s.apply(j, transition.Step{State: state, Error: &e}, true, p.Now, &qs)
		n++
	}
	s.mu.Unlock()
	s.notify(qs)
	return n, nil
}

// JobRetry makes a job available now, or waiting when a dependency holds
// it back, and revives the jobs its ending cancelled. See store.Store.
func (s *Store) JobRetry(ctx context.Context, p *store.JobRetryParams) (*store.JobRow, error) {
	return s.actOne(ctx, (*Store).retry, p.ID, p.Now)
}

// retry is JobRetry of job id under s.mu; the queues to signal are added
// to qs. It returns the job as it is afterwards.
func (s *Store) retry(id int64, now time.Time, qs *queueSet) (store.JobRow, error) {
	j := s.jobs.get(id)
	if j == nil {
		return store.JobRow{}, fmt.Errorf("retry job %d: %w", id, store.ErrNotFound)
	}
	r := &j.row
	if skip, err := transition.Retry(stateNames[j.st]); err != nil {
		return store.JobRow{}, fmt.Errorf("retry job %d: %w", id, err)
	} else if skip {
		return s.withSteps(*r), nil
	}
	switch {
	case !isPending(j.st):
		if k := r.UniqueKey; k != "" && s.unique[k] != nil {
			return store.JobRow{}, fmt.Errorf("retry job %d: key %q held by job %d: %w", id, k, s.unique[k].row.ID, store.ErrUniqueConflict)
		}
		s.unlane(j)
		r.FinalizedAt = time.Time{}
		s.forgetCause(j)
		s.hold(j)
	default:
		s.unlane(j)
	}
	if r.Attempt >= r.MaxAttempts {
		r.MaxAttempts = r.Attempt + 1
	}
	r.RunAt = now
	r.WaitsFor = ""
	if len(r.DependsOn) > 0 && s.waitFor(j) {
		s.setState(j, stWaiting)
	} else {
		s.toAvailable(j)
		qs.add(r.Queue)
	}
	if len(s.cascaded) > 0 {
		s.revive(r.ID, now, qs)
	}
	return s.withSteps(*r), nil
}

// LeaseExtend extends the leases still held, records their progress and
// reports cancel requests. See store.Store.
func (s *Store) LeaseExtend(ctx context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error) {
	res := make([]store.LeaseStatus, len(p.Leases))
	until := p.Now.Add(p.Lease)
	sec, nsec := until.Unix(), int32(until.Nanosecond())
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	for i, ref := range p.Leases {
		j := s.jobs.get(ref.ID)
		if j == nil || j.st != stRunning || j.row.ClaimToken != ref.ClaimToken {
			continue
		}
		j.row.LeaseUntil = until
		j.lsec, j.lnsec = sec, nsec
		s.leases.fix(j)
		if pr, ok := p.Progress[ref]; ok {
			j.row.Progress = pr
		}
		res[i] = store.LeaseStatus{Held: true, CancelRequested: j.row.CancelRequested}
	}
	s.mu.Unlock()
	return res, nil
}

// QueueWatch returns a Watch signalled after enqueues, retries, rescues,
// resumes, dependents released, running slots freed in queues with
// MaxRunning or PartitionMaxRunning, and outcomes that make jobs of p.Queue
// available or scheduled. See store.Store.
func (s *Store) QueueWatch(ctx context.Context, p *store.QueueWatchParams) (*store.Watch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	return s.hub.Watch(p.Queue), nil
}
