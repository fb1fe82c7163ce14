package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
)

// Tx returns tx, a transaction on the Store's database (from
// pgxpool.Pool.Begin or pgx.Conn.Begin; it may come from the application's
// own pool), as a store.Tx for Client.EnqueueTx, Client.EnqueueManyTx and
// sortie.CompleteTx:
//
//	tx, err := pool.Begin(ctx)
//	...
//	res, err := client.EnqueueTx(ctx, st.Tx(tx), ShipOrder{ID: id}, nil)
//	...
//	err = tx.Commit(ctx)
//
// The Store never commits or rolls back tx.
func (s *Store) Tx(tx pgx.Tx) store.Tx { return &appTx{s: s, tx: tx} }

// appTx is the store.Tx of Store.Tx.
type appTx struct {
	s  *Store
	tx pgx.Tx
}

func (t *appTx) Store() store.Store { return t.s }

func (t *appTx) JobEnqueueMany(ctx context.Context, p *store.JobEnqueueManyParams) ([]store.EnqueueResult, error) {
	return t.s.jobEnqueueManyTx(ctx, t.tx, p)
}

func (t *appTx) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	return t.s.jobFinishTx(ctx, t.tx, p)
}

// uniqueRaceRetries is how many times jobEnqueueManyTx runs a batch with
// unique keys again after a concurrent enqueue took one of its keys.
const uniqueRaceRetries = 3

// jobEnqueueManyTx is JobEnqueueMany inside tx. The jobs exist if and only if
// tx commits, and workers are notified at that commit, so none wakes for a
// job that was rolled back. The Store never commits or rolls back tx.
//
// It costs the round trips of the careful path of JobEnqueueMany (locks,
// IDs, insert, notify) on tx's connection. A batch with unique keys runs
// in a savepoint: when a concurrent transaction commits a job with one of
// its keys first, the batch is run again from the savepoint and that job
// reported as the holder, so the batch stays atomic. An uncommitted job
// holding a key makes another enqueue of that key wait until its
// transaction ends. After any other error, tx may be aborted: roll it back.
func (s *Store) jobEnqueueManyTx(ctx context.Context, ptx pgx.Tx, p *store.JobEnqueueManyParams) ([]store.EnqueueResult, error) {
	if ptx == nil {
		return nil, errNilTx
	}
	if len(p.Jobs) == 0 {
		return []store.EnqueueResult{}, nil
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	b, err := newBatch(p)
	if err != nil {
		return nil, s.opErr("enqueue in transaction", err)
	}
	if !b.unique {
		if err := s.enqueueTx(ctx, ptx, b); err != nil {
			return nil, s.opErr("enqueue in transaction", err)
		}
		return b.results, nil
	}
	for range uniqueRaceRetries + 1 {
		err = s.enqueueSavepoint(ctx, ptx, b)
		if !errors.Is(err, errUniqueRace) {
			break
		}
	}
	if errors.Is(err, errUniqueRace) {
		return nil, fmt.Errorf("pgstore: enqueue in transaction: unique keys kept changing hands; the transaction is unchanged, retry it: %w", err)
	}
	if err != nil {
		return nil, s.opErr("enqueue in transaction", err)
	}
	return b.results, nil
}

// enqueueSavepoint runs enqueueTx in a savepoint of tx, rolled back to on
// error, so a batch that lost a unique-key race leaves none of its jobs
// behind.
func (s *Store) enqueueSavepoint(ctx context.Context, tx pgx.Tx, b *batch) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := s.enqueueTx(ctx, sp, b); err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return fmt.Errorf("%w (and rolling back to the savepoint: %v)", err, rerr)
		}
		return err
	}
	if err := sp.Commit(ctx); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

// jobFinishTx is JobFinish inside tx: the outcomes take effect, fenced by claim token as in
// JobFinish, if and only if tx commits, together with what they do to
// dependents. Until tx ends the finished jobs' rows stay locked, so the
// worker's heartbeats and a concurrent JobFinish of those jobs wait for it;
// commit soon after. JobWait calls of this process are not woken by these
// finishes (the Store cannot see the commit): they notice by polling.
func (s *Store) jobFinishTx(ctx context.Context, ptx pgx.Tx, p *store.JobFinishParams) ([]store.ReportResult, error) {
	if ptx == nil {
		return nil, errNilTx
	}
	results := make([]store.ReportResult, len(p.Reports))
	if len(p.Reports) == 0 {
		return results, nil
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	a, err := outcomesArgs(p)
	if err != nil {
		return nil, fmt.Errorf("pgstore: finish in transaction: %w", err)
	}
	done, err := s.finishTx(ctx, ptx, a, p.Now)
	if err != nil {
		return nil, s.opErr("finish in transaction", err)
	}
	applyResults(results, a, done)
	return results, nil
}

// errNilTx is the error of a Tx made from a nil pgx.Tx.
var errNilTx = fmt.Errorf("pgstore: Store.Tx was given a nil pgx.Tx: %w", store.ErrInvalidArgument)
