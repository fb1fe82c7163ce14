package sqlitestore

import (
	"context"
	"fmt"

	"github.com/sortiehq/sortie/store"
)

// getForWrite reads one job in the writer, from either table.
func getForWrite(t *txn, id int64) (*store.JobRow, error) {
	j, err := scanJob(t.w.stmts.getPending.QueryRowContext(t.ctx, id))
	if errNoRows(err) {
		j, err = scanJob(t.w.stmts.getFinished.QueryRowContext(t.ctx, id))
	}
	if errNoRows(err) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read job: %w", err)
	}
	return j, nil
}

// adminOp runs op on job id in the writer as a durable request.
func (s *Store) adminOp(ctx context.Context, what string, id int64, op func(t *txn, r *request, j *store.JobRow) (*store.JobRow, error)) (*store.JobRow, error) {
	var out *store.JobRow
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		j, err := getForWrite(t, id)
		if err != nil {
			return err
		}
		out, err = op(t, r, j)
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return nil, fmt.Errorf("sqlitestore: %s job %d: %w", what, id, err)
	}
	return out, nil
}

// JobCancel cancels a waiting, scheduled, available or retrying job, moving
// it to the finished table and cancelling its waiting dependents; a running
// job gets CancelRequested. See store.Store.
func (s *Store) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobRow, error) {
	return s.adminOp(ctx, "cancel", p.ID, func(t *txn, r *request, j *store.JobRow) (*store.JobRow, error) {
		switch {
		case j.State == store.JobStateRunning:
			if _, err := t.w.stmts.cancelRequest.ExecContext(t.ctx, j.ID); err != nil {
				return nil, fmt.Errorf("request cancel: %w", err)
			}
			return getForWrite(t, j.ID)
		case j.State.Finished():
			return j, nil
		}
		if err := cancelJob(t, r, j.ID, j.Queue, j.State, p.Now, ""); err != nil {
			return nil, err
		}
		if err := depsEnded(t, r, []int64{j.ID}, store.JobStateCancelled, false, p.Now); err != nil {
			return nil, err
		}
		return getForWrite(t, j.ID)
	})
}

// JobDelete removes a job that is not running; see store.Store.
func (s *Store) JobDelete(ctx context.Context, p *store.JobDeleteParams) (*store.JobRow, error) {
	return s.adminOp(ctx, "delete", p.ID, func(t *txn, r *request, j *store.JobRow) (*store.JobRow, error) {
		st := t.w.stmts.deleteOne
		switch {
		case j.State == store.JobStateRunning:
			return nil, store.ErrJobRunning
		case j.State.Finished():
			st = t.w.stmts.deleteFinished
		}
		if _, err := st.ExecContext(t.ctx, j.ID); err != nil {
			return nil, fmt.Errorf("delete: %w", err)
		}
		r.count(j.Queue, j.State, -1)
		r.ended = append(r.ended, j.ID)
		if j.State == store.JobStateWaiting {
			if _, err := t.w.stmts.depsDeleteJob.ExecContext(t.ctx, j.ID); err != nil {
				return nil, fmt.Errorf("delete: %w", err)
			}
		}
		if err := depsEnded(t, r, []int64{j.ID}, store.JobStateCancelled, true, p.Now); err != nil {
			return nil, err
		}
		return j, nil
	})
}

// JobPrune deletes up to p.Limit finished jobs finalized before the cutoffs
// of their state; see store.Store. p.Limit must be at least 1.
func (s *Store) JobPrune(ctx context.Context, p *store.JobPruneParams) (int, error) {
	if p.Limit < 1 {
		return 0, fmt.Errorf("sqlitestore: prune: JobPruneParams.Limit must be at least 1, got %d", p.Limit)
	}
	cutoffs := [3]struct {
		state  store.JobState
		before int64
		set    bool
	}{
		{store.JobStateCompleted, micros(p.CompletedBefore), !p.CompletedBefore.IsZero()},
		{store.JobStateCancelled, micros(p.CancelledBefore), !p.CancelledBefore.IsZero()},
		{store.JobStateDead, micros(p.DeadBefore), !p.DeadBefore.IsZero()},
	}
	var n int
	r := &request{}
	r.op = func(t *txn, r *request) error {
		n = 0
		var failed []int64 // pruned dead and cancelled jobs: jobs may wait for them
		for i, c := range cutoffs {
			if !c.set || n >= p.Limit {
				continue
			}
			rows, err := t.w.stmts.prune[i].QueryContext(t.ctx, c.before, p.Limit-n)
			if err != nil {
				return fmt.Errorf("prune %s jobs: %w", c.state, err)
			}
			for rows.Next() {
				var queue string
				var id int64
				if err := rows.Scan(&queue, &id); err != nil {
					rows.Close()
					return fmt.Errorf("prune %s jobs: %w", c.state, err)
				}
				r.count(queue, c.state, -1)
				if c.state != store.JobStateCompleted {
					failed = append(failed, id)
				}
				n++
			}
			if err := rows.Close(); err != nil {
				return fmt.Errorf("prune %s jobs: %w", c.state, err)
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("prune %s jobs: %w", c.state, err)
			}
		}
		if len(failed) == 0 {
			return nil
		}
		return depsEnded(t, r, failed, store.JobStateCancelled, true, p.Now)
	}
	if err := s.do(ctx, r); err != nil {
		return 0, opErr("prune", err)
	}
	return n, nil
}
