package store

import (
	"fmt"
	"time"
)

// JobState is where a job is in its life. See the state diagram in DESIGN.md.
type JobState string

// The states a job can be in.
const (
	// JobStateWaiting: waiting for the jobs it depends on (DependsOn) to finish.
	JobStateWaiting JobState = "waiting"
	// JobStateScheduled: waiting for RunAt (enqueued for later, or snoozed).
	JobStateScheduled JobState = "scheduled"
	// JobStateAvailable: due and waiting for a worker.
	JobStateAvailable JobState = "available"
	// JobStateRunning: claimed by a worker holding a lease.
	JobStateRunning JobState = "running"
	// JobStateRetrying: failed, waiting for RunAt before its next attempt.
	JobStateRetrying JobState = "retrying"
	// JobStateCompleted: the handler returned nil.
	JobStateCompleted JobState = "completed"
	// JobStateCancelled: cancelled by the handler or an operator; never retried.
	JobStateCancelled JobState = "cancelled"
	// JobStateDead: attempts exhausted; kept in the dead-letter set with its errors.
	JobStateDead JobState = "dead"
)

// JobStates lists every state in life-cycle order.
var JobStates = []JobState{
	JobStateWaiting, JobStateScheduled, JobStateAvailable, JobStateRunning, JobStateRetrying,
	JobStateCompleted, JobStateCancelled, JobStateDead,
}

// Finished reports whether s is a final state (completed, cancelled or dead).
func (s JobState) Finished() bool {
	return s == JobStateCompleted || s == JobStateCancelled || s == JobStateDead
}

// Pending reports whether s is a state that counts toward uniqueness:
// waiting, scheduled, available, running or retrying.
func (s JobState) Pending() bool {
	return s == JobStateWaiting || s == JobStateScheduled || s == JobStateAvailable || s == JobStateRunning || s == JobStateRetrying
}

// Queued reports whether s counts toward a queue's depth (MaxDepth): every
// pending state but running.
func (s JobState) Queued() bool {
	return s.Pending() && s != JobStateRunning
}

// HoldsBack reports whether a dependency in state s keeps its dependent
// waiting: a pending dependency does; a completed one does not; a dead or
// cancelled one does, unless the dependent ignores failures
// (IgnoreDepFailure). See Store.JobRetry.
func (s JobState) HoldsBack(ignoreFailure bool) bool {
	return s.Pending() || (s.Finished() && s != JobStateCompleted && !ignoreFailure)
}

// Valid reports whether s is one of the known states.
func (s JobState) Valid() bool {
	for _, v := range JobStates {
		if s == v {
			return true
		}
	}
	return false
}

// ParseJobState returns the state named s, or an error naming s.
func ParseJobState(s string) (JobState, error) {
	st := JobState(s)
	if !st.Valid() {
		return "", fmt.Errorf("unknown job state %q (want one of waiting, scheduled, available, running, retrying, completed, cancelled, dead)", s)
	}
	return st, nil
}

// Priority bounds: 1 runs first, 4 runs last.
const (
	PriorityHighest = 1
	PriorityDefault = 2
	PriorityLowest  = 4
)

// AttemptError records one failed attempt.
type AttemptError struct {
	// Attempt is the attempt number that failed (1 for the first run).
	Attempt int `json:"attempt"`
	// At is when the failure was recorded.
	At time.Time `json:"at"`
	// Message is the error text.
	Message string `json:"message"`
	// Stack is the goroutine stack for a recovered panic; empty otherwise.
	Stack string `json:"stack,omitempty"`
}

// NoErrorMessage is the message recorded for a failed attempt whose
// outcome carried no error, or an error without a message.
const NoErrorMessage = "attempt failed without an error message"

// JobRow is a job as the store holds it.
type JobRow struct {
	// ID is assigned by the store at enqueue; IDs increase.
	ID int64
	// Kind names the handler.
	Kind string
	// Queue is the queue the job waits in.
	Queue string
	// Args is the JSON-encoded payload.
	Args []byte
	// State is where the job is in its life.
	State JobState
	// Priority orders jobs within a queue: 1 (highest) to 4 (lowest).
	Priority int
	// Attempt counts the attempts made so far; it is incremented at fetch.
	Attempt int
	// MaxAttempts is how many attempts the job gets before it is dead.
	MaxAttempts int
	// RunAt is when the job becomes (or became) due.
	RunAt time.Time
	// CreatedAt is when the job was enqueued.
	CreatedAt time.Time
	// AttemptedAt is when the latest attempt was claimed; zero before the first.
	AttemptedAt time.Time
	// AttemptedBy names the worker that claimed the latest attempt.
	AttemptedBy string
	// FinalizedAt is when the job reached a finished state; zero otherwise.
	FinalizedAt time.Time
	// LeaseUntil is when the running attempt's lease expires; zero unless running.
	LeaseUntil time.Time
	// ClaimToken is the fencing token of the latest claim. Every fetch changes
	// it; an outcome or lease extension carrying an older token is refused.
	ClaimToken int64
	// UniqueKey, when set, keeps a second pending job with the same key out.
	UniqueKey string
	// Errors has one entry per failed attempt, oldest first.
	Errors []AttemptError
	// Tags are free-form labels for search and display.
	Tags []string
	// Meta is a small JSON object for the application's own bookkeeping.
	Meta []byte
	// Timeout, when positive, overrides the handler timeout for this job.
	Timeout time.Duration
	// PartitionKey groups the jobs of one tenant (customer, account, API key)
	// for the queue's partition limits; empty means no partition.
	PartitionKey string
	// Result is what the handler recorded when the job completed (JSON).
	Result []byte
	// Progress is the last progress the handler reported, 0 to 100.
	Progress float64
	// CancelRequested is set when JobCancel asked a running job to stop; the
	// worker holding it learns so at its next lease extension.
	CancelRequested bool
	// WorkflowID is the ID of the first job of the workflow (or chain) this
	// job was enqueued with; 0 when it is not part of one.
	WorkflowID int64
	// DependsOn are the jobs that must finish before this one starts.
	DependsOn []int64
	// IgnoreDepFailure lets the job run when a dependency ends dead or
	// cancelled (or is deleted); otherwise the job is cancelled then.
	IgnoreDepFailure bool
	// CancelledBy is the dependency whose ending (dead or cancelled)
	// cancelled this job, while it stays cancelled so: a JobRetry of that
	// dependency revives it. 0 for a job cancelled for any other reason,
	// and for any job that is not cancelled.
	CancelledBy int64
	// ParentID is the job whose StepSpawn enqueued this one, and SpawnStep
	// the name of that step; 0 and empty for a job enqueued otherwise.
	ParentID  int64
	SpawnStep string
	// CancelWithParent makes JobCancel and JobDelete of the parent cancel
	// this job while it is pending.
	CancelWithParent bool
	// WaitsFor names the step the job waits at between attempts: a
	// StepSleep step while it is scheduled for its wake time, or the
	// StepSpawn step whose children it awaits while it is waiting. It is
	// empty in every other state.
	WaitsFor string
	// Steps are the steps the job recorded, in order (see JobStep).
	Steps []JobStep
}

// NewJob is a job to enqueue. The store validates nothing the client already
// validated, but it never stores a job with an empty Kind or Queue.
type NewJob struct {
	Kind        string
	Queue       string
	Args        []byte
	Priority    int
	MaxAttempts int
	// RunAt is the due time. A RunAt at or before the enqueue's Now makes the
	// job available at once; a later one makes it scheduled. Zero means Now.
	RunAt     time.Time
	UniqueKey string
	Tags      []string
	Meta      []byte
	Timeout   time.Duration
	// PartitionKey: see JobRow.PartitionKey.
	PartitionKey string
	// DependsOn are existing jobs this job waits for.
	DependsOn []int64
	// DependsOnIndex are earlier jobs of the same batch this job waits for,
	// by their index in the batch (each less than this job's own index, so
	// a batch can never form a cycle).
	DependsOnIndex []int
	// IgnoreDepFailure: see JobRow.IgnoreDepFailure.
	IgnoreDepFailure bool
}

// EnqueueResult says what happened to one job of an enqueue.
type EnqueueResult struct {
	// ID is the new job's ID, or the existing job's ID when Duplicate.
	ID int64
	// Duplicate reports that a pending job with the same UniqueKey existed
	// (or came earlier in the same batch), so nothing was inserted.
	Duplicate bool
	// State is the new job's state (the existing job's when Duplicate).
	State JobState
}

// ReportKind says how an attempt ended.
type ReportKind int

// The ways an attempt can end.
const (
	// ReportCompleted: the handler succeeded; the job becomes completed.
	ReportCompleted ReportKind = iota + 1
	// ReportFailed: the handler failed. The job becomes retrying at RunAt, or
	// dead when Attempt >= MaxAttempts. Error is appended to the job's errors.
	ReportFailed
	// ReportCancelled: the job becomes cancelled and is never retried. Error,
	// when set, is appended to the job's errors.
	ReportCancelled
	// ReportSnoozed: the job becomes scheduled at RunAt (available when RunAt
	// is not after Now); the attempt is not counted (Attempt is decremented).
	ReportSnoozed
	// ReportReleased: the attempt was interrupted (graceful stop); the job
	// becomes available at once, its RunAt unchanged, and the attempt is not
	// counted.
	ReportReleased
)

func (k ReportKind) String() string {
	switch k {
	case ReportCompleted:
		return "completed"
	case ReportFailed:
		return "failed"
	case ReportCancelled:
		return "cancelled"
	case ReportSnoozed:
		return "snoozed"
	case ReportReleased:
		return "released"
	}
	return fmt.Sprintf("ReportKind(%d)", int(k))
}

// Report is the end of one attempt, reported to JobFinish by the worker that
// claimed it. (sortie.Outcome is what the runtime then announces in events.)
type Report struct {
	// ID is the job.
	ID int64
	// ClaimToken must equal the job's current ClaimToken, and the job must be
	// running; otherwise the outcome is refused (the lease was lost).
	ClaimToken int64
	// Kind says how the attempt ended.
	Kind ReportKind
	// Error is recorded for ReportFailed (required) and ReportCancelled (optional).
	Error *AttemptError
	// RunAt is the next due time for ReportFailed and ReportSnoozed.
	RunAt time.Time
	// Result is recorded as the job's Result with ReportCompleted.
	Result []byte
	// Unstarted, with ReportReleased only, says the job's handler never
	// started: its claim came back after the start it reserved, or the
	// queue was paused or the worker stopped before that start. The rate
	// windows that counted the start (the queue's RateLimit and, for a job
	// with a PartitionKey, its PartitionRateLimit) give it back in the same
	// step, so that another fetch may take its room at once instead of the
	// limit leaving it unused for a period.
	Unstarted bool
}

// ReportResult says what a Report did.
type ReportResult struct {
	// Applied is false when the outcome was refused: the job is gone, no longer
	// running, or was claimed again (ClaimToken mismatch).
	Applied bool
	// State is the job's state after the outcome (only when Applied).
	State JobState
}

// LeaseRef names one claim: a job and the token its fetch returned.
type LeaseRef struct {
	ID         int64
	ClaimToken int64
}

// LeaseStatus says what a lease extension found.
type LeaseStatus struct {
	// Held is false when the lease was lost (the job was rescued, finished
	// or deleted, or claimed again): the worker should stop the handler.
	Held bool
	// CancelRequested reports that JobCancel asked the running job to stop.
	CancelRequested bool
}

// Overflow says what an enqueue into a queue at its MaxDepth does.
type Overflow int

// The overflow policies.
const (
	// OverflowReject fails the enqueue with ErrQueueFull. The default.
	OverflowReject Overflow = iota
	// OverflowDropOldest cancels the queue's oldest queued jobs (lowest ID
	// among waiting, scheduled, available and retrying) to make room, with
	// an error saying they were dropped, and counts them in QueueRow.Dropped.
	OverflowDropOldest
)

// QueueSettings are a queue's limits, shared by every process using the
// store. Zero values mean no limit.
type QueueSettings struct {
	// MaxRunning caps the running jobs of the queue across all processes.
	MaxRunning int
	// RateLimit caps the jobs started in any window of RatePeriod, across all
	// processes. RateLimit 1 makes a strict interval queue.
	RateLimit  int
	RatePeriod time.Duration
	// PartitionMaxRunning caps the running jobs of each partition key;
	// PartitionMaxRunning 1 means two jobs with one key never run at once.
	PartitionMaxRunning int
	// PartitionRateLimit caps the starts of each partition key in any window
	// of PartitionRatePeriod.
	PartitionRateLimit  int
	PartitionRatePeriod time.Duration
	// MaxDepth caps the queued (waiting, scheduled, available, retrying)
	// jobs; Overflow says what an enqueue past it does.
	MaxDepth int
	Overflow Overflow
}

// Validate reports the first invalid setting, naming the field: a negative
// value, a rate limit without its period, or an unknown Overflow.
func (s *QueueSettings) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxRunning", s.MaxRunning}, {"RateLimit", s.RateLimit}, {"PartitionMaxRunning", s.PartitionMaxRunning},
		{"PartitionRateLimit", s.PartitionRateLimit}, {"MaxDepth", s.MaxDepth},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s must not be negative, got %d", f.name, f.v)
		}
	}
	for _, f := range []struct {
		limit  string
		n      int
		period string
		d      time.Duration
	}{
		{"RateLimit", s.RateLimit, "RatePeriod", s.RatePeriod},
		{"PartitionRateLimit", s.PartitionRateLimit, "PartitionRatePeriod", s.PartitionRatePeriod},
	} {
		if f.d < 0 {
			return fmt.Errorf("%s must not be negative, got %s", f.period, f.d)
		}
		if f.n > 0 && f.d == 0 {
			return fmt.Errorf("%s is %d but %s is not set", f.limit, f.n, f.period)
		}
	}
	if s.Overflow != OverflowReject && s.Overflow != OverflowDropOldest {
		return fmt.Errorf("unknown Overflow %d (want OverflowReject or OverflowDropOldest)", s.Overflow)
	}
	return nil
}

// QueueRow is a queue's shared state.
type QueueRow struct {
	Name     string
	Paused   bool
	Settings QueueSettings
	// Dropped counts jobs dropped by OverflowDropOldest.
	Dropped int64
	// UpdatedAt is when the settings or pause state last changed; zero for
	// a queue never configured.
	UpdatedAt time.Time
}

// PeriodicRow is the persisted state of one periodic schedule.
type PeriodicRow struct {
	Name string
	// Last is the last slot (scheduled time) enqueued.
	Last      time.Time
	UpdatedAt time.Time
}

// QueueStateCount is the number of jobs of one queue in one state.
type QueueStateCount struct {
	Queue string
	State JobState
	Count int64
}
