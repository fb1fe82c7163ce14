package storetest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sortiehq/sortie/internal/notify"
	"github.com/sortiehq/sortie/store"
)

// refStore is the suite's own reference store: the contract written as
// plainly as possible (one mutex, one map, full scans), so the suite can
// test itself without a real backend. Several refStores can share one
// refDB, which is how the self-test "reopens" a database.
type refStore struct {
	db *refDB
}

var _ store.Store = (*refStore)(nil)

type refDB struct {
	hub notify.Hub
	// bug names a deliberate mistake (see mutants in storetest_test.go);
	// empty for the correct store.
	bug string

	mu     sync.Mutex
	jobs   map[int64]*store.JobRow
	lastID int64
	token  int64
}

func newRefStore(bug string) *refStore {
	return &refStore{db: &refDB{jobs: make(map[int64]*store.JobRow), bug: bug}}
}

func clone(r *store.JobRow) *store.JobRow {
	c := *r
	c.Args = slices.Clone(r.Args)
	c.Meta = slices.Clone(r.Meta)
	c.Tags = slices.Clone(r.Tags)
	c.Errors = slices.Clone(r.Errors)
	return &c
}

// holder returns the pending job holding key, if any. The caller holds mu.
func (db *refDB) holder(key string) *store.JobRow {
	if key == "" {
		return nil
	}
	for _, j := range db.jobs {
		if j.UniqueKey == key && j.State.Pending() && !(db.bug == "unique-ignores-running" && j.State == store.JobStateRunning) {
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

func (s *refStore) JobCancel(_ context.Context, p *store.JobCancelParams) (*store.JobRow, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	j, err := db.find(p.ID)
	if err != nil {
		return nil, err
	}
	switch {
	case j.State == store.JobStateRunning:
		return nil, fmt.Errorf("cancel job %d: %w", p.ID, store.ErrJobRunning)
	case j.State.Pending():
		j.State, j.FinalizedAt = store.JobStateCancelled, p.Now
		if db.bug == "cancel-keeps-finalized-zero" {
			j.FinalizedAt = time.Time{}
		}
	}
	return clone(j), nil
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
	defer db.mu.Unlock()
	j, err := db.find(p.ID)
	if err != nil {
		return nil, err
	}
	if j.State == store.JobStateRunning {
		return nil, fmt.Errorf("delete job %d: %w", p.ID, store.ErrJobRunning)
	}
	delete(db.jobs, p.ID)
	return clone(j), nil
}

func (s *refStore) JobEnqueueMany(_ context.Context, p *store.JobEnqueueManyParams) ([]store.EnqueueResult, error) {
	db := s.db
	invalid := func(nj *store.NewJob) bool { return nj.Kind == "" || nj.Queue == "" }
	for i, nj := range p.Jobs {
		if invalid(nj) && db.bug != "enqueue-partial" {
			return nil, fmt.Errorf("job %d of the batch: empty kind or queue", i)
		}
	}
	if db.bug == "notify-before-commit" {
		for _, nj := range p.Jobs {
			db.hub.Notify(nj.Queue)
		}
		time.Sleep(time.Millisecond) // a commit takes a while
	}
	db.mu.Lock()
	res := make([]store.EnqueueResult, len(p.Jobs))
	queues := make(map[string]struct{})
	for i, nj := range p.Jobs {
		if invalid(nj) { // only with the enqueue-partial bug
			db.mu.Unlock()
			return nil, fmt.Errorf("job %d of the batch: empty kind or queue", i)
		}
		if h := db.holder(nj.UniqueKey); h != nil {
			res[i] = store.EnqueueResult{ID: h.ID, Duplicate: true, State: h.State}
			continue
		}
		db.lastID++
		j := &store.JobRow{
			ID: db.lastID, Kind: nj.Kind, Queue: nj.Queue, Args: slices.Clone(nj.Args),
			State: store.JobStateAvailable, Priority: nj.Priority, MaxAttempts: nj.MaxAttempts,
			RunAt: nj.RunAt, CreatedAt: p.Now, UniqueKey: nj.UniqueKey, Tags: slices.Clone(nj.Tags),
			Meta: slices.Clone(nj.Meta), Timeout: nj.Timeout,
		}
		if j.RunAt.IsZero() {
			j.RunAt = p.Now
		}
		if j.RunAt.After(p.Now) {
			j.State = store.JobStateScheduled
		}
		db.jobs[j.ID] = j
		queues[j.Queue] = struct{}{}
		res[i] = store.EnqueueResult{ID: j.ID, State: j.State}
	}
	db.mu.Unlock()
	if db.bug != "notify-before-commit" {
		db.hub.NotifyAll(queues)
	}
	return res, nil
}

func (s *refStore) JobFetch(_ context.Context, p *store.JobFetchParams) ([]*store.JobRow, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	var due []*store.JobRow
	for _, j := range db.jobs {
		ready := j.State == store.JobStateAvailable ||
			(j.State == store.JobStateScheduled || j.State == store.JobStateRetrying) && !j.RunAt.After(p.Now)
		if ready && j.Queue == p.Queue && (len(p.Kinds) == 0 || slices.Contains(p.Kinds, j.Kind) || db.bug == "kinds-ignored") {
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
	if db.bug == "claim-not-atomic" {
		// Select, then claim in a second step without checking again.
		db.mu.Unlock()
		runtime.Gosched()
		db.mu.Lock()
	}
	out := make([]*store.JobRow, 0, min(p.Limit, len(due)))
	for _, j := range due[:min(p.Limit, len(due))] {
		db.token++
		j.State, j.Attempt, j.AttemptedAt, j.AttemptedBy = store.JobStateRunning, j.Attempt+1, p.Now, p.Worker
		j.LeaseUntil, j.ClaimToken = p.Now.Add(p.Lease), db.token
		if db.bug == "token-is-attempt" {
			j.ClaimToken = int64(j.Attempt)
		}
		out = append(out, clone(j))
	}
	return out, nil
}

func (s *refStore) JobFinish(_ context.Context, p *store.JobFinishParams) ([]store.OutcomeResult, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	res := make([]store.OutcomeResult, len(p.Outcomes))
	for i, o := range p.Outcomes {
		j, ok := db.jobs[o.ID]
		if !ok || j.State != store.JobStateRunning || j.ClaimToken != o.ClaimToken && db.bug != "no-fencing" {
			continue
		}
		if db.bug != "finish-keeps-lease" {
			j.LeaseUntil = time.Time{}
		}
		switch o.Kind {
		case store.OutcomeCompleted:
			j.State, j.FinalizedAt = store.JobStateCompleted, p.Now
		case store.OutcomeFailed:
			if o.Error != nil {
				j.Errors = append(j.Errors, *o.Error)
			}
			if j.Attempt >= j.MaxAttempts {
				j.State, j.FinalizedAt = store.JobStateDead, p.Now
			} else {
				j.State, j.RunAt = store.JobStateRetrying, o.RunAt
			}
		case store.OutcomeCancelled:
			if o.Error != nil {
				j.Errors = append(j.Errors, *o.Error)
			}
			j.State, j.FinalizedAt = store.JobStateCancelled, p.Now
		case store.OutcomeSnoozed:
			j.State, j.RunAt, j.Attempt = store.JobStateScheduled, o.RunAt, j.Attempt-1
			if db.bug == "snooze-counts-attempt" {
				j.Attempt++
			}
			if !o.RunAt.After(p.Now) {
				j.State = store.JobStateAvailable
			}
		case store.OutcomeReleased:
			j.State, j.Attempt = store.JobStateAvailable, j.Attempt-1
		default:
			return nil, fmt.Errorf("job %d: unknown outcome %v", o.ID, o.Kind)
		}
		res[i] = store.OutcomeResult{Applied: true, State: j.State}
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
	return clone(j), nil
}

func (s *refStore) JobList(_ context.Context, p *store.JobListParams) ([]*store.JobRow, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	var out []*store.JobRow
	for _, j := range db.jobs {
		if (p.Queue == "" || j.Queue == p.Queue) && (p.State == "" || j.State == p.State) && (p.Kind == "" || j.Kind == p.Kind) &&
			(p.AfterID == 0 || !p.Desc && j.ID > p.AfterID || p.Desc && (j.ID < p.AfterID) != (db.bug == "list-desc-cursor")) {
			out = append(out, clone(j))
		}
	}
	sort.Slice(out, func(a, b int) bool { return (out[a].ID < out[b].ID) != p.Desc })
	return out[:min(p.Limit, len(out))], nil
}

func (s *refStore) JobNextRunAt(_ context.Context, p *store.JobNextRunAtParams) (time.Time, error) {
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
	return next, nil
}

func (s *refStore) JobPrune(_ context.Context, p *store.JobPruneParams) (int, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	cutoff := map[store.JobState]time.Time{
		store.JobStateCompleted: p.CompletedBefore,
		store.JobStateCancelled: p.CancelledBefore,
		store.JobStateDead:      p.DeadBefore,
	}
	n := 0
	for id, j := range db.jobs {
		if c, ok := cutoff[j.State]; ok && n < p.Limit && (j.FinalizedAt.Before(c) || db.bug == "prune-inclusive" && j.FinalizedAt.Equal(c)) {
			delete(db.jobs, id)
			n++
		}
	}
	return n, nil
}

func (s *refStore) JobRescue(_ context.Context, p *store.JobRescueParams) (int, error) {
	db := s.db
	db.mu.Lock()
	n := 0
	queues := make(map[string]struct{})
	for _, j := range db.jobs {
		expired := j.LeaseUntil.Before(p.Now) || db.bug == "rescue-inclusive" && j.LeaseUntil.Equal(p.Now)
		if n == p.Limit || j.State != store.JobStateRunning || !expired {
			continue
		}
		j.Errors = append(j.Errors, store.AttemptError{Attempt: j.Attempt, At: p.Now, Message: store.LeaseLostMessage})
		j.LeaseUntil = time.Time{}
		if j.Attempt >= j.MaxAttempts && db.bug != "rescue-never-dead" {
			j.State, j.FinalizedAt = store.JobStateDead, p.Now
		} else {
			j.State = store.JobStateAvailable
			queues[j.Queue] = struct{}{}
		}
		n++
	}
	db.mu.Unlock()
	if db.bug != "no-signal-on-rescue" {
		db.hub.NotifyAll(queues)
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
	switch j.State {
	case store.JobStateRunning:
		db.mu.Unlock()
		return nil, fmt.Errorf("retry job %d: %w", p.ID, store.ErrJobRunning)
	case store.JobStateAvailable:
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
	j.State, j.RunAt, j.FinalizedAt = store.JobStateAvailable, p.Now, time.Time{}
	out := clone(j)
	db.mu.Unlock()
	db.hub.Notify(out.Queue)
	return out, nil
}

func (s *refStore) LeaseExtend(_ context.Context, p *store.LeaseExtendParams) ([]bool, error) {
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	held := make([]bool, len(p.Leases))
	for i, l := range p.Leases {
		if j, ok := db.jobs[l.ID]; ok && j.State == store.JobStateRunning && (j.ClaimToken == l.ClaimToken || db.bug == "extend-ignores-token") {
			j.LeaseUntil = p.Now.Add(p.Lease)
			held[i] = true
		}
	}
	return held, nil
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
