package sortie

import (
	"sync"
	"time"
)

// EventKind says what happened to a job.
type EventKind int

// The kinds of event.
const (
	// EventJobEnqueued: a job was inserted (duplicates produce no event).
	EventJobEnqueued EventKind = iota + 1
	// EventJobStarted: a worker started an attempt.
	EventJobStarted
	// EventJobFinished: an attempt ended; Event.Outcome says how.
	EventJobFinished
)

func (k EventKind) String() string {
	switch k {
	case EventJobEnqueued:
		return "enqueued"
	case EventJobStarted:
		return "started"
	case EventJobFinished:
		return "finished"
	}
	return "unknown"
}

// Outcome is how an attempt ended, as reported in events.
type Outcome string

// The outcomes of an attempt.
const (
	// OutcomeCompleted: the handler returned nil.
	OutcomeCompleted Outcome = "completed"
	// OutcomeRetrying: the handler failed and the job will be retried.
	OutcomeRetrying Outcome = "retrying"
	// OutcomeDead: the handler failed on the last attempt.
	OutcomeDead Outcome = "dead"
	// OutcomeCancelled: the handler returned Cancel.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeSnoozed: the handler returned Snooze.
	OutcomeSnoozed Outcome = "snoozed"
	// OutcomeReleased: the attempt was interrupted by Stop and the job put
	// back without counting it.
	OutcomeReleased Outcome = "released"
)

// Event reports something that happened to a job.
type Event struct {
	Kind EventKind
	// Job is the job's row as the client saw it at the event. Treat it as
	// read-only.
	Job *JobRow
	// Outcome is set for EventJobFinished.
	Outcome Outcome
	// Err is the handler's error, for finished attempts that failed.
	Err error
	// Duration is how long the attempt ran, for EventJobFinished.
	Duration time.Duration
	// At is when the event happened.
	At time.Time
}

// eventBus delivers events to subscribers synchronously.
type eventBus struct {
	mu   sync.RWMutex
	next int
	subs map[int]func(*Event)
}

// subscribe adds fn and returns a function removing it.
func (b *eventBus) subscribe(fn func(*Event)) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil {
		b.subs = make(map[int]func(*Event))
	}
	id := b.next
	b.next++
	b.subs[id] = fn
	return func() {
		b.mu.Lock()
		delete(b.subs, id)
		b.mu.Unlock()
	}
}

func (b *eventBus) active() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.subs) > 0
}

func (b *eventBus) publish(e *Event) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, fn := range b.subs {
		fn(e)
	}
}

// publishEnqueued publishes EventJobEnqueued for each job of jobs that the
// store inserted (res[i] for jobs[i]; duplicates have no event), its row as
// the store holds it right after the insert. Every enqueue path publishes
// through it, so the events carry the same fields whatever the path.
func (b *eventBus) publishEnqueued(now time.Time, jobs []*NewJob, res []EnqueueResult) {
	if !b.active() {
		return
	}
	for i, r := range res {
		if r.Duplicate || i >= len(jobs) {
			continue
		}
		j := jobs[i]
		b.publish(&Event{Kind: EventJobEnqueued, At: now, Job: &JobRow{
			ID: r.ID, Kind: j.Kind, Queue: j.Queue, Args: j.Args, State: r.State,
			Priority: j.Priority, MaxAttempts: j.MaxAttempts, RunAt: j.RunAt, CreatedAt: now,
			UniqueKey: j.UniqueKey, Tags: j.Tags, Meta: j.Meta, Timeout: j.Timeout,
			PartitionKey: j.PartitionKey, DependsOn: j.DependsOn, IgnoreDepFailure: j.IgnoreDepFailure,
		}})
	}
}
