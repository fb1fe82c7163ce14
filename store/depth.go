package store

import "fmt"

// DepthExcess returns how many queued jobs a queue holding queued jobs would
// have past its maxDepth if adding more were enqueued: 0 when they fit or
// the queue has no MaxDepth.
func DepthExcess(queued, adding int64, maxDepth int) int64 {
	if maxDepth <= 0 || adding <= 0 {
		return 0
	}
	return max(queued+adding-int64(maxDepth), 0)
}

// QueueFullError is the error of an enqueue that would take queue, holding
// queued jobs, past its maxDepth by adding jobs under OverflowReject. Every
// store returns this text; it wraps ErrQueueFull.
func QueueFullError(queue string, maxDepth int, queued, adding int64) error {
	return fmt.Errorf("queue %q is full (MaxDepth %d, %d queued, %d more enqueued): %w",
		queue, maxDepth, queued, adding, ErrQueueFull)
}

// DroppedMessage is the error recorded on a job OverflowDropOldest
// cancelled to make room in queue.
func DroppedMessage(queue string, maxDepth int) string {
	return fmt.Sprintf("dropped: queue %q is full (MaxDepth %d)", queue, maxDepth)
}
