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
const sqlGetJob = `SELECT ` + jobCols + `, ` + stepsCol + ` FROM {s}.jobs j WHERE id = $1`

// sqlJobSteps reads the steps of job $1, as stepsCol.
const sqlJobSteps = `SELECT ` + stepsCol + ` FROM (SELECT $1::bigint AS id) j`

// withSteps reads the steps of j in tx.
func (s *Store) withSteps(ctx context.Context, tx pgx.Tx, j *store.JobRow) error {
	var b []byte
	if err := tx.QueryRow(ctx, s.q.get(sqlJobSteps), j.ID).Scan(&b); err != nil {
		return fmt.Errorf("read the steps of job %d: %w", j.ID, err)
	}
	return decodeSteps(j, b)
}

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

// An action is what JobRetry, JobCancel or JobDelete does, written once
// for a group of jobs locked in tx: one job, or jobs of a JobActMany
// batch that stand alone (listed once, no unique key, no dependencies, no
// dependents), which it changes with one statement per kind of change.
// It adds the queues to signal at the commit to wake, and returns per job
// nil or the job's refusal (store.ErrJobRunning, store.ErrUniqueConflict),
// for which it writes nothing; except a refusal learnt from a failed
// statement, which aborted the transaction: that one is the call's error,
// a *racedError.
type action func(s *Store, ctx context.Context, tx pgx.Tx, jobs []lockedRow, now time.Time, wake *[]string) ([]error, error)

// lockedRow is a job locked in a transaction; hasDeps: other jobs waited
// for it (some may be cancelled because of it).
type lockedRow struct {
	*store.JobRow
	hasDeps bool
}

// standsAlone reports whether j's action reads and writes nothing but
// its own row: no unique key, no dependencies, no job ever waited for it.
func (j lockedRow) standsAlone() bool {
	return j.UniqueKey == "" && len(j.DependsOn) == 0 && !j.hasDeps
}

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
		if err := s.withSteps(ctx, tx, j); err != nil {
			return err
		}
		var wake []string
		refused, err := actions[what](s, ctx, tx, []lockedRow{{j, hasDeps}}, now, &wake)
		if err != nil {
			return err
		}
		if refused[0] != nil {
			return refused[0]
		}
		if err := s.notify(ctx, tx, wake); err != nil {
			return err
		}
		if what == store.ActionDelete {
			out = j
			return nil
		}
		if out, _, err = s.lockedJob(ctx, tx, id); err != nil {
			return err
		}
		return s.withSteps(ctx, tx, out)
	})
	if err != nil {
		return nil, s.opErr(fmt.Sprintf("%s job %d", what, id), err)
	}
	return out, nil
}

// sqlLockJobs locks and reads the jobs of a batch, in ID order as every
// other statement that locks several jobs, so that batches never
// deadlock.
const sqlLockJobs = `SELECT ` + jobCols + `, has_dependents,
		EXISTS (SELECT 1 FROM {s}.job_steps s WHERE s.job_id = j.id AND s.kind = 'spawn')
	FROM {s}.jobs j WHERE id = ANY($1) ORDER BY id FOR UPDATE`

// lockJobs locks and reads the jobs ids, by ID; a job that does not exist
// is left out.
func (s *Store) lockJobs(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64]lockedRow, error) {
	rs, err := tx.Query(ctx, s.q.get(sqlLockJobs), ids)
	if err != nil {
		return nil, fmt.Errorf("lock jobs: %w", err)
	}
	defer rs.Close()
	out := make(map[int64]lockedRow, len(ids))
	for rs.Next() {
		var hasDeps, spawned bool
		j, err := scanJob(scanPlus{scanPlus{rs, &spawned}, &hasDeps})
		if err != nil {
			return nil, fmt.Errorf("lock jobs: %w", err)
		}
		// A parent's or a child's action reaches beyond its row.
		hasDeps = hasDeps || spawned || j.ParentID != 0
		out[j.ID] = lockedRow{j, hasDeps}
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("lock jobs: %w", err)
	}
	return out, nil
}

// JobActMany applies p.Action to each job of p.IDs, in order, in one
// transaction that locks them all first, and signals the queues once at
// its commit. Runs of jobs that stand alone are acted on together, one
// statement per kind of change; any other job by itself, read afresh
// after everything before it in the batch. A refusal learnt from a failed
// statement (a concurrent enqueue took a unique key) runs the whole batch
// again, which then sees the key taken. See store.Store.
func (s *Store) JobActMany(ctx context.Context, p *store.JobActManyParams) ([]store.ActResult, error) {
	if err := store.ValidateActMany(p); err != nil {
		return nil, err
	}
	var out []store.ActResult
	var err error
	for range 3 {
		err = s.inTx(ctx, func(tx pgx.Tx) error {
			var err error
			out, err = s.actMany(ctx, tx, p)
			return err
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

// actMany is JobActMany in tx.
func (s *Store) actMany(ctx context.Context, tx pgx.Tx, p *store.JobActManyParams) ([]store.ActResult, error) {
	act := actions[p.Action]
	out := make([]store.ActResult, len(p.IDs))
	var wake []string
	run := func(jobs []lockedRow, at []int) error {
		if len(jobs) == 0 {
			return nil
		}
		refused, err := act(s, ctx, tx, jobs, p.Now, &wake)
		if err != nil {
			return err
		}
		for k, i := range at {
			out[i].Err = refused[k]
		}
		return nil
	}
	locked, err := s.lockJobs(ctx, tx, p.IDs)
	if err != nil {
		return nil, err
	}
	times := make(map[int64]int, len(p.IDs))
	for _, id := range p.IDs {
		times[id]++
	}
	var jobs []lockedRow
	var at []int
	for i, id := range p.IDs {
		if j, ok := locked[id]; ok && times[id] == 1 && j.standsAlone() {
			jobs, at = append(jobs, j), append(at, i)
			continue
		}
		// This job may depend on what the run before it does.
		if err := run(jobs, at); err != nil {
			return nil, err
		}
		jobs, at = jobs[:0], at[:0]
		j, hasDeps, err := s.lockedJob(ctx, tx, id)
		if errors.Is(err, store.ErrNotFound) {
			out[i].Err = err
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := run([]lockedRow{{j, hasDeps}}, []int{i}); err != nil {
			return nil, fmt.Errorf("job %d: %w", id, err)
		}
	}
	if err := run(jobs, at); err != nil {
		return nil, err
	}
	return out, s.notify(ctx, tx, slices.Compact(slices.Sorted(slices.Values(wake))))
}

// JobCancel cancels a pending job, or asks a running one to stop.
func (s *Store) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobRow, error) {
	return s.adminOp(ctx, store.ActionCancel, p.ID, p.Now)
}

// actCancel is JobCancel's action: it refuses nothing.
func (s *Store) actCancel(ctx context.Context, tx pgx.Tx, jobs []lockedRow, now time.Time, _ *[]string) ([]error, error) {
	var running, pending, withDeps []int64
	for _, j := range jobs {
		switch {
		case j.State == store.JobStateRunning:
			running = append(running, j.ID)
		case !j.State.Finished():
			pending = append(pending, j.ID)
			if j.hasDeps {
				withDeps = append(withDeps, j.ID)
			}
		}
	}
	if len(running) > 0 {
		if _, err := tx.Exec(ctx, s.q.get(`UPDATE {s}.jobs SET cancel_requested = true WHERE id = ANY($1)`), running); err != nil {
			return nil, fmt.Errorf("request cancel: %w", err)
		}
	}
	if err := s.cancelPending(ctx, tx, pending, withDeps, now, ""); err != nil {
		return nil, err
	}
	for _, j := range jobs {
		if !j.State.Finished() {
			if err := s.cancelChildren(ctx, tx, j.ID, false, now); err != nil {
				return nil, err
			}
		}
	}
	return make([]error, len(jobs)), nil
}

// JobDelete removes a job that is not running.
func (s *Store) JobDelete(ctx context.Context, p *store.JobDeleteParams) (*store.JobRow, error) {
	return s.adminOp(ctx, store.ActionDelete, p.ID, p.Now)
}

// actDelete is JobDelete's action: it refuses a running job.
func (s *Store) actDelete(ctx context.Context, tx pgx.Tx, jobs []lockedRow, now time.Time, _ *[]string) ([]error, error) {
	refused := make([]error, len(jobs))
	var deleted, waiting, withDeps []int64
	for i, j := range jobs {
		if j.State == store.JobStateRunning {
			refused[i] = store.ErrJobRunning
			continue
		}
		deleted = append(deleted, j.ID)
		if j.State == store.JobStateWaiting {
			waiting = append(waiting, j.ID)
		}
		if j.hasDeps {
			withDeps = append(withDeps, j.ID)
		}
	}
	if len(deleted) == 0 {
		return refused, nil
	}
	for _, id := range deleted {
		if err := s.cancelChildren(ctx, tx, id, true, now); err != nil {
			return nil, err
		}
	}
	if _, err := tx.Exec(ctx, s.q.get(`DELETE FROM {s}.jobs WHERE id = ANY($1)`), deleted); err != nil {
		return nil, fmt.Errorf("delete: %w", err)
	}
	if len(waiting) > 0 {
		if _, err := tx.Exec(ctx, s.q.get(sqlDropDepsOf), waiting); err != nil {
			return nil, fmt.Errorf("delete: %w", err)
		}
	}
	if len(withDeps) > 0 {
		if err := s.depsEnded(ctx, tx, withDeps, store.JobStateCancelled, true, now); err != nil {
			return nil, err
		}
	}
	for _, id := range deleted {
		s.waits.deleted(id)
	}
	return refused, nil
}

// JobGet returns one job.
func (s *Store) JobGet(ctx context.Context, p *store.JobGetParams) (*store.JobRow, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var stepsJSON []byte
	j, err := scanJob(scanPlus{s.pool.QueryRow(ctx, s.q.get(sqlGetJob), p.ID), &stepsJSON})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: get job %d: %w", p.ID, store.ErrNotFound)
	}
	if err == nil {
		err = decodeSteps(j, stepsJSON)
	}
	if err != nil {
		return nil, s.opErr(fmt.Sprintf("get job %d", p.ID), err)
	}
	return j, nil
}

// JobList returns a page of jobs in ID order.
func (s *Store) JobList(ctx context.Context, p *store.JobListParams) ([]*store.JobRow, error) {
	if err := store.ValidateLimit("JobListParams", p.Limit); err != nil {
		return nil, err
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
	if p.ParentID != 0 {
		add("parent_id = ?", p.ParentID)
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
	q := `SELECT ` + jobCols + `, ` + stepsCol + ` FROM {s}.jobs j`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, p.Limit)
	q += fmt.Sprintf(` ORDER BY %s LIMIT $%d`, order, len(args))
	jobs, err := collectJobsWithSteps(s.pool.Query(ctx, s.q.get(q), args...))
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
		SELECT id FROM {s}.jobs f WHERE state = '{state}' AND finalized_at < $1
			AND (f.parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM {s}.jobs p WHERE p.id = f.parent_id))
		ORDER BY finalized_at LIMIT $2
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
	if err := store.ValidateLimit("JobPruneParams", p.Limit); err != nil {
		return 0, err
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
