package store

import (
	"context"
	"time"
)

// FetchWaiter is a Store whose claim can wait on the server: a worker
// that finds its queue empty is handed its next job in the step that
// makes the job available, one trip after the enqueue instead of two (a
// QueueWatch signal, then a JobFetch). The Redis store has it; the others
// serve the same workers with JobFetch and QueueWatch, which give the
// same jobs in the same order a trip later.
type FetchWaiter interface {
	// JobFetchWait is JobFetch that, when it claims no job, waits for
	// one, up to wait or until NextAt if that comes sooner. The first
	// change after the call that would signal the queue's watchers
	// (QueueWatch) ends the wait: the jobs it made available are claimed
	// for the caller in the change's own step, as JobFetch would claim
	// them with p at the change's Now (its AttemptedAt and LeaseUntil
	// count from that Now), at most a few (a backlog is left to the
	// caller's next JobFetch), and returned; when it claimed none for the
	// caller (a job of another kind, a paused queue, a job scheduled for
	// later) the result is empty, and the caller fetches again. A wait
	// that times out, or whose ctx ends, returns an empty result, or the
	// jobs claimed for it meanwhile: a job claimed for the caller is
	// returned, never dropped. A caller that dies waiting leaves such
	// jobs running until their lease ends and a rescue makes them
	// available again. The store may cut a long wait short: the result is
	// then empty as after a timeout.
	JobFetchWait(ctx context.Context, p *JobFetchParams, wait time.Duration) (*JobFetchResult, error)
}
