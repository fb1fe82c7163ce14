package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
)

// sqlGetJob reads one job.
const sqlGetJob = `SELECT ` + jobCols + ` FROM {s}.jobs WHERE id = $1`

// sqlLockJob reads one job and locks it.
const sqlLockJob = `SELECT ` + jobCols + `, has_dependents FROM {s}.jobs WHERE id = $1 FOR UPDATE`

// lockedJob reads and locks job id in tx; ErrNotFound when it is gone.
func (s *Store) lockedJob(ctx context.Context, tx pgx.Tx, id int64) (*store.JobRow, bool, error) {
	var hasDeps bool
	j, err := scanJob(scanPlus{tx.QueryRow(ctx, s.q.get(sqlLockJob), id), &hasDeps})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, store.ErrNotFound
	}
	if err != nil {
		return nil, false, fmt.Errorf("read job: %w", err)
	}
	return j, hasDeps, nil
}

// scanPlus scans a row of jobCols followed by one more column.
type scanPlus struct {
	row   pgx.Row
	extra any
}

func (r scanPlus) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra)...) }

// An action is what JobRetry, JobCancel or JobDelete does to job j,
// locked in tx (hasDeps: other jobs waited for it). It adds the queues to
// signal at the commit to wake. It returns its refusals
// (store.ErrJobRunning, store.ErrUniqueConflict) before it writes anything,
// so that JobActMany can go on with the next job of its batch in the same
// transaction, except a refusal it learns from a failed statement, which
// aborted the transaction: that one is a *racedError.
type action func(s *Store, ctx context.Context, tx pgx.Tx, j *store.JobRow, hasDeps bool, now time.Time, wake *[]string) error

// actions are the actions of JobActMany, by name.
var actions = map[store.JobAction]action{
	store.ActionRetry:  (*Store).actRetry,
	store.ActionCancel: (*Store).actCancel,
	store.ActionDelete: (*Store).actDelete,
}

// racedError is a refusal caused by a concurrent transaction, learnt from
// a statement that failed and so aborted the transaction (a unique key
// taken between the check and the update).
type racedError struct{ error }

func (e *racedError) Unwrap() error { return e.error }

// adminOp runs action what on job id, locked, in a transaction, and
// returns the job as it is afterwards (as it was, for a deletion).
func (s *Store) adminOp(ctx context.Context, what store.JobAction, id int64, now time.Time) (*store.JobRow, error) {
	var out *store.JobRow
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		j, hasDeps, err := s.lockedJob(ctx, tx, id)
		if err != nil {
			return err
		}
		var wake []string
		if err := actions[what](s, ctx, tx, j, hasDeps, now, &wake); err != nil {
			return err
		}
		if err := s.notify(ctx, tx, wake); err != nil {
			return err
		}
		if what == store.ActionDelete {
			out = j
			return nil
		}
		out, _, err = s.lockedJob(ctx, tx, id)
		return err
	})
	if err != nil {
		return nil, s.opErr(fmt.Sprintf("%s job %d", what, id), err)
	}
	return out, nil
}

// sqlLockJobs locks the jobs of a batch, in ID order as every other
// statement that locks several jobs, so that batches never deadlock.
const sqlLockJobs = `SELECT id FROM {s}.jobs WHERE id = ANY($1) ORDER BY id FOR UPDATE`

// JobActMany applies p.Action to each job of p.IDs, in order, in one
// transaction, and signals the queues once at its commit. A refusal
// learnt from a failed statement (a concurrent enqueue took a unique key)
// runs the whole batch again, which then sees the key taken. See
// store.Store.
func (s *Store) JobActMany(ctx context.Context, p *store.JobActManyParams) ([]store.ActResult, error) {
	if err := store.ValidateActMany(p); err != nil {
		return nil, err
	}
	act := actions[p.Action]
	out := make([]store.ActResult, len(p.IDs))
	var err error
	for range 3 {
		err = s.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, s.q.get(sqlLockJobs), p.IDs); err != nil {
				return fmt.Errorf("lock jobs: %w", err)
			}
			var wake []string
			for i, id := range p.IDs {
				j, hasDeps, err := s.lockedJob(ctx, tx, id)
				if err == nil {
					err = act(s, ctx, tx, j, hasDeps, p.Now, &wake)
				}
				var raced *racedError
				switch {
				case errors.As(err, &raced):
					return err
				case store.Plain(err):
					out[i].Err = err
				case err != nil:
					return fmt.Errorf("job %d: %w", id, err)
				default:
					out[i].Err = nil
				}
			}
			return s.notify(ctx, tx, slices.Compact(slices.Sorted(slices.Values(wake))))
		})
		var raced *racedError
		if !errors.As(err, &raced) {
			break
		}
	}
	if err != nil {
		return nil, s.opErr(string(p.Action)+" jobs", err)
	}
	return out, nil
}

// JobCancel cancels a pending job, or asks a running one to stop.
func (s *Store) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobRow, error) {
	return s.adminOp(ctx, store.ActionCancel, p.ID, p.Now)
}

// actCancel is JobCancel's action.
func (s *Store) actCancel(ctx context.Context, tx pgx.Tx, j *store.JobRow, hasDeps bool, now time.Time, _ *[]string) error {
	switch {
	case j.State == store.JobStateRunning:
		if _, err := tx.Exec(ctx, s.q.get(`UPDATE {s}.jobs SET cancel_requested = true WHERE id = $1`), j.ID); err != nil {
			return fmt.Errorf("request cancel: %w", err)
		}
		return nil
	case j.State.Finished():
		return nil
	}
	var withDeps []int64
	if hasDeps {
		withDeps = []int64{j.ID}
	}
	return s.cancelPending(ctx, tx, []int64{j.ID}, withDeps, now, "")
}

// JobDelete removes a job that is not running.
func (s *Store) JobDelete(ctx context.Context, p *store.JobDeleteParams) (*store.JobRow, error) {
	return s.adminOp(ctx, store.ActionDelete, p.ID, p.Now)
}

// actDelete is JobDelete's action.
func (s *Store) actDelete(ctx context.Context, tx pgx.Tx, j *store.JobRow, hasDeps bool, now time.Time, _ *[]string) error {
	if j.State == store.JobStateRunning {
		return store.ErrJobRunning
	}
	if _, err := tx.Exec(ctx, s.q.get(`DELETE FROM {s}.jobs WHERE id = $1`), j.ID); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	if j.State == store.JobStateWaiting {
		if _, err := tx.Exec(ctx, s.q.get(sqlDropDepsOf), []int64{j.ID}); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
	}
	if hasDeps {
		if err := s.depsEnded(ctx, tx, []int64{j.ID}, store.JobStateCancelled, true, now); err != nil {
			return err
		}
	}
	s.waits.deleted(j.ID)
	return nil
}

// JobGet returns one job.
func (s *Store) JobGet(ctx context.Context, p *store.JobGetParams) (*store.JobRow, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	j, err := scanJob(s.pool.QueryRow(ctx, s.q.get(sqlGetJob), p.ID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: get job %d: %w", p.ID, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.opErr(fmt.Sprintf("get job %d", p.ID), err)
	}
	return j, nil
}

// JobList returns a page of jobs in ID order.
func (s *Store) JobList(ctx context.Context, p *store.JobListParams) ([]*store.JobRow, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("pgstore: list: JobListParams.Limit must be at least 1, got %d", p.Limit)
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if p.Queue != "" {
		add("queue = ?", p.Queue)
	}
	switch {
	case p.State.Valid():
		// A literal, so the generic plan can use the partial indexes.
		where = append(where, "state = '"+string(p.State)+"'")
	case p.State != "":
		add("state = ?", string(p.State))
	}
	if p.Kind != "" {
		add("kind = ?", p.Kind)
	}
	if p.WorkflowID != 0 {
		add("workflow_id = ?", p.WorkflowID)
	}
	order := "id"
	if p.Desc {
		order = "id DESC"
		if p.AfterID != 0 {
			add("id < ?", p.AfterID)
		}
	} else if p.AfterID != 0 {
		add("id > ?", p.AfterID)
	}
	q := `SELECT ` + jobCols + ` FROM {s}.jobs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, p.Limit)
	q += fmt.Sprintf(` ORDER BY %s LIMIT $%d`, order, len(args))
	jobs, err := collectJobs(s.pool.Query(ctx, s.q.get(q), args...))
	if err != nil {
		return nil, s.opErr("list jobs", err)
	}
	if jobs == nil {
		jobs = []*store.JobRow{}
	}
	return jobs, nil
}

// sqlCounts sums the counters and the changes not yet folded into them.
const sqlCounts = `SELECT queue, state, sum(n)::bigint FROM (
		SELECT queue, state, n FROM {s}.job_counts WHERE $1::text IS NULL OR queue = $1
		UNION ALL
		SELECT queue, state, n FROM {s}.job_count_deltas WHERE $1::text IS NULL OR queue = $1
	) c GROUP BY queue, state HAVING sum(n) <> 0 ORDER BY queue, state`

// sqlFoldCounts folds up to 10,000 deltas into the counters; one caller at
// a time (the others skip).
const sqlFoldCounts = `WITH lock AS (
		SELECT pg_try_advisory_xact_lock(hashtext('sortie.fold_counts.' || $1::text)) AS ok
	), d AS (
		DELETE FROM {s}.job_count_deltas WHERE ctid = ANY(ARRAY(
			SELECT ctid FROM {s}.job_count_deltas WHERE (SELECT ok FROM lock) LIMIT 10000))
		RETURNING queue, state, n
	)
	INSERT INTO {s}.job_counts (queue, state, n)
		SELECT queue, state, sum(n) FROM d GROUP BY queue, state
	ON CONFLICT (queue, state) DO UPDATE SET n = {s}.job_counts.n + excluded.n`

// foldCounts folds the count deltas into the counters, and the history
// deltas into the history, so JobCounts and JobHistory read few rows, in
// one round trip. JobPrune and JobRescue call it (JobCounts and JobHistory
// fold what they read themselves).
func (s *Store) foldCounts(ctx context.Context) error {
	b := &pgx.Batch{}
	b.Queue(s.q.get(sqlFoldCounts), s.schema)
	b.Queue(s.q.get(sqlFoldHistory), s.schema)
	return s.pool.SendBatch(ctx, b).Close()
}

// JobCounts returns the jobs per queue and state from the counters and
// the deltas not yet folded into them. It folds deltas first (skipped when
// another caller is folding), pipelined with the read in one round trip.
func (s *Store) JobCounts(ctx context.Context, p *store.JobCountsParams) ([]store.QueueStateCount, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var queue *string
	if p.Queue != "" {
		queue = &p.Queue
	}
	b := &pgx.Batch{}
	b.Queue(s.q.get(sqlFoldCounts), s.schema)
	b.Queue(s.q.get(sqlCounts), queue)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, s.opErr("count jobs", err)
	}
	rs, err := br.Query()
	if err != nil {
		return nil, s.opErr("count jobs", err)
	}
	defer rs.Close()
	out := []store.QueueStateCount{}
	for rs.Next() {
		var c store.QueueStateCount
		var state string
		if err := rs.Scan(&c.Queue, &state, &c.Count); err != nil {
			return nil, s.opErr("count jobs", err)
		}
		c.State = store.JobState(state)
		out = append(out, c)
	}
	if err := rs.Err(); err != nil {
		return nil, s.opErr("count jobs", err)
	}
	return out, nil
}

// sqlPrune deletes up to $2 jobs of state {state} finalized before $1. The
// state is written into the statement, not bound: connections use generic
// plans, and only a literal state lets such a plan use jobs_prune. The IDs
// are collected first (= ANY(ARRAY(...))), so the plan cannot turn the
// delete into a join that reads the whole table.
const sqlPrune = `DELETE FROM {s}.jobs WHERE id = ANY(ARRAY(
		SELECT id FROM {s}.jobs WHERE state = '{state}' AND finalized_at < $1 ORDER BY finalized_at LIMIT $2
		FOR UPDATE SKIP LOCKED))`

// sqlPruneFailed is sqlPrune for dead and cancelled jobs: it also returns
// the pruned jobs that have dependents (jobs retried while one was dead or
// cancelled wait for it).
const sqlPruneFailed = `WITH d AS (` + sqlPrune + ` RETURNING id, has_dependents)
	SELECT count(*), COALESCE(array_agg(id) FILTER (WHERE has_dependents), '{}') FROM d`

// JobPrune deletes finished jobs past their retention, and folds the
// count deltas. The jobs waiting for a pruned job are handled as for a
// deleted one.
func (s *Store) JobPrune(ctx context.Context, p *store.JobPruneParams) (int, error) {
	if p.Limit < 1 {
		return 0, fmt.Errorf("pgstore: prune: JobPruneParams.Limit must be at least 1, got %d", p.Limit)
	}
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	// In a store transaction, so with the pinned plan settings: left to a
	// generic plan and the statistics, a prune with nothing to delete was
	// seen scanning all 200,000 finished jobs (60 ms a call; seconds at
	// 10 million), where jobs_prune answers at once.
	n := 0
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		n = 0
		for _, c := range []struct {
			state  store.JobState
			before time.Time
		}{
			{store.JobStateCompleted, p.CompletedBefore},
			{store.JobStateCancelled, p.CancelledBefore},
			{store.JobStateDead, p.DeadBefore},
		} {
			if c.before.IsZero() || n >= p.Limit {
				continue
			}
			pruned, err := s.pruneState(ctx, tx, c.state, c.before, p.Limit-n, p.Now)
			if err != nil {
				return err
			}
			n += pruned
		}
		return nil
	})
	if err != nil {
		return 0, s.opErr("prune", err)
	}
	if err := s.foldCounts(ctx); err != nil {
		return n, s.opErr("prune", err)
	}
	return n, nil
}

// pruneState deletes up to limit jobs of state finalized before before,
// and handles the jobs waiting for pruned dead or cancelled ones at now.
func (s *Store) pruneState(ctx context.Context, tx pgx.Tx, state store.JobState, before time.Time, limit int, now time.Time) (int, error) {
	if state == store.JobStateCompleted {
		tag, err := tx.Exec(ctx, s.q.get(strings.Replace(sqlPrune, "{state}", string(state), 1)), before, limit)
		return int(tag.RowsAffected()), err
	}
	var pruned int
	var withDeps []int64
	err := tx.QueryRow(ctx, s.q.get(strings.Replace(sqlPruneFailed, "{state}", string(state), 1)), before, limit).Scan(&pruned, &withDeps)
	if err != nil {
		return 0, err
	}
	return pruned, s.depsEnded(ctx, tx, withDeps, store.JobStateCancelled, true, now)
}
