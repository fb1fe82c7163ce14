package sortie

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/internal/combine"
	"github.com/sortiehq/sortie/internal/completer"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/held"
	"github.com/sortiehq/sortie/internal/maintain"
	"github.com/sortiehq/sortie/internal/producer"
	"github.com/sortiehq/sortie/store"
)

// Client enqueues jobs, inspects them, and (when Config.Queues is set) works
// them. It is safe for concurrent use. One Client can Start and Stop once.
type Client struct {
	store  store.Store
	cfg    *Config
	logger *slog.Logger
	clock  Clock
	events eventBus
	// enqueue is the store insert wrapped in Config.EnqueueMiddleware.
	enqueue EnqueueFunc
	// handlers are the registered workers wrapped in Config.WorkMiddleware.
	handlers map[string]WorkHandler
	kinds    []string

	storeHealth health.Health
	// problems are the store server's problems at the last check
	// (serverproblems.go).
	problems atomic.Pointer[[]store.ServerProblem]
	// maintain rescues and prunes jobs for the maintenance loop.
	maintain maintain.Maintainer
	// claims are the jobs Take handed out, until they are reported.
	claims claimBook
	// steps records the steps of running jobs, concurrent ones in one
	// store call.
	steps combine.Combiner[*stepCall]
	// stopRequested is closed when a stop command reached the client.
	stopRequested chan struct{}

	mu      sync.Mutex // guards the run state below
	started bool
	stopped bool
	run     *runState
	// runs is set by Run, which then makes the stop on a stop command.
	runs bool
	// stopDone is closed when the first Stop returns, with stopErr its
	// result.
	stopDone chan struct{}
	stopErr  error
}

// runState is what a started client runs: producers, workers, the completer
// and background services. It exists from Start to Stop.
type runState struct {
	stopFetch chan struct{}
	// fetchOnce closes stopFetch once: at Stop, or earlier when the
	// process is told to be quiet.
	fetchOnce sync.Once
	// periodic are the schedules this client runs.
	periodic []periodicRunner
	// workCtx is the parent of the contexts of jobs held by Take; its
	// cancellation at Stop's deadline reaches them as it reaches handlers.
	workCtx    context.Context
	workCancel context.CancelCauseFunc
	bgCancel   context.CancelFunc
	producers  []*producer.Producer
	workers    sync.WaitGroup // producers and their worker goroutines
	bg         sync.WaitGroup // heartbeat and maintenance
	completer  *completer.Completer[*attempt]
	held       held.Set
	// pauses reads whether queues are paused at reserved starts.
	pauses pauseChecks
	// unserved holds the "queue\x00kind" pairs already reported as having
	// no worker here, so each is logged once.
	unserved sync.Map
}

// closeFetch stops the producers and Take fetching, once.
func (rs *runState) closeFetch() { rs.fetchOnce.Do(func() { close(rs.stopFetch) }) }

// stepBatchMax caps the steps one StepRecord call records.
const stepBatchMax = 1000

// stepFlushers is how many StepRecord calls a client makes at once; the
// other records wait and go together in the next. A step waits for its
// record's commit, so its handler's next step waits too: with one call at
// a time, a drain of 2,000 jobs of 10 steps by 100 workers ran 2,305 steps
// a second on PostgreSQL, with four 3,302 (3,837 and 4,203 on SQLite,
// whose writer commits concurrent calls together anyway); medians of three
// interleaved runs.
const stepFlushers = 4

// stepCall is one step record sent through the client's combiner, with
// where its answer goes.
type stepCall struct {
	rec *store.StepRecord
	res store.StepResult
	err error
}

// recordStep records rec in a store call shared with the concurrent
// records of other handlers.
func (c *Client) recordStep(ctx context.Context, rec *store.StepRecord) (store.StepResult, error) {
	call := &stepCall{rec: rec}
	if !c.steps.Do(ctx, call, 1, c.sendSteps) {
		return store.StepResult{}, ctx.Err()
	}
	return call.res, call.err
}

// sendSteps is the store call of a batch of step records; it answers each.
func (c *Client) sendSteps(ctx context.Context, calls []*stepCall) {
	recs := make([]*store.StepRecord, len(calls))
	for i, call := range calls {
		recs[i] = call.rec
	}
	res, err := c.store.StepRecord(ctx, &store.StepRecordParams{Steps: recs, Now: c.clock.Now()})
	for i, call := range calls {
		switch {
		case err != nil:
			call.err = err
		case i < len(res):
			call.res = res[i]
		default:
			call.err = fmt.Errorf("sortie: the store answered %d of %d step records", len(res), len(recs))
		}
	}
}

// NewClient returns a client on st. It validates cfg and reports the first
// problem, naming the field and its value. The client never closes st:
// whoever opened the store closes it, after Stop has returned.
func NewClient(st store.Store, cfg *Config) (*Client, error) {
	if st == nil {
		return nil, invalidf("NewClient: store is nil")
	}
	full, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{
		store:  st,
		cfg:    full,
		logger: full.Logger,
		clock:  full.Clock,
		kinds:  full.Workers.Kinds(),

		stopRequested: make(chan struct{}),
		stopDone:      make(chan struct{}),
	}
	c.storeHealth = health.Health{Logger: full.Logger, What: "store", Now: full.Clock.Now}
	c.maintain = maintain.Maintainer{Store: st, Clock: full.Clock, Health: &c.storeHealth, Logger: full.Logger,
		Retention: maintain.Retention{Completed: full.CompletedRetention, Cancelled: full.CancelledRetention, Dead: full.DeadRetention,
			History: full.HistoryRetention}}
	// No gathering: a record goes out at once unless stepFlushers calls
	// are under way, and then with those that arrived meanwhile.
	c.steps.Config = combine.Config{MaxJobs: stepBatchMax, Flushers: stepFlushers, Gather: time.Nanosecond}
	c.enqueue = c.insert
	for i := len(full.EnqueueMiddleware) - 1; i >= 0; i-- {
		c.enqueue = full.EnqueueMiddleware[i](c.enqueue)
	}
	c.handlers = make(map[string]WorkHandler, len(c.kinds))
	for _, kind := range c.kinds {
		h := WorkHandler(full.Workers.entry(kind).work)
		for i := len(full.WorkMiddleware) - 1; i >= 0; i-- {
			h = full.WorkMiddleware[i](h)
		}
		c.handlers[kind] = h
	}
	return c, nil
}

// StoreCorruption returns the error of the first store call of the
// client's own work (fetches, outcomes, heartbeats, rescue, retention) that
// found the store's data damaged, or nil. It wraps ErrCorrupt and names the
// damage; retrying does not help, the store must be restored from a backup.
// The client logs it once, as an error, when it is found.
func (c *Client) StoreCorruption() error { return c.storeHealth.Corrupt() }

// ID returns the client's ID, recorded as AttemptedBy on the jobs it claims.
func (c *Client) ID() string { return c.cfg.ID }

// Subscribe calls fn for every event of this client (jobs it enqueued, jobs
// it ran) until the returned function is called. fn runs on the goroutine
// that caused the event, so it must be quick and must not call back into the
// client in a way that waits for another event.
func (c *Client) Subscribe(fn func(*Event)) (unsubscribe func()) {
	return c.events.subscribe(fn)
}

// JobGet returns one job with its error history, or an error wrapping
// ErrNotFound.
func (c *Client) JobGet(ctx context.Context, id int64) (*JobRow, error) {
	row, err := c.store.JobGet(ctx, &store.JobGetParams{ID: id})
	if err != nil {
		return nil, jobError("get", id, err)
	}
	return row, nil
}

// JobListParams filters and pages JobList. Empty filters match all.
type JobListParams struct {
	Queue string
	State JobState
	Kind  string
	// WorkflowID, when not 0, lists the jobs of one workflow or chain.
	WorkflowID int64
	// ParentID, when not 0, lists the jobs that job spawned (Spawn).
	ParentID int64
	// Cursor continues a listing: pass the previous result's NextCursor.
	Cursor int64
	// Desc lists newest first.
	Desc bool
	// Limit is the page size. Defaults to 100; at most 1,000.
	Limit int
}

// JobListResult is one page of JobList.
type JobListResult struct {
	Jobs []*JobRow
	// NextCursor fetches the next page; 0 when this page is the last.
	NextCursor int64
}

// JobList returns one page of jobs ordered by ID.
func (c *Client) JobList(ctx context.Context, p *JobListParams) (*JobListResult, error) {
	var q JobListParams
	if p != nil {
		q = *p
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	if q.Limit < 0 || q.Limit > 1000 {
		return nil, invalidf("JobListParams.Limit must be 1 to 1000, got %d", q.Limit)
	}
	if q.State != "" && !q.State.Valid() {
		_, err := store.ParseJobState(string(q.State))
		return nil, invalidf("JobListParams.State: %v", err)
	}
	rows, err := c.store.JobList(ctx, &store.JobListParams{
		Queue: q.Queue, State: q.State, Kind: q.Kind, WorkflowID: q.WorkflowID, ParentID: q.ParentID,
		AfterID: q.Cursor, Desc: q.Desc, Limit: q.Limit + 1,
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	res := &JobListResult{Jobs: rows}
	if len(rows) > q.Limit {
		res.Jobs = rows[:q.Limit]
		res.NextCursor = res.Jobs[q.Limit-1].ID
	}
	return res, nil
}

// JobCounts returns the number of jobs per queue and state (zero counts left
// out); queue "" means every queue.
func (c *Client) JobCounts(ctx context.Context, queue string) ([]QueueStateCount, error) {
	counts, err := c.store.JobCounts(ctx, &store.JobCountsParams{Queue: queue})
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	return counts, nil
}

// JobRetry runs a scheduled, retrying, cancelled, completed or dead job
// again, giving it one more attempt if it used all of them. It becomes
// available now, unless one of its dependencies has not completed: then it
// waits (state waiting) for that dependency, even a dead or cancelled one
// (unless the job set IgnoreDepFailure), and runs once it is retried and
// completes. An available or waiting job is left as it is. Retrying a job
// also revives the jobs its death or cancellation cancelled (the rest of
// its chain or workflow): they wait for it again and run as it completes.
// It returns the job as it is afterwards.
func (c *Client) JobRetry(ctx context.Context, id int64) (*JobRow, error) {
	row, err := c.store.JobRetry(ctx, &store.JobRetryParams{ID: id, Now: c.clock.Now()})
	if err != nil {
		return nil, jobError("retry", id, err)
	}
	return row, nil
}

// JobCancel cancels a job that has not finished. A waiting, scheduled,
// available or retrying job is cancelled at once. A running job is asked to
// stop: its worker cancels the handler's context at its next heartbeat, and
// the job ends cancelled. A finished job is returned unchanged.
func (c *Client) JobCancel(ctx context.Context, id int64) (*JobRow, error) {
	row, err := c.store.JobCancel(ctx, &store.JobCancelParams{ID: id, Now: c.clock.Now()})
	if err != nil {
		return nil, jobError("cancel", id, err)
	}
	return row, nil
}

// JobDelete deletes a job that is not running and returns it as it was.
func (c *Client) JobDelete(ctx context.Context, id int64) (*JobRow, error) {
	row, err := c.store.JobDelete(ctx, &store.JobDeleteParams{ID: id, Now: c.clock.Now()})
	if err != nil {
		return nil, jobError("delete", id, err)
	}
	return row, nil
}
