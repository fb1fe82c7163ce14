package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/internal/notify"
	"github.com/sortiehq/sortie/store"
)

// Defaults applied to a NewJob field left at zero.
const (
	defaultPriority    = store.PriorityDefault
	defaultMaxAttempts = 25
)

// State indexes, in the order of store.JobStates. The first four are the
// pending states.
const (
	stScheduled uint8 = iota
	stAvailable
	stRunning
	stRetrying
	stCompleted
	stCancelled
	stDead
	numStates
)

var stateNames = [numStates]store.JobState{
	store.JobStateScheduled, store.JobStateAvailable, store.JobStateRunning, store.JobStateRetrying,
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
	sub      *sublane // set while the job is pending
}

// queue holds one queue's counters and its pending jobs.
type queue struct {
	name   string
	counts [numStates]int64
	// subs are the sublanes, sorted by priority then kind; byKey finds them.
	subs  []*sublane
	byKey map[subKey]*sublane
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
	pending int // pending jobs of this sublane, running ones included
	avail   lane
	wait    lane
}

// maxIdleSublanes is how many sublanes a queue keeps before it drops the
// ones without pending jobs (so sublanes do not churn in the usual case of a
// few kinds, and do not pile up with many).
const maxIdleSublanes = 8

// Store is an in-memory job store. The zero value is not usable; call New.
// It is safe for concurrent use by many goroutines.
type Store struct {
	hub    notify.Hub
	closed atomic.Bool

	mu        sync.Mutex
	jobs      index
	nextID    int64
	lastToken int64
	queues    map[string]*queue
	names     []string        // queue names, sorted
	unique    map[string]*job // unique key -> the pending job holding it
	leases    leaseHeap
	finished  [3]lane // completed, cancelled and dead jobs by (FinalizedAt, ID)
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
	q := &queue{name: name, byKey: make(map[subKey]*sublane)}
	s.queues[name] = q
	i, _ := slices.BinarySearch(s.names, name)
	s.names = slices.Insert(s.names, i, name)
	return q
}

// sublane returns the sublane of kind and prio, making it if needed.
func (q *queue) sublane(kind string, prio int) *sublane {
	k := subKey{kind, prio}
	if sub := q.byKey[k]; sub != nil {
		return sub
	}
	sub := &sublane{kind: kind, prio: prio}
	q.byKey[k] = sub
	i, _ := slices.BinarySearchFunc(q.subs, k, func(s *sublane, k subKey) int {
		if s.prio != k.prio {
			return s.prio - k.prio
		}
		switch {
		case s.kind < k.kind:
			return -1
		case s.kind > k.kind:
			return 1
		}
		return 0
	})
	q.subs = slices.Insert(q.subs, i, sub)
	return sub
}

// hold makes j, entering a pending state, count in its sublane and hold its
// unique key. The caller checked that the key is free.
func (s *Store) hold(j *job) {
	j.sub = j.q.sublane(j.row.Kind, j.row.Priority)
	j.sub.pending++
	if k := j.row.UniqueKey; k != "" {
		s.unique[k] = j
	}
}

// release undoes hold when j leaves the pending states.
func (s *Store) release(j *job) {
	if k := j.row.UniqueKey; k != "" && s.unique[k] == j {
		delete(s.unique, k)
	}
	sub := j.sub
	j.sub = nil
	sub.pending--
	if sub.pending == 0 && len(j.q.subs) > maxIdleSublanes {
		q := j.q
		delete(q.byKey, subKey{sub.kind, sub.prio})
		q.subs = slices.DeleteFunc(q.subs, func(x *sublane) bool { return x == sub })
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

// finalize moves j to the finished state ns at now.
func (s *Store) finalize(j *job, ns uint8, now time.Time) {
	s.unlane(j)
	s.setState(j, ns)
	j.row.FinalizedAt = now
	l := &s.finished[ns-stCompleted]
	l.push(makeEntry(now, j))
	j.lane = l
}

// stopRunning takes running j out of the lease heap.
func (s *Store) stopRunning(j *job) {
	s.leases.remove(j)
	j.row.LeaseUntil = time.Time{}
}

// drop deletes j from the store.
func (s *Store) drop(j *job) {
	s.unlane(j)
	if isPending(j.st) {
		s.release(j)
	}
	j.q.counts[j.st]--
	s.jobs.remove(j)
}

// appendError records e on j, filling a zero Attempt or At.
func appendError(j *job, e store.AttemptError, now time.Time) {
	if e.Attempt == 0 {
		e.Attempt = j.row.Attempt
	}
	if e.At.IsZero() {
		e.At = now
	}
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

// JobCancel cancels a scheduled, available or retrying job. See store.Store.
func (s *Store) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobRow, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	j := s.jobs.get(p.ID)
	if j == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("cancel job %d: %w", p.ID, store.ErrNotFound)
	}
	switch {
	case j.st == stRunning:
		s.mu.Unlock()
		return nil, fmt.Errorf("cancel job %d: %w", p.ID, store.ErrJobRunning)
	case isPending(j.st):
		s.finalize(j, stCancelled, p.Now)
	}
	row := j.row
	s.mu.Unlock()
	return deepenOne(row), nil
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

// JobDelete removes a job that is not running. See store.Store.
func (s *Store) JobDelete(ctx context.Context, p *store.JobDeleteParams) (*store.JobRow, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	j := s.jobs.get(p.ID)
	if j == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("delete job %d: %w", p.ID, store.ErrNotFound)
	}
	if j.st == stRunning {
		s.mu.Unlock()
		return nil, fmt.Errorf("delete job %d: %w", p.ID, store.ErrJobRunning)
	}
	row := j.row
	s.drop(j)
	s.mu.Unlock()
	return deepenOne(row), nil
}

// JobEnqueueMany inserts p.Jobs atomically. A zero Priority or MaxAttempts
// gets the default (2 and 25); a job with an empty Kind or Queue fails the
// whole call. See store.Store.
func (s *Store) JobEnqueueMany(ctx context.Context, p *store.JobEnqueueManyParams) ([]store.EnqueueResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Build and copy outside the lock; nothing under it can fail.
	var jbuf [4]*job
	jobs := jbuf[:0]
	if len(p.Jobs) > len(jbuf) {
		jobs = make([]*job, 0, len(p.Jobs))
	}
	for i, nj := range p.Jobs {
		switch {
		case nj == nil:
			return nil, fmt.Errorf("enqueue job %d of %d: job is nil", i, len(p.Jobs))
		case nj.Kind == "":
			return nil, fmt.Errorf("enqueue job %d of %d: kind is empty", i, len(p.Jobs))
		case nj.Queue == "":
			return nil, fmt.Errorf("enqueue job %d of %d (kind %q): queue is empty", i, len(p.Jobs), nj.Kind)
		}
		j := &job{leaseIdx: -1, st: stAvailable}
		r := &j.row
		r.Kind, r.Queue, r.UniqueKey, r.Timeout = nj.Kind, nj.Queue, nj.UniqueKey, nj.Timeout
		r.Priority, r.MaxAttempts = nj.Priority, nj.MaxAttempts
		if r.Priority == 0 {
			r.Priority = defaultPriority
		}
		if r.MaxAttempts == 0 {
			r.MaxAttempts = defaultMaxAttempts
		}
		r.CreatedAt, r.RunAt = p.Now, nj.RunAt
		if r.RunAt.IsZero() {
			r.RunAt = p.Now
		} else if r.RunAt.After(p.Now) {
			j.st = stScheduled
		}
		r.State = stateNames[j.st]
		cloneIn(r, nj)
		jobs = append(jobs, j)
	}
	res := make([]store.EnqueueResult, len(jobs))

	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	var (
		qs  queueSet
		q   *queue
		sub *sublane
	)
	for i, j := range jobs {
		r := &j.row
		if k := r.UniqueKey; k != "" {
			if h := s.unique[k]; h != nil {
				res[i] = store.EnqueueResult{ID: h.row.ID, Duplicate: true, State: h.row.State}
				continue
			}
			s.unique[k] = j
		}
		r.ID = s.nextID
		s.nextID++
		if q == nil || q.name != r.Queue {
			q, sub = s.queue(r.Queue), nil
			qs.add(q.name)
		}
		if sub == nil || sub.prio != r.Priority || sub.kind != r.Kind {
			sub = q.sublane(r.Kind, r.Priority)
		}
		j.q, j.sub = q, sub
		sub.pending++
		q.counts[j.st]++
		s.jobs.add(j)
		if j.st == stAvailable {
			sub.avail.push(makeEntry(r.RunAt, j))
			j.lane = &sub.avail
		} else {
			sub.wait.push(makeEntry(r.RunAt, j))
			j.lane = &sub.wait
		}
		res[i] = store.EnqueueResult{ID: r.ID, State: r.State}
	}
	s.mu.Unlock()
	s.notify(qs)
	return res, nil
}

// JobFetch claims up to p.Limit due jobs of p.Queue in (Priority, RunAt, ID)
// order. Unclaimed jobs are left as they are: a due scheduled job that is
// not claimed stays scheduled. See store.Store.
func (s *Store) JobFetch(ctx context.Context, p *store.JobFetchParams) ([]*store.JobRow, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	q := s.queues[p.Queue]
	if q == nil || p.Limit < 1 {
		s.mu.Unlock()
		return []*store.JobRow{}, nil
	}
	// Sublanes of the wanted kinds, still in (priority, kind) order.
	var cbuf [16]*sublane
	cands := cbuf[:0]
	switch {
	case len(p.Kinds) == 0:
		cands = append(cands, q.subs...)
	case len(p.Kinds) <= 8:
		for _, sub := range q.subs {
			if slices.Contains(p.Kinds, sub.kind) {
				cands = append(cands, sub)
			}
		}
	default:
		set := make(map[string]struct{}, len(p.Kinds))
		for _, k := range p.Kinds {
			set[k] = struct{}{}
		}
		for _, sub := range q.subs {
			if _, ok := set[sub.kind]; ok {
				cands = append(cands, sub)
			}
		}
	}

	nowSec, nowNsec := p.Now.Unix(), int32(p.Now.Nanosecond())
	leaseUntil := p.Now.Add(p.Lease)
	lsec, lnsec := leaseUntil.Unix(), int32(leaseUntil.Nanosecond())
	var jbuf [64]*job
	got := jbuf[:0]
	for i := 0; i < len(cands) && len(got) < p.Limit; {
		// cands[i:k] share a priority; merge them by (RunAt, ID).
		k := i + 1
		for k < len(cands) && cands[k].prio == cands[i].prio {
			k++
		}
		group := cands[i:k]
		i = k
		for len(got) < p.Limit {
			var (
				best *entry
				from *lane
			)
			for _, sub := range group {
				if e := sub.avail.top(); e != nil && (best == nil || e.less(best)) {
					best, from = e, &sub.avail
				}
				if e := sub.wait.top(); e != nil && !e.after(nowSec, nowNsec) && (best == nil || e.less(best)) {
					best, from = e, &sub.wait
				}
			}
			if best == nil {
				break
			}
			j := best.j
			from.pop(best)
			popped(j)

			r := &j.row
			r.Attempt++
			r.AttemptedAt = p.Now
			r.AttemptedBy = p.Worker
			r.LeaseUntil = leaseUntil
			j.lsec, j.lnsec = lsec, lnsec
			s.lastToken++
			r.ClaimToken = s.lastToken
			s.setState(j, stRunning)
			s.leases.push(j)
			got = append(got, j)
		}
	}
	rows := make([]store.JobRow, len(got))
	for i, j := range got {
		rows[i] = j.row
	}
	s.mu.Unlock()
	return deepen(rows), nil
}

// JobFinish applies the outcomes of finished attempts in one step. An
// outcome of an unknown kind fails the whole call and applies nothing; a
// failed outcome without an Error still records one. See store.Store.
func (s *Store) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.OutcomeResult, error) {
	for i, o := range p.Outcomes {
		if o == nil {
			return nil, fmt.Errorf("finish outcome %d of %d: outcome is nil", i, len(p.Outcomes))
		}
		if o.Kind < store.OutcomeCompleted || o.Kind > store.OutcomeReleased {
			return nil, fmt.Errorf("finish job %d: unknown outcome kind %v", o.ID, o.Kind)
		}
	}
	res := make([]store.OutcomeResult, len(p.Outcomes))
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	var qs queueSet
	for i, o := range p.Outcomes {
		j := s.jobs.get(o.ID)
		if j == nil || j.st != stRunning || j.row.ClaimToken != o.ClaimToken {
			continue
		}
		s.stopRunning(j)
		r := &j.row
		switch o.Kind {
		case store.OutcomeCompleted:
			s.finalize(j, stCompleted, p.Now)
		case store.OutcomeFailed:
			e := store.AttemptError{Message: "attempt failed without an error"}
			if o.Error != nil {
				e = *o.Error
			}
			appendError(j, e, p.Now)
			if r.Attempt >= r.MaxAttempts {
				s.finalize(j, stDead, p.Now)
				break
			}
			r.RunAt = o.RunAt
			if r.RunAt.IsZero() {
				r.RunAt = p.Now
			}
			s.toWaiting(j, stRetrying)
			qs.add(r.Queue)
		case store.OutcomeCancelled:
			if o.Error != nil {
				appendError(j, *o.Error, p.Now)
			}
			s.finalize(j, stCancelled, p.Now)
		case store.OutcomeSnoozed:
			r.Attempt--
			r.RunAt = o.RunAt
			if r.RunAt.IsZero() {
				r.RunAt = p.Now
			}
			if r.RunAt.After(p.Now) {
				s.toWaiting(j, stScheduled)
			} else {
				s.toAvailable(j)
			}
			qs.add(r.Queue)
		case store.OutcomeReleased:
			r.Attempt--
			s.toAvailable(j)
			qs.add(r.Queue)
		}
		res[i] = store.OutcomeResult{Applied: true, State: r.State}
	}
	s.mu.Unlock()
	s.notify(qs)
	return res, nil
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
	row := j.row
	s.mu.Unlock()
	return deepenOne(row), nil
}

// JobList returns up to p.Limit jobs matching the filters in ID order. It
// walks jobs in ID order from the cursor, skipping blocks of IDs without a
// job in the wanted state. An unknown p.State is an error. See store.Store.
func (s *Store) JobList(ctx context.Context, p *store.JobListParams) ([]*store.JobRow, error) {
	state := -1
	if p.State != "" {
		if state = stateIndex(p.State); state < 0 {
			return nil, fmt.Errorf("list jobs: unknown state %q", p.State)
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	if p.Limit < 1 {
		s.mu.Unlock()
		return []*store.JobRow{}, nil
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
	}
	var rows []store.JobRow
	s.jobs.walk(from, p.Desc, state, func(j *job) bool {
		if (state >= 0 && int(j.st) != state) ||
			(p.Queue != "" && j.row.Queue != p.Queue) ||
			(p.Kind != "" && j.row.Kind != p.Kind) {
			return true
		}
		if rows == nil {
			rows = make([]store.JobRow, 0, min(p.Limit, 256))
		}
		rows = append(rows, j.row)
		return len(rows) < p.Limit
	})
	s.mu.Unlock()
	return deepen(rows), nil
}

// JobNextRunAt returns the earliest RunAt of p.Queue's scheduled and
// retrying jobs. See store.Store.
func (s *Store) JobNextRunAt(ctx context.Context, p *store.JobNextRunAtParams) (time.Time, error) {
	if err := s.lock(ctx); err != nil {
		return time.Time{}, err
	}
	defer s.mu.Unlock()
	q := s.queues[p.Queue]
	if q == nil {
		return time.Time{}, nil
	}
	var best *entry
	for _, sub := range q.subs {
		if e := sub.wait.top(); e != nil && (best == nil || e.less(best)) {
			best = e
		}
	}
	if best == nil {
		return time.Time{}, nil
	}
	return best.j.row.RunAt, nil
}

// JobPrune deletes up to p.Limit finished jobs finalized before the cutoffs,
// oldest first within each state. See store.Store.
func (s *Store) JobPrune(ctx context.Context, p *store.JobPruneParams) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
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
			n++
		}
	}
	return n, nil
}

// JobRescue takes back up to p.Limit running jobs whose lease expired before
// p.Now, earliest expiry first. A rescued job keeps its RunAt. See
// store.Store.
func (s *Store) JobRescue(ctx context.Context, p *store.JobRescueParams) (int, error) {
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
		s.stopRunning(j)
		appendError(j, store.AttemptError{Message: store.LeaseLostMessage}, p.Now)
		if j.row.Attempt >= j.row.MaxAttempts {
			s.finalize(j, stDead, p.Now)
		} else {
			s.toAvailable(j)
			qs.add(j.row.Queue)
		}
		n++
	}
	s.mu.Unlock()
	s.notify(qs)
	return n, nil
}

// JobRetry makes a job available now. See store.Store.
func (s *Store) JobRetry(ctx context.Context, p *store.JobRetryParams) (*store.JobRow, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	j := s.jobs.get(p.ID)
	if j == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("retry job %d: %w", p.ID, store.ErrNotFound)
	}
	r := &j.row
	switch {
	case j.st == stRunning:
		s.mu.Unlock()
		return nil, fmt.Errorf("retry job %d: %w", p.ID, store.ErrJobRunning)
	case j.st == stAvailable:
		row := *r
		s.mu.Unlock()
		return deepenOne(row), nil
	case !isPending(j.st):
		if k := r.UniqueKey; k != "" && s.unique[k] != nil {
			h := s.unique[k]
			s.mu.Unlock()
			return nil, fmt.Errorf("retry job %d: key %q held by job %d: %w", p.ID, k, h.row.ID, store.ErrUniqueConflict)
		}
		s.unlane(j)
		r.FinalizedAt = time.Time{}
		s.hold(j)
	default:
		s.unlane(j)
	}
	if r.Attempt >= r.MaxAttempts {
		r.MaxAttempts = r.Attempt + 1
	}
	r.RunAt = p.Now
	s.toAvailable(j)
	row := *r
	s.mu.Unlock()
	s.hub.Notify(row.Queue)
	return deepenOne(row), nil
}

// LeaseExtend extends the leases still held. See store.Store.
func (s *Store) LeaseExtend(ctx context.Context, p *store.LeaseExtendParams) ([]bool, error) {
	res := make([]bool, len(p.Leases))
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
		res[i] = true
	}
	s.mu.Unlock()
	return res, nil
}

// QueueWatch returns a Watch signalled after enqueues, retries, rescues and
// outcomes that make jobs of p.Queue available or scheduled. See
// store.Store.
func (s *Store) QueueWatch(ctx context.Context, p *store.QueueWatchParams) (*store.Watch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	return s.hub.Watch(p.Queue), nil
}
