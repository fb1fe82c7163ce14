// Package store defines the contract between sortie and its backends: the
// Store interface and the plain types it speaks. Backends (memstore,
// sqlitestore, pgstore and, next, redisstore) import this package, never
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
	// JobActMany applies p.Action to each job of p.IDs, in order, as that
	// many calls of JobRetry, JobCancel or JobDelete at p.Now would one
	// after the other: a job listed twice is acted on twice, and a job that
	// an earlier one's retry revived is found waiting. It returns one
	// result per ID, in order: Err is nil where the single call would have
	// returned the job, and the error that call would have returned where it
	// refuses (ErrNotFound, ErrJobRunning, ErrUniqueConflict). Everything
	// else those calls do happens as well, in the same step as the change:
	// counters, history, unique keys released and held, dependents
	// cancelled, released or revived, JobWait callers woken and queues
	// signalled after the commit.
	//
	// The batch is one step where the store can: one transaction on SQL
	// stores, one function call on Redis (one per key group on a cluster,
	// where jobs of other groups share no key or dependency). An error that
	// is not a refusal (the store is down) fails the call: the step it
	// happened in changed nothing, and on a cluster the groups done before
	// it stay done. p.Action must be ActionRetry, ActionCancel or
	// ActionDelete and p.IDs hold at most MaxActMany IDs; otherwise the call
	// fails with an error wrapping ErrInvalidArgument and changes nothing
	// (ValidateActMany).
	JobActMany(ctx context.Context, p *JobActManyParams) ([]ActResult, error)

	// JobCancel cancels a waiting, scheduled, available or retrying job: it
	// becomes cancelled with FinalizedAt = p.Now, its unique key is released,
	// and its waiting dependents are handled as for a dependency that ended
	// cancelled (see JobFinish). A running job gets CancelRequested = true and
	// stays running; its worker learns at its next LeaseExtend and ends the
	// attempt. In the same step, each pending child of the job (a job its
	// StepSpawn enqueued) with CancelWithParent is cancelled the same way,
	// and so on down their own children. A finished job is returned
	// unchanged; an unknown ID returns ErrNotFound. It returns the job as
	// it is afterwards.
	JobCancel(ctx context.Context, p *JobCancelParams) (*JobRow, error)

	// JobCounts returns the number of jobs per queue and state, leaving out
	// zero counts. It answers from maintained counters or indexes, never by
	// reading every row, so it stays fast with millions of finished jobs.
	JobCounts(ctx context.Context, p *JobCountsParams) ([]QueueStateCount, error)

	// JobDelete removes a job that is not running and returns it as it was.
	// Its waiting dependents are handled as for a dependency that ended
	// cancelled (at p.Now), its pending children with CancelWithParent are
	// cancelled as by JobCancel, and its steps are deleted with it. A
	// running job returns ErrJobRunning; an unknown ID returns ErrNotFound.
	JobDelete(ctx context.Context, p *JobDeleteParams) (*JobRow, error)

	// JobEnqueueMany inserts p.Jobs atomically: when it returns nil, every job
	// is committed (durable by the store's documented standard); when it
	// returns an error, none is. It returns one result per job, in order.
	// A job whose UniqueKey is held by a pending (scheduled, available,
	// running or retrying) job, or by an earlier job of the same batch, is not
	// inserted: its result is Duplicate with the holder's ID and state. Unique
	// keys are global, across queues and kinds: applications namespace them.
	// The batch is checked with ValidateJobs first: a field outside its
	// range (an empty Kind or Queue, MaxAttempts above MaxAttemptsLimit, a
	// RunAt past LatestRunAt, ...) fails the whole batch with a *FieldError,
	// and every value in range is stored exactly as given, zero Priority and
	// MaxAttempts as their defaults.
	// A job is available when its RunAt is zero or not after p.Now, and
	// scheduled otherwise; zero RunAt is stored as p.Now. CreatedAt is p.Now.
	// IDs increase in batch order. Subscribers watching the queue are
	// notified after commit.
	//
	// Dependencies: a job whose DependsOn (existing IDs) or DependsOnIndex
	// (earlier jobs of the batch) name a job that has not finished is
	// waiting; one whose dependencies all completed starts as above. A
	// dependency that already ended dead or cancelled cancels the new job
	// (unless IgnoreDepFailure); an unknown dependency ID or an index not
	// below the job's own fails the batch with an error. With p.Workflow,
	// every job of the batch gets WorkflowID = the batch's first ID.
	//
	// Depth: when a queue has MaxDepth and the batch would take its queued
	// jobs past it, OverflowReject fails the whole batch with an error
	// wrapping ErrQueueFull that names the queue, and OverflowDropOldest
	// cancels the queue's oldest queued jobs to make room. Duplicates take no
	// room.
	JobEnqueueMany(ctx context.Context, p *JobEnqueueManyParams) ([]EnqueueResult, error)

	// JobFetch claims up to p.Limit available jobs of p.Queue in (Priority,
	// RunAt, ID) order. Scheduled and retrying jobs whose RunAt is not after
	// p.Now count as available. When p.Kinds is not empty, only jobs of those
	// kinds are claimed; others are left untouched for another worker.
	// The queue's shared state limits the claim, across all callers: a
	// paused queue gives no jobs; MaxRunning caps its running jobs;
	// RateLimit caps the jobs started in any window of RatePeriod ending at
	// p.Now (starts recorded with a later Now, by a caller whose clock read
	// came later or who reserved a start ahead, count too; a store keeps
	// every start that a caller whose p.Now is up to MaxStartAhead behind
	// another's still counts); PartitionMaxRunning and PartitionRateLimit do the same per
	// PartitionKey (jobs without one are not subject to them). A job held
	// back by its partition's limit does not hold back jobs behind it, and
	// a partition's backlog must not make the fetch read all of it.
	// Each claimed job becomes running with Attempt incremented, AttemptedAt =
	// p.Now, or the job's RunAt or CreatedAt when later (a caller's clock
	// read before an enqueue it then claims, or another machine's clock
	// ahead: a recorded start is never before the job was due), AttemptedBy
	// = p.Worker, LeaseUntil = p.Now + p.Lease, a new ClaimToken and
	// WaitsFor cleared. The rows carry no Steps. A rate window counts the
	// start at the job's AttemptedAt. Two concurrent calls never return the
	// same job while its lease is valid. The claimed jobs come back in claim
	// order.
	//
	// A fetch that claims fewer than p.Limit jobs also says when more may be
	// claimed, in the same call (a worker sets its timer from it instead of
	// polling): NextAt is the earliest RunAt among the queue's scheduled and
	// retrying jobs still waiting, or, when the queue's RateLimit held back
	// due jobs at p.Now, the time the limit next allows a start if that is
	// earlier; zero when neither is known. A fetch that claims p.Limit jobs
	// leaves NextAt zero.
	JobFetch(ctx context.Context, p *JobFetchParams) (*JobFetchResult, error)

	// JobFinish applies the outcomes of finished attempts in one step and
	// returns one result per outcome, in order. An outcome is applied only if
	// its job is running with the same ClaimToken (fencing); otherwise its
	// result has Applied false and the job is untouched. Leaving the pending
	// states releases the job's unique key in the same step. Finished states
	// get FinalizedAt = p.Now; every applied outcome clears LeaseUntil and
	// CancelRequested. A completed job records the outcome's Result.
	// In the same step, a job that completed makes each waiting dependent
	// whose dependencies have now all finished available (scheduled if its
	// RunAt is later); a job that ended dead or cancelled cancels its waiting
	// dependents (with an error naming the dependency), and so on down the
	// graph, except dependents with IgnoreDepFailure, for which it counts as
	// finished. The store remembers which dependency cancelled each of them,
	// so a JobRetry of that dependency revives them. An applied release
	// with Unstarted gives the job's start back to the rate windows that
	// counted it, in the same step; any other report leaves them as they
	// are (a started handler counts, however its attempt ended).
	JobFinish(ctx context.Context, p *JobFinishParams) ([]ReportResult, error)

	// JobGet returns one job with its error history and its steps (Steps,
	// without their Result and Children), or ErrNotFound.
	JobGet(ctx context.Context, p *JobGetParams) (*JobRow, error)

	// JobHistory returns the history counts of the minutes from p.Since
	// (inclusive) to p.Until (exclusive; zero: no end), of p.Queue or of
	// every queue: one row per queue, minute and outcome that has a count,
	// ordered by minute, queue and outcome (CompareHistoryRows). The counts
	// are kept by the calls that move jobs, in the same step as the move:
	// each job a call moves into completed, cancelled or dead (JobFinish,
	// JobRescue, JobCancel, a dependency's ending, a full queue dropping
	// its oldest jobs, an enqueue whose dependency already failed) adds 1
	// to its queue's count of that outcome in the minute of the call's Now
	// (HistoryMinute), and each attempt that failed with the job to run
	// again (a ReportFailed outcome with attempts left, a rescue that makes
	// the job available) adds 1 to HistoryRetried. A call
	// writes one increment per queue, minute and outcome it touched, so the
	// history costs O(1) per job. Deleting, pruning or retrying jobs leaves
	// the counts as they are; only JobHistoryPrune removes them.
	JobHistory(ctx context.Context, p *JobHistoryParams) ([]HistoryRow, error)

	// JobHistoryPrune deletes up to p.Limit history rows (the count of one
	// queue, minute and outcome) of minutes before p.Before, oldest minutes
	// first, and returns how many it deleted.
	JobHistoryPrune(ctx context.Context, p *JobHistoryPruneParams) (int, error)

	// JobList returns up to p.Limit jobs matching the filters, ordered by ID
	// (ascending, or descending when p.Desc), starting after the cursor
	// p.AfterID (exclusive; 0 starts at the beginning in either order).
	// Each job carries its steps as JobGet returns them.
	JobList(ctx context.Context, p *JobListParams) ([]*JobRow, error)

	// JobPrune deletes up to p.Limit finished jobs: completed ones finalized
	// before p.CompletedBefore, cancelled ones before p.CancelledBefore and dead
	// ones before p.DeadBefore. A zero time prunes nothing of that state. It
	// returns how many jobs it deleted. A pruned job's waiting dependents
	// (jobs retried while it was dead or cancelled wait for it) are handled
	// as in JobDelete, at p.Now, and its steps are deleted with it. A job
	// whose parent (ParentID) the store still holds is not pruned, so the
	// parent's Await reads every child's outcome; it is pruned once its
	// parent is gone.
	JobPrune(ctx context.Context, p *JobPruneParams) (int, error)

	// JobRescue finds up to p.Limit running jobs whose LeaseUntil is before
	// p.Now (their worker is gone) and makes them available again at once,
	// appending an error with LeaseLostMessage, the lost attempt's number and
	// At = p.Now; a job whose Attempt >= MaxAttempts becomes dead instead,
	// and a job whose CancelRequested is set becomes cancelled (an operator
	// asked it to stop; it must not run again). Dead and cancelled jobs get
	// FinalizedAt = p.Now and their dependents are handled as in JobFinish.
	// It returns how many jobs it rescued.
	JobRescue(ctx context.Context, p *JobRescueParams) (int, error)

	// JobRetry runs a job again. A scheduled, retrying, cancelled, completed
	// or dead job gets RunAt = p.Now and FinalizedAt cleared, and becomes
	// available, unless one of its dependencies (DependsOn) holds it back:
	// then it becomes waiting, and is released or cancelled as in JobFinish
	// when that dependency ends. A dependency holds it back while it is
	// pending, and while it is dead or cancelled unless the job has
	// IgnoreDepFailure, so the job runs only after that dependency is itself
	// retried and completes; a completed dependency, or one that no longer
	// exists, does not. A job that used all its attempts gets one more
	// (MaxAttempts = Attempt + 1). WaitsFor is cleared: the job runs from
	// its start, its recorded steps kept. An available or waiting job is returned
	// unchanged; a running job returns ErrJobRunning; a finished job whose
	// unique key another pending job holds returns ErrUniqueConflict; an
	// unknown ID returns ErrNotFound. Attempt and Errors are kept, so the
	// history of earlier attempts stays visible.
	//
	// In the same step it revives the jobs cancelled because of this one: a
	// cancelled job whose latest cancellation came from this job having
	// ended dead or cancelled (by any means: an outcome, a rescue, JobCancel,
	// a drop by a full queue; or found so when the dependent was enqueued)
	// goes back to waiting, FinalizedAt cleared and Errors kept, waiting for
	// this job and for each of its other dependencies that has not
	// completed; then the jobs cancelled because of it are revived the same
	// way, down the graph. A job cancelled for another reason (by JobCancel,
	// by its own outcome, dropped by a full queue, or because a dependency
	// was deleted) is not revived, and neither is one whose unique key
	// another pending job now holds or one whose other dependency no longer
	// exists: those stay cancelled (a later retry of this job tries them
	// again). A job retried since its cancellation is not revived. Only the
	// retried job's queue is signalled, when it becomes available: revived
	// jobs wait.
	JobRetry(ctx context.Context, p *JobRetryParams) (*JobRow, error)

	// JobImport writes jobs exported from another store (or this one) as
	// they were, IDs, states, attempts, errors, results, leases and claim
	// tokens included, checking them with ImportValidate first. Each job
	// gets ImportPresent when the store holds the same job under its ID
	// (same kind, queue, CreatedAt and Args), ImportIDTaken when a different
	// one, and ImportUniqueTaken when it is pending and another pending job
	// holds its UniqueKey; otherwise ImportAdded. If any job conflicts, or
	// under DryRun, nothing is written; otherwise every added job is written
	// in one step, as if it had been enqueued and moved to its state here:
	// counted, indexed for fetch, rescue and listing, holding its unique key
	// while pending, waiting for its dependencies that hold it back (a
	// waiting job that none holds back becomes ready: available, or
	// scheduled when its RunAt is after p.Now), and recorded as cancelled by
	// CancelledBy so that a retry of that job revives it. Jobs are linked to
	// earlier jobs of the same call or already in the store; a link to a job
	// the store does not hold is kept as a deleted job's would be. The
	// store's next job ID and next claim token come after the largest
	// imported. Available jobs' queues are signalled. Per-minute history,
	// rate windows and queue settings are not jobs and are not written.
	//
	// Each job's Steps, as StepList returns them, are written with it; a
	// StepSpawn step's Pending counts the children the store holds (this
	// call's included) that are pending, kept from then on as for any
	// child. A job waiting at an Await (WaitsFor) stays waiting while one
	// of that step's Children is pending or not in the store; the call
	// that leaves none so (this one, or a later one importing the last
	// child) makes it available. Steps are checked with the job (see
	// ImportValidate).
	JobImport(ctx context.Context, p *JobImportParams) ([]ImportResult, error)

	// JobWait returns the job once it is finished (completed, cancelled or
	// dead), waiting as long as ctx allows; an unknown or deleted job returns
	// ErrNotFound. Stores that can notify wake the waiter when the job
	// finishes instead of polling.
	JobWait(ctx context.Context, p *JobWaitParams) (*JobRow, error)

	// LeaseExtend extends the leases of running jobs to p.Now + p.Lease and
	// returns, in order, each lease's status. A lease is held only if its job
	// is running with the same ClaimToken (fencing); a lost lease is left
	// untouched, and its worker should stop the handler. CancelRequested
	// reports a JobCancel of the running job. In the same step, each held
	// lease with an entry in p.Progress records it as its job's Progress; a
	// lost lease records nothing, and a job without an entry keeps its
	// Progress. A worker's heartbeat, progress included, is this one call.
	LeaseExtend(ctx context.Context, p *LeaseExtendParams) ([]LeaseStatus, error)

	// PeriodicAdvance moves periodic schedule p.Name's last slot from p.From
	// to p.To and enqueues p.Jobs (as JobEnqueueMany does), in one step, only
	// if the schedule's last slot is still p.From (the zero time for a
	// schedule never advanced). Otherwise it changes nothing and returns
	// Applied false with the current last slot. So many clients can run the
	// same schedule and each slot is enqueued once.
	PeriodicAdvance(ctx context.Context, p *PeriodicAdvanceParams) (*PeriodicAdvanceResult, error)

	// PeriodicList returns every periodic schedule's state, by name.
	PeriodicList(ctx context.Context, p *PeriodicListParams) ([]PeriodicRow, error)

	// ProcessBeat records that client process p.Process.ID is alive: it
	// creates or replaces the process's row with p.Process and LastBeat =
	// p.Now, keeping the commands requested for it, and returns the row.
	// In the same call it deletes the rows of other processes whose
	// LastBeat is before p.ForgetBefore (when not zero). An invalid row
	// (ValidateProcess) returns its error.
	ProcessBeat(ctx context.Context, p *ProcessBeatParams) (*ProcessRow, error)

	// ProcessCommand sets command p.Command on process p.ID's row (Quiet
	// or Stop stays set until the row is deleted) and returns the row;
	// ErrNotFound when there is none.
	ProcessCommand(ctx context.Context, p *ProcessCommandParams) (*ProcessRow, error)

	// ProcessDelete deletes process p.ID's row; no error when there is
	// none.
	ProcessDelete(ctx context.Context, p *ProcessDeleteParams) error

	// ProcessList returns every registered process, by ID.
	ProcessList(ctx context.Context, p *ProcessListParams) ([]*ProcessRow, error)

	// QueueConfigure replaces p.Queue's settings and returns its state.
	// Settings that fail QueueSettings.Validate return its error, and the
	// queue is unchanged.
	QueueConfigure(ctx context.Context, p *QueueConfigureParams) (*QueueRow, error)

	// QueueDelete deletes queue p.Queue when it holds no job in any state
	// (finished jobs count): its settings, pause, dropped count and rate
	// windows go, and QueueList no longer lists it; its per-minute history
	// stays until retention prunes it. A queue holding jobs is left as it
	// is, and the error wraps ErrQueueNotEmpty (QueueNotEmptyError, with
	// the count). Deleting a queue the store does not know is no error. A
	// later enqueue, QueuePause or QueueConfigure makes the queue anew,
	// with zero settings.
	QueueDelete(ctx context.Context, p *QueueDeleteParams) error

	// QueueGet returns a queue's state; a queue never configured or paused
	// has zero settings and is not paused (no error).
	QueueGet(ctx context.Context, p *QueueGetParams) (*QueueRow, error)

	// QueueLatency returns, for p.Queue (every queue when empty), the RunAt
	// of its oldest due job: the earliest RunAt among its available jobs
	// and among its scheduled and retrying jobs whose RunAt is not after
	// p.Now. A queue without due jobs is left out; rows come in
	// queue name order. It reads the heads of the indexes a fetch reads (a
	// few probes per queue), never every due job.
	QueueLatency(ctx context.Context, p *QueueLatencyParams) ([]QueueLatencyRow, error)

	// QueueList returns every queue that has jobs, settings or a pause, by name.
	QueueList(ctx context.Context, p *QueueListParams) ([]*QueueRow, error)

	// QueuePause pauses (p.Paused) or resumes a queue for every process: a
	// paused queue still takes enqueues, but JobFetch gives none of its jobs.
	// Resuming notifies the queue's watchers.
	QueuePause(ctx context.Context, p *QueuePauseParams) (*QueueRow, error)

	// QueueWatch returns a Watch whose channel receives a signal when jobs of
	// p.Queue may have become available or scheduled: after the commit of an
	// enqueue, a JobRetry, a rescue, or an outcome that leaves the job
	// available or scheduled (released, snoozed, failed with retries left).
	// Signals coalesce and may be spurious; a worker answers one by fetching. Stores that cannot notify return ErrUnsupported, and workers
	// fall back to polling.
	QueueWatch(ctx context.Context, p *QueueWatchParams) (*Watch, error)

	// StepAwait ends the running attempt of job p.ID at an Await of its
	// StepSpawn step p.Name, unless none of that step's children is
	// pending. The job must be running with p.ClaimToken (fencing);
	// otherwise the result has Applied false and nothing changes. A job
	// whose CancelRequested is set changes nothing (CancelRequested true).
	// A job without a StepSpawn step named p.Name fails with an error
	// wrapping ErrInvalidArgument. When none of the step's children is
	// pending (each finished or was deleted), nothing changes and the
	// attempt goes on (Suspended false). Otherwise, in one step, the
	// attempt ends without counting: the job becomes waiting with WaitsFor
	// = p.Name and RunAt = p.Now, its Attempt decremented and its lease
	// cleared (Suspended true). Then the change that leaves none of the
	// step's children pending (an outcome, a rescue, JobCancel, JobDelete,
	// a cascade), in its own step, makes the job available with WaitsFor
	// cleared and signals its queue after the commit.
	StepAwait(ctx context.Context, p *StepAwaitParams) (*StepResult, error)

	// StepList returns the steps job p.ID recorded, in the order they were
	// recorded, with their Result and Children; ErrNotFound for an unknown
	// job. A job without steps returns none.
	StepList(ctx context.Context, p *StepListParams) ([]JobStep, error)

	// StepRecord records steps of running attempts, as StepRun steps
	// (Attempt = the job's Attempt, RecordedAt = p.Now), in one step, and
	// returns one result per step, in order. A step is recorded only if its
	// job is running with the same ClaimToken (fencing); otherwise its
	// result has Applied false. A job that already has a step of that name
	// keeps it: the result has Applied true and Exists true. The steps are
	// checked first (a name of 1 to MaxStepNameLen bytes of UTF-8, a valid
	// JSON result): one invalid step fails the call with an error wrapping
	// ErrInvalidArgument, and nothing is recorded.
	StepRecord(ctx context.Context, p *StepRecordParams) ([]StepResult, error)

	// StepSleep ends the running attempt of job p.ID at a durable sleep
	// named p.Name, in one step: it records step p.Name as a StepSleep step
	// with Until = p.Until, unless the job has a step of that name (then
	// nothing is recorded, Exists is true, and the job sleeps until the
	// recorded Until; a recorded step of another kind fails with an error
	// wrapping ErrInvalidArgument), and the attempt ends without counting:
	// the job becomes scheduled at the wake time (available when it is not
	// after p.Now) with WaitsFor = p.Name, its Attempt decremented and its
	// lease cleared; its queue is signalled after the commit. The job must
	// be running with p.ClaimToken (fencing; otherwise Applied false and
	// nothing changes); one whose CancelRequested is set changes nothing
	// (CancelRequested true). A name or Until out of range fails with an
	// error wrapping ErrInvalidArgument.
	StepSleep(ctx context.Context, p *StepSleepParams) (*StepResult, error)

	// StepSpawn enqueues p.Jobs as children of the running job p.ID and
	// records step p.Name as their StepSpawn step, in one step: the
	// children are inserted as JobEnqueueMany inserts a batch (checked by
	// ValidateJobs, dependencies among them and on existing jobs, queue
	// depth), each with ParentID = p.ID, SpawnStep = p.Name and
	// CancelWithParent = p.CancelWithParent, and the step records their
	// IDs in order (Children) and how many are pending (Pending). Queues
	// are signalled after the commit. A job that already has a step named
	// p.Name enqueues nothing: the result has Exists true and the recorded
	// Children (a recorded step of another kind fails with an error
	// wrapping ErrInvalidArgument). The job must be running with
	// p.ClaimToken (fencing; otherwise Applied false and nothing is
	// enqueued). No child may have a UniqueKey, and there must be 1 to
	// MaxSpawn of them: otherwise the call fails with an error wrapping
	// ErrInvalidArgument, as it does for a batch JobEnqueueMany refuses.
	StepSpawn(ctx context.Context, p *StepSpawnParams) (*StepResult, error)
}

// JobActManyParams are the arguments of Store.JobActMany.
type JobActManyParams struct {
	// Action is what to do to each job.
	Action JobAction
	// IDs are the jobs, at most MaxActMany.
	IDs []int64
	Now time.Time
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
	ID  int64
	Now time.Time
}

// JobEnqueueManyParams are the arguments of Store.JobEnqueueMany.
type JobEnqueueManyParams struct {
	Jobs []*NewJob
	Now  time.Time
	// Workflow gives every job WorkflowID = the batch's first job ID.
	Workflow bool
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

// JobFetchResult is what Store.JobFetch returns.
type JobFetchResult struct {
	// Jobs are the claimed jobs, in claim order.
	Jobs []*JobRow
	// NextAt is when more jobs may be claimed, for a fetch that claimed
	// fewer than its Limit; see Store.JobFetch.
	NextAt time.Time
}

// JobFinishParams are the arguments of Store.JobFinish.
type JobFinishParams struct {
	Reports []*Report
	Now     time.Time
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
	// WorkflowID, when not 0, lists one workflow's (or chain's) jobs.
	WorkflowID int64
	// ParentID, when not 0, lists the jobs that job spawned (StepSpawn).
	ParentID int64
	// AfterID is the cursor: the ID of the last job of the previous page.
	AfterID int64
	// Desc lists newest first.
	Desc bool
	// Limit is the most jobs to return; at least 1.
	Limit int
}

// JobPruneParams are the arguments of Store.JobPrune.
type JobPruneParams struct {
	CompletedBefore time.Time
	CancelledBefore time.Time
	DeadBefore      time.Time
	// Limit is the most jobs to delete in one call; at least 1.
	Limit int
	// Now is the FinalizedAt of the waiting dependents a prune cancels.
	Now time.Time
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

// JobWaitParams are the arguments of Store.JobWait.
type JobWaitParams struct {
	ID int64
}

// LeaseExtendParams are the arguments of Store.LeaseExtend.
type LeaseExtendParams struct {
	Leases []LeaseRef
	Now    time.Time
	Lease  time.Duration
	// Progress holds the progress (0 to 100) to record for the leases that
	// have some; an entry whose lease is not in Leases is ignored.
	Progress map[LeaseRef]float64
}

// PeriodicAdvanceParams are the arguments of Store.PeriodicAdvance.
type PeriodicAdvanceParams struct {
	Name string
	From time.Time
	To   time.Time
	Jobs []*NewJob
	Now  time.Time
}

// PeriodicAdvanceResult says what PeriodicAdvance did.
type PeriodicAdvanceResult struct {
	// Applied is false when another client advanced the schedule first.
	Applied bool
	// Last is the schedule's last slot afterwards.
	Last time.Time
	// Results are the enqueue results of p.Jobs when Applied.
	Results []EnqueueResult
}

// PeriodicListParams are the arguments of Store.PeriodicList.
type PeriodicListParams struct{}

// QueueConfigureParams are the arguments of Store.QueueConfigure.
type QueueConfigureParams struct {
	Queue    string
	Settings QueueSettings
	Now      time.Time
}

// QueueDeleteParams are the arguments of Store.QueueDelete.
type QueueDeleteParams struct {
	Queue string
}

// QueueGetParams are the arguments of Store.QueueGet.
type QueueGetParams struct {
	Queue string
}

// QueueListParams are the arguments of Store.QueueList.
type QueueListParams struct{}

// QueuePauseParams are the arguments of Store.QueuePause.
type QueuePauseParams struct {
	Queue  string
	Paused bool
	Now    time.Time
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

// MaxStartAhead is the most a fetch's JobFetchParams.Now may be ahead of
// another caller's at the same moment: a worker claims from a rate-limited
// queue for a start it reserves ahead of its clock (by three times its
// slowest recent claim, never more than this), and machines' clocks
// differ a little. A store keeps a recorded start until it is older than
// two rate periods and MaxStartAhead before the Now of the fetch that
// forgets it, so a fetch whose Now lags that far behind still counts it.
const MaxStartAhead = time.Second

// LeaseLostMessage is the error message recorded when JobRescue takes back a
// job whose lease expired.
const LeaseLostMessage = "lease expired: the worker stopped heartbeating (process killed or lost)"

// FetchedJobs returns the jobs of a JobFetch result, for callers that do
// not need its NextAt: jobs, err := store.FetchedJobs(st.JobFetch(ctx, p)).
func FetchedJobs(r *JobFetchResult, err error) ([]*JobRow, error) {
	if err != nil {
		return nil, err
	}
	return r.Jobs, nil
}
