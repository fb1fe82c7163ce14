// Package store defines the contract between sortie and its backends: the
// Store interface and the plain types it speaks. Backends (memstore,
// sqlitestore, and later pgstore and redisstore) import this package, never
// sortie itself. Every backend runs the conformance suite in store/storetest,
// which tests each sentence of the doc comments below.
//
// Time always arrives in the params (Now); a store never reads the clock, so
// tests can move time with a fake clock.
package store

import (
	"context"
	"sync"
	"time"
)

// Store is a durable job store. All methods are safe for concurrent use by
// many goroutines (and, for shared databases, many processes).
type Store interface {
	// JobCancel cancels a scheduled, available or retrying job: it becomes
	// cancelled with FinalizedAt = p.Now and its unique key is released. A
	// finished job is returned unchanged. A running job returns ErrJobRunning;
	// an unknown ID returns ErrNotFound. It returns the job as it is afterwards.
	JobCancel(ctx context.Context, p *JobCancelParams) (*JobRow, error)

	// JobCounts returns the number of jobs per queue and state, leaving out
	// zero counts. It answers from maintained counters or indexes, never by
	// reading every row, so it stays fast with millions of finished jobs.
	JobCounts(ctx context.Context, p *JobCountsParams) ([]QueueStateCount, error)

	// JobDelete removes a job that is not running and returns it as it was.
	// A running job returns ErrJobRunning; an unknown ID returns ErrNotFound.
	JobDelete(ctx context.Context, p *JobDeleteParams) (*JobRow, error)

	// JobEnqueueMany inserts p.Jobs atomically: when it returns nil, every job
	// is committed (durable by the store's documented standard); when it
	// returns an error, none is. It returns one result per job, in order.
	// A job whose UniqueKey is held by a pending (scheduled, available,
	// running or retrying) job, or by an earlier job of the same batch, is not
	// inserted: its result is Duplicate with the holder's ID and state. Unique
	// keys are global, across queues and kinds: applications namespace them.
	// A job with an empty Kind fails the whole batch with an error; an empty
	// Queue is never stored. Priority and MaxAttempts are stored as given (the
	// client fills in defaults).
	// A job is available when its RunAt is zero or not after p.Now, and
	// scheduled otherwise; zero RunAt is stored as p.Now. CreatedAt is p.Now.
	// IDs increase in batch order. Subscribers watching the queue are
	// notified after commit.
	JobEnqueueMany(ctx context.Context, p *JobEnqueueManyParams) ([]EnqueueResult, error)

	// JobFetch claims up to p.Limit available jobs of p.Queue in (Priority,
	// RunAt, ID) order. Scheduled and retrying jobs whose RunAt is not after
	// p.Now count as available. When p.Kinds is not empty, only jobs of those
	// kinds are claimed; others are left untouched for another worker.
	// Each claimed job becomes running with Attempt incremented, AttemptedAt =
	// p.Now, AttemptedBy = p.Worker, LeaseUntil = p.Now + p.Lease, and a new
	// ClaimToken. Two concurrent calls never return the same job while its
	// lease is valid.
	JobFetch(ctx context.Context, p *JobFetchParams) ([]*JobRow, error)

	// JobFinish applies the outcomes of finished attempts in one step and
	// returns one result per outcome, in order. An outcome is applied only if
	// its job is running with the same ClaimToken (fencing); otherwise its
	// result has Applied false and the job is untouched. Leaving the pending
	// states releases the job's unique key in the same step. Finished states
	// get FinalizedAt = p.Now; every applied outcome clears LeaseUntil.
	JobFinish(ctx context.Context, p *JobFinishParams) ([]OutcomeResult, error)

	// JobGet returns one job with its error history, or ErrNotFound.
	JobGet(ctx context.Context, p *JobGetParams) (*JobRow, error)

	// JobList returns up to p.Limit jobs matching the filters, ordered by ID
	// (ascending, or descending when p.Desc), starting after the cursor
	// p.AfterID (exclusive; 0 starts at the beginning in either order).
	JobList(ctx context.Context, p *JobListParams) ([]*JobRow, error)

	// JobNextRunAt returns the earliest RunAt among the scheduled and retrying
	// jobs of p.Queue, or the zero time when there are none. Workers use it to
	// set a timer instead of polling.
	JobNextRunAt(ctx context.Context, p *JobNextRunAtParams) (time.Time, error)

	// JobPrune deletes up to p.Limit finished jobs: completed ones finalized
	// before p.CompletedBefore, cancelled ones before p.CancelledBefore and dead
	// ones before p.DeadBefore. A zero time prunes nothing of that state. It
	// returns how many jobs it deleted.
	JobPrune(ctx context.Context, p *JobPruneParams) (int, error)

	// JobRescue finds up to p.Limit running jobs whose LeaseUntil is before
	// p.Now (their worker is gone) and makes them available again at once,
	// appending an error with LeaseLostMessage, the lost attempt's number and
	// At = p.Now; a job whose Attempt >= MaxAttempts becomes dead instead. It
	// returns how many jobs it rescued.
	JobRescue(ctx context.Context, p *JobRescueParams) (int, error)

	// JobRetry makes a scheduled, retrying, cancelled, completed or dead job
	// available now (RunAt = p.Now, FinalizedAt cleared). A job that used all
	// its attempts gets one more (MaxAttempts = Attempt + 1). An available job
	// is returned unchanged; a running job returns ErrJobRunning; a finished
	// job whose unique key another pending job holds returns ErrUniqueConflict;
	// an unknown ID returns ErrNotFound. Attempt and Errors are kept, so the
	// history of earlier attempts stays visible.
	JobRetry(ctx context.Context, p *JobRetryParams) (*JobRow, error)

	// LeaseExtend extends the leases of running jobs to p.Now + p.Lease and
	// returns, in order, whether each lease is still held. A lease is held only
	// if its job is running with the same ClaimToken (fencing); a lost lease is
	// left untouched, and its worker should stop the handler.
	LeaseExtend(ctx context.Context, p *LeaseExtendParams) ([]bool, error)

	// QueueWatch returns a Watch whose channel receives a signal when jobs of
	// p.Queue may have become available or scheduled: after the commit of an
	// enqueue, a JobRetry, a rescue, or an outcome that leaves the job
	// available or scheduled (released, snoozed, failed with retries left).
	// Signals coalesce and may be spurious; a worker answers one by fetching. Stores that cannot notify return ErrUnsupported, and workers
	// fall back to polling.
	QueueWatch(ctx context.Context, p *QueueWatchParams) (*Watch, error)
}

// JobCancelParams are the arguments of Store.JobCancel.
type JobCancelParams struct {
	ID  int64
	Now time.Time
}

// JobCountsParams are the arguments of Store.JobCounts.
type JobCountsParams struct {
	// Queue, when set, limits the counts to one queue.
	Queue string
}

// JobDeleteParams are the arguments of Store.JobDelete.
type JobDeleteParams struct {
	ID int64
}

// JobEnqueueManyParams are the arguments of Store.JobEnqueueMany.
type JobEnqueueManyParams struct {
	Jobs []*NewJob
	Now  time.Time
}

// JobFetchParams are the arguments of Store.JobFetch.
type JobFetchParams struct {
	Queue string
	// Kinds, when not empty, limits the claim to these kinds.
	Kinds []string
	// Limit is the most jobs to claim; at least 1.
	Limit int
	Now   time.Time
	// Lease is how long the claim holds without a heartbeat.
	Lease time.Duration
	// Worker names the claimer, recorded as AttemptedBy.
	Worker string
}

// JobFinishParams are the arguments of Store.JobFinish.
type JobFinishParams struct {
	Outcomes []*Outcome
	Now      time.Time
}

// JobGetParams are the arguments of Store.JobGet.
type JobGetParams struct {
	ID int64
}

// JobListParams are the arguments of Store.JobList. Empty filters match all.
type JobListParams struct {
	Queue string
	State JobState
	Kind  string
	// AfterID is the cursor: the ID of the last job of the previous page.
	AfterID int64
	// Desc lists newest first.
	Desc bool
	// Limit is the most jobs to return; at least 1.
	Limit int
}

// JobNextRunAtParams are the arguments of Store.JobNextRunAt.
type JobNextRunAtParams struct {
	Queue string
}

// JobPruneParams are the arguments of Store.JobPrune.
type JobPruneParams struct {
	CompletedBefore time.Time
	CancelledBefore time.Time
	DeadBefore      time.Time
	// Limit is the most jobs to delete in one call; at least 1.
	Limit int
}

// JobRescueParams are the arguments of Store.JobRescue.
type JobRescueParams struct {
	Now time.Time
	// Limit is the most jobs to rescue in one call; at least 1.
	Limit int
}

// JobRetryParams are the arguments of Store.JobRetry.
type JobRetryParams struct {
	ID  int64
	Now time.Time
}

// LeaseExtendParams are the arguments of Store.LeaseExtend.
type LeaseExtendParams struct {
	Leases []LeaseRef
	Now    time.Time
	Lease  time.Duration
}

// QueueWatchParams are the arguments of Store.QueueWatch.
type QueueWatchParams struct {
	Queue string
}

// Watch delivers wake-up signals for one queue until it is closed.
type Watch struct {
	// C receives a value when the queue may have work. It is never closed.
	C     <-chan struct{}
	once  sync.Once
	close func()
}

// NewWatch returns a Watch reading from c; close is called once by Close.
func NewWatch(c <-chan struct{}, close func()) *Watch {
	return &Watch{C: c, close: close}
}

// Close stops the signals. It is safe to call more than once, concurrently.
func (w *Watch) Close() {
	w.once.Do(func() {
		if w.close != nil {
			w.close()
		}
	})
}

// LeaseLostMessage is the error message recorded when JobRescue takes back a
// job whose lease expired.
const LeaseLostMessage = "lease expired: the worker stopped heartbeating (process killed or lost)"
