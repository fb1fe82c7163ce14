package sortie

import "context"

// WorkHandler runs one attempt of a job given its stored row. The innermost
// handler decodes the args and calls the registered worker.
type WorkHandler func(ctx context.Context, job *JobRow) error

// WorkMiddleware wraps a WorkHandler: for logging, tracing, metrics or
// recovering from errors. It must call next to run the job.
type WorkMiddleware func(next WorkHandler) WorkHandler

// EnqueueFunc inserts jobs into the store.
type EnqueueFunc func(ctx context.Context, jobs []*NewJob) ([]EnqueueResult, error)

// EnqueueMiddleware wraps every enqueue; it may change the jobs (add meta,
// tags) before calling next, or refuse them by returning an error.
type EnqueueMiddleware func(next EnqueueFunc) EnqueueFunc
