package store

import "context"

// Tx is the application's own database transaction, bound to the store that
// made it, for enqueueing and finishing jobs whose fate is tied to the
// application's writes. A store that can work inside the application's
// transaction has a method that makes one from its driver's transaction
// type (pgstore's Store.Tx takes a pgx.Tx), so a transaction of another
// type does not compile; stores that cannot (memstore, sqlitestore,
// redisstore) have no such method.
type Tx interface {
	// Store returns the store that made the Tx. A client refuses a Tx made
	// by a store other than its own.
	Store() Store

	// JobEnqueueMany is Store.JobEnqueueMany inside the transaction: the
	// jobs exist if and only if it commits, and their queues' watchers are
	// notified at that commit. The store never commits or rolls back the
	// transaction. An error may leave it aborted; the caller rolls it back.
	JobEnqueueMany(ctx context.Context, p *JobEnqueueManyParams) ([]EnqueueResult, error)

	// JobFinish is Store.JobFinish inside the transaction: the outcomes,
	// with the same fencing, take effect if and only if it commits. Until
	// it ends, the finished jobs' rows stay locked by it.
	JobFinish(ctx context.Context, p *JobFinishParams) ([]ReportResult, error)
}
