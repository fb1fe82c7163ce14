package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

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

// An action is what JobRetry, JobCancel or JobDelete does, written once
// for a group of jobs read in the writer (actTargets): one job, or jobs of
// a JobActMany batch that stand alone (standAlone), which it moves with
// one statement per table and kind of move. It returns per job nil or the
// job's refusal (store.ErrJobRunning, store.ErrUniqueConflict), for which
// it writes nothing, and an error for anything else. alone says the jobs
// stand alone: no job was cancelled because of one of them, so a retry
// looks for none to revive.
type action func(t *txn, r *request, jobs []*store.JobRow, now time.Time, alone bool) ([]error, error)

// actions are the actions of JobActMany, by name.
var actions = map[store.JobAction]action{
	store.ActionRetry:  actRetry,
	store.ActionCancel: actCancel,
	store.ActionDelete: actDelete,
}

// actTargets reads in the writer what the actions look at of the jobs
// ids: their ID, State, Queue, UniqueKey, DependsOn and IgnoreDepFailure,
// by ID. A job that does not exist is left out.
func actTargets(t *txn, ids []int64) (map[int64]*store.JobRow, error) {
	rows, err := t.w.stmts.actTargets.QueryContext(t.ctx, t.idList(ids))
	if err != nil {
		return nil, fmt.Errorf("read jobs: %w", err)
	}
	defer rows.Close()
	out := make(map[int64]*store.JobRow, len(ids))
	for rows.Next() {
		j := &store.JobRow{}
		var state string
		var key, deps sql.NullString
		if err := rows.Scan(&j.ID, &state, &j.Queue, &key, &deps, &j.IgnoreDepFailure); err != nil {
			return nil, fmt.Errorf("read jobs: %w", err)
		}
		j.State, j.UniqueKey = store.JobState(state), key.String
		if j.DependsOn, err = decodeDeps(j.ID, deps); err != nil {
			return nil, err
		}
		out[j.ID] = j
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read jobs: %w", err)
	}
	return out, nil
}

// standAlone reads the jobs ids (a JobActMany batch) and returns, by ID,
// those that stand alone: listed once, without a unique key or
// dependencies, no job waiting for them and none cancelled because of
// them. Such a job's action reads and writes nothing but its own row, and
// no other job's action changes it: acting on it before or after the
// other jobs of the batch comes to the same, so JobActMany acts on runs of
// them at once. The IDs whose jobs do not stand alone (or do not exist)
// are left out.
func standAlone(t *txn, ids []int64) (map[int64]*store.JobRow, error) {
	jobs, err := actTargets(t, ids)
	if err != nil {
		return nil, err
	}
	seen := make(map[int64]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			delete(jobs, id)
		}
		seen[id] = true
	}
	for id, j := range jobs {
		if j.UniqueKey != "" || len(j.DependsOn) > 0 {
			delete(jobs, id)
		}
	}
	if err := t.loadSequences(); err != nil {
		return nil, err
	}
	if t.hasDeps {
		if err := dropListed(t, t.w.stmts.dependedOn, ids, jobs); err != nil {
			return nil, err
		}
	}
	if t.spawned {
		// A parent or a child acts on jobs beyond its row.
		if err := dropListed(t, t.w.stmts.steps.linked, ids, jobs); err != nil {
			return nil, err
		}
	}
	if some, err := anyCancelledBy(t); err != nil {
		return nil, err
	} else if some {
		if err := dropListed(t, t.w.stmts.cancelledByAny, ids, jobs); err != nil {
			return nil, err
		}
	}
	return jobs, nil
}

// dropListed deletes from jobs the IDs that st, given ids, returns.
func dropListed(t *txn, st *sql.Stmt, ids []int64, jobs map[int64]*store.JobRow) error {
	rows, err := st.QueryContext(t.ctx, t.idList(ids))
	if err != nil {
		return fmt.Errorf("read dependents: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("read dependents: %w", err)
		}
		delete(jobs, id)
	}
	return rows.Err()
}

// adminOp runs action what on job id in the writer as a durable request, and
// returns the job as it is afterwards (as it was, for a deletion).
func (s *Store) adminOp(ctx context.Context, what store.JobAction, id int64, now time.Time) (*store.JobRow, error) {
	var out *store.JobRow
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		j, err := getForWrite(t, id)
		if err != nil {
			return err
		}
		if err := withSteps(t.ctx, t.w.conn, []*store.JobRow{j}); err != nil {
			return fmt.Errorf("read steps: %w", err)
		}
		refused, err := actions[what](t, r, []*store.JobRow{j}, now, false)
		if err != nil {
			return err
		}
		if refused[0] != nil {
			return refused[0]
		}
		if what != store.ActionDelete {
			if j, err = getForWrite(t, id); err != nil {
				return err
			}
			if err := withSteps(t.ctx, t.w.conn, []*store.JobRow{j}); err != nil {
				return fmt.Errorf("read steps: %w", err)
			}
		}
		out = j
		return nil
	}
	if err := s.do(ctx, r); err != nil {
		return nil, actErr(what, id, err)
	}
	return out, nil
}

// actErr wraps the error of an action on job id.
func actErr(what store.JobAction, id int64, err error) error {
	return fmt.Errorf("sqlitestore: %s job %d: %w", what, id, err)
}

// JobActMany applies p.Action to each job of p.IDs, in order, in one
// durable request: one transaction, one sync. Runs of jobs that stand
// alone (standAlone) are acted on together, with one statement per table
// and kind of move, and each other job on its own, read afresh after
// everything before it in the batch. See store.Store.
func (s *Store) JobActMany(ctx context.Context, p *store.JobActManyParams) ([]store.ActResult, error) {
	if err := store.ValidateActMany(p); err != nil {
		return nil, err
	}
	act := actions[p.Action]
	out := make([]store.ActResult, len(p.IDs))
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		run := func(jobs []*store.JobRow, at []int, alone bool) error {
			if len(jobs) == 0 {
				return nil
			}
			refused, err := act(t, r, jobs, p.Now, alone)
			if err != nil {
				return err
			}
			for k, i := range at {
				out[i].Err = nil
				if refused[k] != nil {
					out[i].Err = actErr(p.Action, p.IDs[i], refused[k])
				}
			}
			return nil
		}
		alone, err := standAlone(t, p.IDs)
		if err != nil {
			return err
		}
		var jobs []*store.JobRow
		var at []int
		for i, id := range p.IDs {
			if j := alone[id]; j != nil {
				jobs, at = append(jobs, j), append(at, i)
				continue
			}
			// This job may depend on what the run before it does.
			if err := run(jobs, at, true); err != nil {
				return err
			}
			jobs, at = jobs[:0], at[:0]
			found, err := actTargets(t, []int64{id})
			if err != nil {
				return err
			}
			j := found[id]
			if j == nil {
				out[i].Err = actErr(p.Action, id, store.ErrNotFound)
				continue
			}
			if err := run([]*store.JobRow{j}, []int{i}, false); err != nil {
				return fmt.Errorf("job %d: %w", id, err)
			}
		}
		return run(jobs, at, true)
	}
	if err := s.do(ctx, r); err != nil {
		return nil, opErr(string(p.Action)+" jobs", err)
	}
	return out, nil
}

// idsOf returns the IDs of jobs.
func idsOf(jobs []*store.JobRow) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// JobCancel cancels a waiting, scheduled, available or retrying job, moving
// it to the finished table and cancelling its waiting dependents; a running
// job gets CancelRequested. See store.Store.
func (s *Store) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobRow, error) {
	return s.adminOp(ctx, store.ActionCancel, p.ID, p.Now)
}

// actCancel is JobCancel's action: it refuses nothing.
func actCancel(t *txn, r *request, jobs []*store.JobRow, now time.Time, _ bool) ([]error, error) {
	var running, pending []*store.JobRow
	for _, j := range jobs {
		switch {
		case j.State == store.JobStateRunning:
			running = append(running, j)
		case !j.State.Finished():
			pending = append(pending, j)
		}
	}
	if len(running) > 0 {
		if _, err := t.w.stmts.cancelRequest.ExecContext(t.ctx, t.idList(idsOf(running))); err != nil {
			return nil, fmt.Errorf("request cancel: %w", err)
		}
	}
	if len(pending) > 0 {
		if err := cancelJobs(t, r, pending, now, ""); err != nil {
			return nil, err
		}
		if err := depsEnded(t, r, idsOf(pending), store.JobStateCancelled, false, now); err != nil {
			return nil, err
		}
	}
	for _, j := range append(running, pending...) {
		if err := cancelChildren(t, r, j.ID, false, now); err != nil {
			return nil, err
		}
	}
	return make([]error, len(jobs)), nil
}

// JobDelete removes a job that is not running; see store.Store.
func (s *Store) JobDelete(ctx context.Context, p *store.JobDeleteParams) (*store.JobRow, error) {
	return s.adminOp(ctx, store.ActionDelete, p.ID, p.Now)
}

// actDelete is JobDelete's action: it refuses a running job.
func actDelete(t *txn, r *request, jobs []*store.JobRow, now time.Time, _ bool) ([]error, error) {
	refused := make([]error, len(jobs))
	var pending, finished, deleted []int64
	for i, j := range jobs {
		switch {
		case j.State == store.JobStateRunning:
			refused[i] = store.ErrJobRunning
			continue
		case j.State.Finished():
			finished = append(finished, j.ID)
		default:
			pending = append(pending, j.ID)
		}
		if j.State == store.JobStateWaiting {
			if _, err := t.w.stmts.depsDeleteJob.ExecContext(t.ctx, j.ID); err != nil {
				return nil, fmt.Errorf("delete: %w", err)
			}
		}
		if err := cancelChildren(t, r, j.ID, true, now); err != nil {
			return nil, err
		}
		r.count(j.Queue, j.State, -1)
		deleted = append(deleted, j.ID)
	}
	if err := deleteSteps(t, deleted); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		st  *sql.Stmt
		ids []int64
	}{{t.w.stmts.deleteMany, pending}, {t.w.stmts.deleteFinishedMany, finished}} {
		if len(d.ids) == 0 {
			continue
		}
		if _, err := d.st.ExecContext(t.ctx, t.idList(d.ids)); err != nil {
			return nil, fmt.Errorf("delete: %w", err)
		}
	}
	r.ended = append(r.ended, deleted...)
	if len(deleted) > 0 {
		if err := depsEnded(t, r, deleted, store.JobStateCancelled, true, now); err != nil {
			return nil, err
		}
	}
	return refused, nil
}

// JobPrune deletes up to p.Limit finished jobs finalized before the cutoffs
// of their state; see store.Store. p.Limit must be at least 1. It deletes in
// chunks, each a transaction of its own, paced so that other writes do not
// wait long behind it (see prunePacer).
func (s *Store) JobPrune(ctx context.Context, p *store.JobPruneParams) (int, error) {
	if err := store.ValidateLimit("JobPruneParams", p.Limit); err != nil {
		return 0, err
	}
	total := 0
	for total < p.Limit {
		size := min(s.prunePace.next(), p.Limit-total)
		n, took, err := s.pruneChunk(ctx, p, size)
		total += n
		if err != nil {
			return total, opErr("prune", err)
		}
		if n < size {
			break
		}
		wait := s.prunePace.took(size, took)
		if total < p.Limit && !pauseFor(ctx, wait) {
			break
		}
	}
	return total, nil
}

// pruneChunk deletes up to limit finished jobs in one transaction, and
// returns how many and how long the deletes took in it.
func (s *Store) pruneChunk(ctx context.Context, p *store.JobPruneParams, limit int) (int, time.Duration, error) {
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
	var took time.Duration
	r := &request{}
	r.op = func(t *txn, r *request) error {
		start := time.Now()
		defer func() { took = time.Since(start) }()
		n = 0
		var failed []int64 // pruned dead and cancelled jobs: jobs may wait for them
		var pruned []int64
		for i, c := range cutoffs {
			if !c.set || n >= limit {
				continue
			}
			rows, err := t.w.stmts.prune[i].QueryContext(t.ctx, c.before, limit-n)
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
				pruned = append(pruned, id)
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
		if err := deleteSteps(t, pruned); err != nil {
			return err
		}
		if len(failed) == 0 {
			return nil
		}
		return depsEnded(t, r, failed, store.JobStateCancelled, true, p.Now)
	}
	if err := s.do(ctx, r); err != nil {
		return 0, 0, err
	}
	return n, took, nil
}
