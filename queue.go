package sortie

import "github.com/sortiehq/sortie/store"

// QueueSettings are a queue's limits, shared by every process using the
// store; see store.QueueSettings. Zero values mean no limit.
type QueueSettings = store.QueueSettings

// QueueRow is a queue's shared state: pause, settings, dropped jobs.
type QueueRow = store.QueueRow

// Overflow says what an enqueue into a full queue (MaxDepth) does.
type Overflow = store.Overflow

// The overflow policies of QueueSettings.Overflow.
const (
	// OverflowReject fails the enqueue with ErrQueueFull. The default.
	OverflowReject = store.OverflowReject
	// OverflowDropOldest cancels the oldest queued jobs to make room.
	OverflowDropOldest = store.OverflowDropOldest
)

// ErrQueueFull: the queue is at its MaxDepth and rejects new jobs.
var ErrQueueFull = store.ErrQueueFull

// validateQueueSettings checks settings, naming what in the error.
func validateQueueSettings(what string, s *QueueSettings) error {
	if err := s.Validate(); err != nil {
		return invalidf("%s: %v", what, err)
	}
	return nil
}
