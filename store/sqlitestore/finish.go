package sqlitestore

import (
	"context"
	"fmt"

	"github.com/sortiehq/sortie/store"
)

// JobFinish applies the outcomes of finished attempts in one transaction,
// fenced by ClaimToken. Completions move their jobs to the finished table
// with two statements for the whole batch.
func (s *Store) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	results := make([]store.ReportResult, len(p.Reports))
	if len(p.Reports) == 0 {
		return results, nil
	}
	ids := make([]int64, len(p.Reports))
	for i, o := range p.Reports {
		if o == nil {
			return nil, fmt.Errorf("sqlitestore: finish: outcome %d of %d is nil", i, len(p.Reports))
		}
		switch o.Kind {
		case store.ReportCompleted, store.ReportFailed, store.ReportCancelled, store.ReportSnoozed, store.ReportReleased:
		default:
			return nil, fmt.Errorf("sqlitestore: finish: outcome %d of %d (job %d) has unknown kind %v", i, len(p.Reports), o.ID, o.Kind)
		}
		ids[i] = o.ID
	}
	idList := string(appendIDs(nil, ids))
	r := &request{}
	r.op = func(t *txn, r *request) error { return finish(t, r, p, idList, results) }
	if err := s.do(ctx, r); err != nil {
		return nil, opErr("finish", err)
	}
	return results, nil
}

// runningJob is what the writer needs to know of a running job to apply an
// outcome or rescue it.
type runningJob struct {
	queue       string
	token       int64
	attempt     int
	maxAttempts int
	used        bool
}

// finish runs in the writer.
func finish(t *txn, r *request, p *store.JobFinishParams, idList string, results []store.ReportResult) error {
	st := t.w.stmts
	rows, err := st.runningOf.QueryContext(t.ctx, idList)
	if err != nil {
		return fmt.Errorf("read running jobs: %w", err)
	}
	running := make(map[int64]*runningJob, len(p.Reports))
	for rows.Next() {
		var id int64
		j := &runningJob{}
		if err := rows.Scan(&id, &j.queue, &j.token, &j.attempt, &j.maxAttempts); err != nil {
			rows.Close()
			return fmt.Errorf("read running jobs: %w", err)
		}
		running[id] = j
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("read running jobs: %w", err)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read running jobs: %w", err)
	}

	now := micros(p.Now)
	var completed []int64
	var limited map[string]bool // queues whose limits a finished attempt frees
	for i, o := range p.Reports {
		j := running[o.ID]
		if j == nil || j.used || j.token != o.ClaimToken {
			results[i] = store.ReportResult{}
			continue
		}
		j.used = true
		var state store.JobState
		switch o.Kind {
		case store.ReportCompleted:
			state = store.JobStateCompleted
			completed = append(completed, o.ID)
			if o.Result != nil {
				if _, err := st.setResult.ExecContext(t.ctx, o.ID, bytesArg(o.Result)); err != nil {
					return fmt.Errorf("record result of job %d: %w", o.ID, err)
				}
			}
		case store.ReportFailed:
			e := attemptError(o.Error, j.attempt, p)
			if j.attempt >= j.maxAttempts {
				state = store.JobStateDead
				err = finishOne(t, o.ID, state, now, e)
			} else {
				state = store.JobStateRetrying
				runAt := o.RunAt
				if runAt.IsZero() {
					runAt = p.Now
				}
				err = moveOne(t, o.ID, state, micros(runAt), 0, e)
				r.wake(j.queue)
			}
		case store.ReportCancelled:
			state = store.JobStateCancelled
			var e *store.AttemptError
			if o.Error != nil {
				e = attemptError(o.Error, j.attempt, p)
			}
			err = finishOne(t, o.ID, state, now, e)
		case store.ReportSnoozed:
			state = store.JobStateAvailable
			runAt := o.RunAt
			if runAt.IsZero() {
				runAt = p.Now
			}
			if runAt.After(p.Now) {
				state = store.JobStateScheduled
			}
			err = moveOne(t, o.ID, state, micros(runAt), -1, nil)
			r.wake(j.queue)
		case store.ReportReleased:
			state = store.JobStateAvailable
			err = moveOne(t, o.ID, state, nil, -1, nil)
			r.wake(j.queue)
		}
		if err != nil {
			return err
		}
		if state == store.JobStateDead || state == store.JobStateCancelled {
			r.ended = append(r.ended, o.ID)
			if err := depsEnded(t, r, []int64{o.ID}, state, false, p.Now); err != nil {
				return err
			}
		}
		results[i] = store.ReportResult{Applied: true, State: state}
		r.count(j.queue, store.JobStateRunning, -1)
		r.count(j.queue, state, 1)
		if !limited[j.queue] {
			qs, err := t.queue(j.queue)
			if err != nil {
				return err
			}
			if qs != nil && (qs.s.MaxRunning > 0 || qs.s.PartitionMaxRunning > 0) {
				if limited == nil {
					limited = make(map[string]bool)
				}
				limited[j.queue] = true
				r.wake(j.queue)
			}
		}
	}
	if len(completed) > 0 {
		list := t.idList(completed)
		if _, err := st.completeMany.ExecContext(t.ctx, list, now); err != nil {
			return fmt.Errorf("complete jobs: %w", err)
		}
		if _, err := st.deleteMany.ExecContext(t.ctx, list); err != nil {
			return fmt.Errorf("complete jobs: %w", err)
		}
		r.ended = append(r.ended, completed...)
		if err := depsEnded(t, r, completed, store.JobStateCompleted, false, p.Now); err != nil {
			return err
		}
	}
	return nil
}

// attemptError returns the error to record for an attempt, filling in what
// the worker left out.
func attemptError(e *store.AttemptError, attempt int, p *store.JobFinishParams) *store.AttemptError {
	v := store.FillAttemptError(e, attempt, p.Now)
	return &v
}

// finishOne moves one job to finished_jobs in state, appending e when set.
func finishOne(t *txn, id int64, state store.JobState, finalizedAt int64, e *store.AttemptError) error {
	errArg, err := optErrorArg(e)
	if err != nil {
		return err
	}
	if _, err := t.w.stmts.finishOne.ExecContext(t.ctx, id, string(state), finalizedAt, errArg); err != nil {
		return fmt.Errorf("finish job %d: %w", id, err)
	}
	if _, err := t.w.stmts.deleteOne.ExecContext(t.ctx, id); err != nil {
		return fmt.Errorf("finish job %d: %w", id, err)
	}
	return nil
}

// moveOne changes one job to a pending state: runAt (micros, or nil to
// keep), attempt delta, and e appended when set. The lease is cleared.
func moveOne(t *txn, id int64, state store.JobState, runAt any, attemptDelta int, e *store.AttemptError) error {
	errArg, err := optErrorArg(e)
	if err != nil {
		return err
	}
	if _, err := t.w.stmts.moveOne.ExecContext(t.ctx, id, string(state), runAt, attemptDelta, errArg); err != nil {
		return fmt.Errorf("move job %d to %s: %w", id, state, err)
	}
	return nil
}

func optErrorArg(e *store.AttemptError) (any, error) {
	if e == nil {
		return nil, nil
	}
	return errorArg(e)
}

// LeaseExtend extends the leases of running jobs whose ClaimToken still
// matches to p.Now + p.Lease, and reports a JobCancel of each.
func (s *Store) LeaseExtend(ctx context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error) {
	out := make([]store.LeaseStatus, len(p.Leases))
	if len(p.Leases) == 0 {
		return out, nil
	}
	until := micros(p.Now.Add(p.Lease))
	r := &request{}
	r.op = func(t *txn, r *request) error {
		for i, l := range p.Leases {
			var cancel bool
			err := t.w.stmts.leaseExtend.QueryRowContext(t.ctx, l.ID, l.ClaimToken, until).Scan(&cancel)
			switch {
			case err == nil:
				out[i] = store.LeaseStatus{Held: true, CancelRequested: cancel}
			case errNoRows(err):
				out[i] = store.LeaseStatus{}
			default:
				return fmt.Errorf("extend lease of job %d: %w", l.ID, err)
			}
		}
		return nil
	}
	if err := s.do(ctx, r); err != nil {
		return nil, opErr("extend leases", err)
	}
	return out, nil
}

// JobProgress records the progress of running jobs whose ClaimToken still
// matches and reports, in order, whether each claim is held.
func (s *Store) JobProgress(ctx context.Context, p *store.JobProgressParams) ([]bool, error) {
	held := make([]bool, len(p.Updates))
	if len(p.Updates) == 0 {
		return held, nil
	}
	r := &request{}
	r.op = func(t *txn, r *request) error {
		for i, u := range p.Updates {
			res, err := t.w.stmts.progress.ExecContext(t.ctx, u.ID, u.ClaimToken, u.Progress)
			if err != nil {
				return fmt.Errorf("record progress of job %d: %w", u.ID, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("record progress of job %d: %w", u.ID, err)
			}
			held[i] = n == 1
		}
		return nil
	}
	if err := s.do(ctx, r); err != nil {
		return nil, opErr("record progress", err)
	}
	return held, nil
}

// JobRescue makes up to p.Limit running jobs whose lease expired before
// p.Now available again (or dead when out of attempts), recording
// store.LeaseLostMessage. p.Limit must be at least 1.
func (s *Store) JobRescue(ctx context.Context, p *store.JobRescueParams) (int, error) {
	if p.Limit < 1 {
		return 0, fmt.Errorf("sqlitestore: rescue: JobRescueParams.Limit must be at least 1, got %d", p.Limit)
	}
	var n int
	r := &request{}
	r.op = func(t *txn, r *request) error {
		var err error
		n, err = rescue(t, r, p)
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return 0, opErr("rescue", err)
	}
	return n, nil
}

// rescue runs in the writer.
func rescue(t *txn, r *request, p *store.JobRescueParams) (int, error) {
	now := micros(p.Now)
	rows, err := t.w.stmts.expired.QueryContext(t.ctx, now, p.Limit)
	if err != nil {
		return 0, fmt.Errorf("find expired leases: %w", err)
	}
	type expired struct {
		id int64
		runningJob
		cancelRequested bool
	}
	var jobs []expired
	for rows.Next() {
		var e expired
		if err := rows.Scan(&e.id, &e.queue, &e.attempt, &e.maxAttempts, &e.cancelRequested); err != nil {
			rows.Close()
			return 0, fmt.Errorf("find expired leases: %w", err)
		}
		jobs = append(jobs, e)
	}
	if err := rows.Close(); err != nil {
		return 0, fmt.Errorf("find expired leases: %w", err)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("find expired leases: %w", err)
	}
	for _, j := range jobs {
		e := &store.AttemptError{Attempt: j.attempt, At: p.Now, Message: store.LeaseLostMessage}
		state := store.JobStateAvailable
		switch {
		case j.cancelRequested:
			state = store.JobStateCancelled
		case j.attempt >= j.maxAttempts:
			state = store.JobStateDead
		}
		if state != store.JobStateAvailable {
			err = finishOne(t, j.id, state, now, e)
			if err == nil {
				r.ended = append(r.ended, j.id)
				err = depsEnded(t, r, []int64{j.id}, state, false, p.Now)
			}
		} else {
			err = moveOne(t, j.id, state, nil, 0, e)
			r.wake(j.queue)
		}
		if err != nil {
			return 0, err
		}
		r.count(j.queue, store.JobStateRunning, -1)
		r.count(j.queue, state, 1)
	}
	return len(jobs), nil
}
