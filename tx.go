package sortie

import (
	"context"
	"fmt"

	"github.com/sortiehq/sortie/store"
)

// Tx is the application's own database transaction, made by the store it
// belongs to: pgstore's Store.Tx takes a pgx.Tx. The other stores cannot
// work inside the application's transaction and make none.
type Tx = store.Tx

// EnqueueTx inserts one job inside tx, the application's own database
// transaction: the job exists if and only if tx commits, so it is never
// enqueued for work that rolled back, nor lost for work that committed.
// Workers are woken at the commit. The client never commits or rolls back
// tx; after an error, roll it back.
//
// tx comes from the client's store: st.Tx(pgxTx) for a pgstore st (the
// application's pool and the store may share one *pgxpool.Pool, see
// pgstore.New); a Tx of another store is refused. Options, defaults,
// validation, unique keys and enqueue middleware are as for Enqueue; the
// enqueued event is published when the insert succeeds, before tx
// commits.
func (c *Client) EnqueueTx(ctx context.Context, tx Tx, args JobArgs, opts *EnqueueOpts) (EnqueueResult, error) {
	res, err := c.EnqueueManyTx(ctx, tx, []EnqueueParams{{Args: args, Opts: opts}})
	if err != nil {
		return EnqueueResult{}, err
	}
	return res[0], nil
}

// EnqueueManyTx is EnqueueMany inside tx, as for EnqueueTx: the jobs exist
// if and only if tx commits. It returns one result per job, in order.
func (c *Client) EnqueueManyTx(ctx context.Context, tx Tx, jobs []EnqueueParams) ([]EnqueueResult, error) {
	if err := c.checkTx("EnqueueTx", tx); err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, invalidf("EnqueueManyTx: no jobs")
	}
	return c.EnqueueMany(context.WithValue(ctx, txKey{}, txValue{tx}), jobs)
}

// checkTx refuses a nil tx, or one made by a store other than the
// client's, for the method op.
func (c *Client) checkTx(op string, tx Tx) error {
	if tx == nil {
		return invalidf("%s: tx is nil", op)
	}
	if tx.Store() != c.store {
		return invalidf("%s: tx was made by store %T, not by the client's store %T", op, tx.Store(), c.store)
	}
	return nil
}

// CompleteTx completes the running job inside tx, the application's own
// database transaction, so the job's completion commits or rolls back with
// the application's work: exactly-once effects for work that lives in the
// same database. Call it from the job's handler, with the handler's ctx,
// as the last step before committing tx: until tx ends, the job's row is
// locked by it, and from the call on the job's lease is no longer extended,
// so the handler should return soon after tx ends. The result recorded by
// SetResult before the call is stored with the completion.
//
// When tx commits, the job is completed and what the handler returns
// afterwards no longer changes it: the runtime reports the job as
// completed (an error returned after the commit is logged at debug level).
// When tx rolls back, the job is still running, and the runtime records
// what the handler returns as usual: return nil to complete it, or the
// error of the failed commit to retry it.
//
// tx is as for EnqueueTx. It returns ErrNotInJob outside a handler, and an
// error when the job's claim is no longer held (its lease was lost and it
// was rescued); then tx must not commit the work.
func CompleteTx[T JobArgs](ctx context.Context, tx Tx, job *Job[T]) error {
	rj := runningJobFrom(ctx)
	if rj == nil {
		return ErrNotInJob
	}
	if job == nil || job.JobRow == nil {
		return invalidf("CompleteTx: job is nil")
	}
	row := rj.row
	if job.ID != row.ID {
		return invalidf("CompleteTx: job %d is not the job %d whose handler got ctx", job.ID, row.ID)
	}
	c := rj.c
	if err := c.checkTx("CompleteTx", tx); err != nil {
		return err
	}
	rj.mu.Lock()
	result := rj.result
	rj.mu.Unlock()
	res, err := tx.JobFinish(ctx, &store.JobFinishParams{
		Reports: []*store.Report{{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportCompleted, Result: result}},
		Now:     c.clock.Now(),
	})
	if err != nil {
		return fmt.Errorf("sortie: complete job %d in transaction: %w", row.ID, err)
	}
	if !res[0].Applied {
		return fmt.Errorf("sortie: complete job %d in transaction: %w (the job is no longer running under this attempt's claim)", row.ID, errLeaseLost)
	}
	rj.mu.Lock()
	rj.completedInTx = true
	rj.mu.Unlock()
	return nil
}

// InTx reports whether CompleteTx completed the job inside a transaction.
// The runtime cannot see whether that transaction committed: a job so
// marked is no longer heartbeated (its row is locked until the transaction
// ends), and a refused outcome of it is checked against the store.
func (rj *runningJob) InTx() bool {
	rj.mu.Lock()
	defer rj.mu.Unlock()
	return rj.completedInTx
}
