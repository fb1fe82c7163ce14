package sortie

import (
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
)

// JobArgs is the payload of a job. Its Kind names the worker that runs it,
// and it is stored as JSON:
//
//	type Email struct{ To string }
//	func (Email) Kind() string { return "email" }
//
// Kind must have a value receiver and return a constant.
type JobArgs interface {
	Kind() string
}

// Job is a job handed to a worker: the stored row and its decoded args.
type Job[T JobArgs] struct {
	*JobRow
	// Args is the decoded payload.
	Args T
}

// JobRow is a job as the store holds it; see store.JobRow.
type JobRow = store.JobRow

// JobState is where a job is in its life; see store.JobState.
type JobState = store.JobState

// AttemptError records one failed attempt; see store.AttemptError.
type AttemptError = store.AttemptError

// NewJob is a job on its way into the store, as enqueue middleware sees it.
type NewJob = store.NewJob

// EnqueueResult says what an enqueue did: the job's ID, and whether it was a
// duplicate of a pending unique job (then ID is the existing job's).
type EnqueueResult = store.EnqueueResult

// QueueStateCount is the number of jobs of one queue in one state.
type QueueStateCount = store.QueueStateCount

// The job states; see the state diagram in DESIGN.md.
const (
	JobStateWaiting   = store.JobStateWaiting
	JobStateScheduled = store.JobStateScheduled
	JobStateAvailable = store.JobStateAvailable
	JobStateRunning   = store.JobStateRunning
	JobStateRetrying  = store.JobStateRetrying
	JobStateCompleted = store.JobStateCompleted
	JobStateCancelled = store.JobStateCancelled
	JobStateDead      = store.JobStateDead
)

// Clock tells the time and makes timers. The runtime reads time only through
// Config.Clock, so tests can drive it with sortietest's fake clock.
type Clock = clock.Clock

// Timer is a one-shot timer made by a Clock.
type Timer = clock.Timer
