package store

import "context"

// TxStore is a Store that can enqueue and finish jobs inside the
// application's own database transaction, so that the jobs' fate is tied to
// the application's writes. Stores that cannot (memstore, sqlitestore,
// redisstore) do not implement it; callers check with a type assertion.
type TxStore interface {
	Store

	// JobEnqueueManyTx is JobEnqueueMany inside tx: the jobs exist if and
	// only if tx commits, and their queues' watchers are notified at that
	// commit. tx is the store's transaction type (pgx.Tx for pgstore); any
	// other value returns an error naming the type it wants. The store
	// never commits or rolls back tx. An error may leave tx aborted; the
	// caller rolls it back.
	JobEnqueueManyTx(ctx context.Context, tx any, p *JobEnqueueManyParams) ([]EnqueueResult, error)

	// JobFinishTx is JobFinish inside tx: the outcomes, with the same
	// fencing, take effect if and only if tx commits. Until tx ends, the
	// finished jobs' rows stay locked by it. tx is as for JobEnqueueManyTx.
	JobFinishTx(ctx context.Context, tx any, p *JobFinishParams) ([]ReportResult, error)
}
