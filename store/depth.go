package store

import "fmt"

// QueueFullError is the error of an enqueue that would take queue, holding
// queued jobs, past its maxDepth by adding jobs under OverflowReject. Every
// store returns this text; it wraps ErrQueueFull.
func QueueFullError(queue string, maxDepth int, queued, adding int64) error {
	return &queueFullError{queue: queue, maxDepth: maxDepth, queued: queued, adding: adding}
}

// queueFullError says once that a queue is full, with the figures, and
// matches ErrQueueFull with errors.Is.
type queueFullError struct {
	queue          string
	maxDepth       int
	queued, adding int64
}

func (e *queueFullError) Error() string {
	return fmt.Sprintf("sortie: queue %q is full: it holds at most %d queued jobs, has %d and was given %d more",
		e.queue, e.maxDepth, e.queued, e.adding)
}

func (e *queueFullError) Unwrap() error { return ErrQueueFull }

// DroppedMessage is the error recorded on a job OverflowDropOldest
// cancelled to make room in queue.
func DroppedMessage(queue string, maxDepth int) string {
	return fmt.Sprintf("dropped: queue %q is full: it holds at most %d queued jobs", queue, maxDepth)
}
