package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/transition"
)

// JobFinish applies the outcomes of finished attempts in one transaction,
// fenced by ClaimToken. Completions move their jobs to the finished table
// with two statements for the whole batch.
func (s *Store) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	results := make([]store.ReportResult, len(p.Reports))
	if len(p.Reports) == 0 {
		return results, nil
	}
	if err := store.ValidateReports(p.Reports); err != nil {
		return nil, fmt.Errorf("sqlitestore: finish: %w", err)
	}
	ids := make([]int64, len(p.Reports))
	for i, o := range p.Reports {
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
	running, err := readRunning(t, idList, len(p.Reports))
	if err != nil {
		return err
	}
	var completed []int64
	var limited map[string]bool // queues whose limits a finished attempt frees
	for i, o := range p.Reports {
		j := running[o.ID]
		if j == nil || j.used || j.token != o.ClaimToken {
			results[i] = store.ReportResult{}
			continue
		}
		j.used = true
		if o.Unstarted {
			if err := giveBackStart(t, o.ID, j.queue, p.Now); err != nil {
				return err
			}
		}
		step := transition.Next(o, j.attempt, j.maxAttempts, p.Now)
		if step.State == store.JobStateCompleted {
			completed = append(completed, o.ID)
			err = recordResult(t, o.ID, step.Result)
		} else {
			err = applyStep(t, r, o.ID, j.queue, step, p.Now)
		}
		if err != nil {
			return err
		}
		results[i] = store.ReportResult{Applied: true, State: step.State}
		r.count(j.queue, store.JobStateRunning, -1)
		r.count(j.queue, step.State, 1)
		r.counted(j.queue, p.Now, step.State, o.Kind == store.ReportFailed)
		if limited, err = wakeLimited(t, r, j.queue, limited); err != nil {
			return err
		}
	}
	return completeAll(t, r, completed, p.Now)
}

// readRunning returns the running jobs among idList, by ID.
func readRunning(t *txn, idList string, n int) (map[int64]*runningJob, error) {
	rows, err := t.w.stmts.runningOf.QueryContext(t.ctx, idList)
	if err != nil {
		return nil, fmt.Errorf("read running jobs: %w", err)
	}
	defer rows.Close()
	running := make(map[int64]*runningJob, n)
	for rows.Next() {
		var id int64
		j := &runningJob{}
		if err := rows.Scan(&id, &j.queue, &j.token, &j.attempt, &j.maxAttempts); err != nil {
			return nil, fmt.Errorf("read running jobs: %w", err)
		}
		running[id] = j
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read running jobs: %w", err)
	}
	return running, nil
}

// recordResult records the result of a job about to complete.
func recordResult(t *txn, id int64, result []byte) error {
	if result == nil {
		return nil
	}
	if _, err := t.w.stmts.setResult.ExecContext(t.ctx, id, bytesArg(result)); err != nil {
		return fmt.Errorf("record result of job %d: %w", id, err)
	}
	return nil
}

// applyStep moves running job id of queue by step (any state but
// completed, which completeAll applies to a batch).
func applyStep(t *txn, r *request, id int64, queue string, step transition.Step, now time.Time) error {
	if step.Finalized() {
		if err := finishOne(t, id, step.State, micros(now), step.Error); err != nil {
			return err
		}
		r.ended = append(r.ended, id)
		return depsEnded(t, r, []int64{id}, step.State, false, now)
	}
	var runAt any
	if !step.RunAt.IsZero() {
		runAt = micros(step.RunAt)
	}
	delta := 0
	if step.Uncount {
		delta = -1
	}
	r.wake(queue)
	return moveOne(t, id, step.State, runAt, delta, step.Error)
}

// wakeLimited wakes queue, once per call (limited holds the queues done),
// when it has running limits: a finished attempt frees a slot.
func wakeLimited(t *txn, r *request, queue string, limited map[string]bool) (map[string]bool, error) {
	if limited[queue] {
		return limited, nil
	}
	qs, err := t.queue(queue)
	if err != nil {
		return nil, err
	}
	if qs != nil && (qs.s.MaxRunning > 0 || qs.s.PartitionMaxRunning > 0) {
		if limited == nil {
			limited = make(map[string]bool)
		}
		limited[queue] = true
		r.wake(queue)
	}
	return limited, nil
}

// completeAll moves the completed jobs to the finished table with two
// statements and settles their dependents.
func completeAll(t *txn, r *request, completed []int64, now time.Time) error {
	if len(completed) == 0 {
		return nil
	}
	list := t.idList(completed)
	if _, err := t.w.stmts.completeMany.ExecContext(t.ctx, list, micros(now)); err != nil {
		return fmt.Errorf("complete jobs: %w", err)
	}
	if _, err := t.w.stmts.deleteMany.ExecContext(t.ctx, list); err != nil {
		return fmt.Errorf("complete jobs: %w", err)
	}
	r.ended = append(r.ended, completed...)
	return depsEnded(t, r, completed, store.JobStateCompleted, false, now)
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
// matches to p.Now + p.Lease, records their progress, and reports a
// JobCancel of each.
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
			var progress any
			if pr, ok := p.Progress[l]; ok {
				progress = pr
			}
			err := t.w.stmts.leaseExtend.QueryRowContext(t.ctx, l.ID, l.ClaimToken, until, progress).Scan(&cancel)
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

// JobRescue makes up to p.Limit running jobs whose lease expired before
// p.Now available again (or dead when out of attempts), recording
// store.LeaseLostMessage. p.Limit must be at least 1.
func (s *Store) JobRescue(ctx context.Context, p *store.JobRescueParams) (int, error) {
	if err := store.ValidateLimit("JobRescueParams", p.Limit); err != nil {
		return 0, err
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
		e := transition.RescueError(j.attempt, p.Now)
		state := transition.RescueState(j.attempt, j.maxAttempts, j.cancelRequested)
		if err := applyStep(t, r, j.id, j.queue, transition.Step{State: state, Error: &e}, p.Now); err != nil {
			return 0, err
		}
		r.count(j.queue, store.JobStateRunning, -1)
		r.count(j.queue, state, 1)
		r.counted(j.queue, p.Now, state, true)
	}
	return len(jobs), nil
}
