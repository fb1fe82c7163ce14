package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/depgraph"
)

// sqlTakeDeps deletes the dependency rows naming finished jobs and returns
// them.
const sqlTakeDeps = `DELETE FROM {s}.job_deps WHERE dep_id = ANY($1::bigint[]) RETURNING dep_id, job_id`

// sqlLockDependents locks dependents in ID order (so two finishing
// transactions never wait on each other in a cycle) and reads them.
const sqlLockDependents = `SELECT id, ignore_dep_failure, attempt, state, has_dependents FROM {s}.jobs
	WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE`

// sqlStillWaiting returns which of some jobs still have unfinished
// dependencies. It runs after sqlLockDependents, in a statement of its own,
// so it sees the dependency rows every earlier holder of the locks deleted.
const sqlStillWaiting = `SELECT DISTINCT job_id FROM {s}.job_deps WHERE job_id = ANY($1::bigint[])`

// sqlRelease makes waiting jobs whose dependencies all finished due.
const sqlRelease = `UPDATE {s}.jobs SET state = CASE WHEN run_at > $2 THEN 'scheduled' ELSE 'available' END
	WHERE id = ANY($1::bigint[]) AND state = 'waiting'
	RETURNING queue`

// sqlCancelJobs cancels jobs with one error each, recording as
// cancelled_by the dependency whose ending cancelled each (NULL for none),
// and counts them in the history.
const sqlCancelJobs = `WITH c AS (
		UPDATE {s}.jobs j SET state = 'cancelled', finalized_at = $2, lease_until = NULL, cancel_requested = false,
			errors = CASE WHEN u.err IS NULL THEN j.errors ELSE COALESCE(j.errors, '[]'::jsonb) || jsonb_build_array(u.err::jsonb) END,
			cancelled_by = u.by
		FROM unnest($1::bigint[], $3::text[], $4::bigint[]) AS u(id, err, by)
		WHERE j.id = u.id
		RETURNING j.queue
	)
	INSERT INTO {s}.job_history_deltas (minute, queue, outcome, n)
		SELECT {s}.history_minute($2), queue, 'cancelled', count(*) FROM c GROUP BY queue`

// sqlDropDepsOf deletes the dependency rows of jobs that no longer wait.
const sqlDropDepsOf = `DELETE FROM {s}.job_deps WHERE job_id = ANY($1::bigint[])`

// depsEnded handles the waiting dependents of ids, which ended in state
// (completed, cancelled or dead) or were deleted (depgraph.Cascade).
func (s *Store) depsEnded(ctx context.Context, tx pgx.Tx, ids []int64, state store.JobState, deleted bool, now time.Time) error {
	return depgraph.Cascade(cascader{s, ctx, tx, now}, ids, state, deleted)
}

// dependent is a waiting dependent of a job that ended, locked.
type dependent struct {
	id            int64
	ignore        bool
	attempt       int32
	state         string
	hasDependents bool
}

// cascader is the PostgreSQL store's part of depgraph.Cascade: it handles
// each level of dependents with a few statements.
type cascader struct {
	s   *Store
	ctx context.Context
	tx  pgx.Tx
	now time.Time
}

// Dependents implements depgraph.Cascader: it takes the dependency edges
// from ids and locks the dependents that still wait.
func (c cascader) Dependents(ids []int64) ([]depgraph.Dependent[dependent], error) {
	depOf, dependents, err := c.s.takeDependents(c.ctx, c.tx, ids)
	if err != nil || len(dependents) == 0 {
		return nil, err
	}
	locked, err := c.s.lockWaiting(c.ctx, c.tx, dependents)
	if err != nil {
		return nil, err
	}
	ds := make([]depgraph.Dependent[dependent], len(locked))
	for i, d := range locked {
		ds[i] = depgraph.Dependent[dependent]{Dep: depOf[d.id], Ignore: d.ignore, Row: d}
	}
	return ds, nil
}

// Apply implements depgraph.Cascader: one statement releases, one cancels.
func (c cascader) Apply(ds []depgraph.Dependent[dependent]) ([]int64, error) {
	var release []int64
	plan := &dependentsPlan{}
	for _, d := range ds {
		if d.Fate.Release {
			release = append(release, d.Row.id)
			continue
		}
		e, err := errorJSON(&store.AttemptError{Attempt: int(d.Row.attempt), At: c.now, Message: d.Fate.Message})
		if err != nil {
			return nil, err
		}
		var by *int64
		if d.Fate.By != 0 {
			by = &d.Fate.By
		}
		plan.cancel, plan.errs, plan.bys = append(plan.cancel, d.Row.id), append(plan.errs, *e), append(plan.bys, by)
		if d.Row.hasDependents {
			plan.next = append(plan.next, d.Row.id)
		}
	}
	if err := c.s.releaseDependents(c.ctx, c.tx, release, c.now); err != nil {
		return nil, err
	}
	if err := c.s.cancelDependents(c.ctx, c.tx, plan, c.now); err != nil {
		return nil, err
	}
	return plan.next, nil
}

// dependentsPlan says which dependents of jobs that ended are cancelled:
// cancel, with errs, each cancelled by bys (nil for a deleted
// dependency); next are the cancelled ones with dependents of their own.
type dependentsPlan struct {
	cancel, next []int64
	errs         []string
	bys          []*int64
}

// takeDependents removes the dependency edges from ids and returns each
// dependent with the dependency that ended (the first one read), and the
// dependents in order.
func (s *Store) takeDependents(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64]int64, []int64, error) {
	rs, err := tx.Query(ctx, s.q.get(sqlTakeDeps), ids)
	if err != nil {
		return nil, nil, fmt.Errorf("read dependents: %w", err)
	}
	defer rs.Close()
	depOf := map[int64]int64{}
	var dependents []int64
	for rs.Next() {
		var dep, job int64
		if err := rs.Scan(&dep, &job); err != nil {
			return nil, nil, fmt.Errorf("read dependents: %w", err)
		}
		if _, ok := depOf[job]; !ok {
			depOf[job] = dep
			dependents = append(dependents, job)
		}
	}
	if err := rs.Err(); err != nil {
		return nil, nil, fmt.Errorf("read dependents: %w", err)
	}
	return depOf, dependents, nil
}

// lockWaiting locks dependents and returns those still waiting.
func (s *Store) lockWaiting(ctx context.Context, tx pgx.Tx, dependents []int64) ([]dependent, error) {
	rs, err := tx.Query(ctx, s.q.get(sqlLockDependents), dependents)
	if err != nil {
		return nil, fmt.Errorf("lock dependents: %w", err)
	}
	defer rs.Close()
	var locked []dependent
	for rs.Next() {
		var d dependent
		if err := rs.Scan(&d.id, &d.ignore, &d.attempt, &d.state, &d.hasDependents); err != nil {
			return nil, fmt.Errorf("lock dependents: %w", err)
		}
		if d.state == string(store.JobStateWaiting) {
			locked = append(locked, d)
		}
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("lock dependents: %w", err)
	}
	return locked, nil
}

// releaseDependents releases those of release whose dependencies have all
// finished, and notifies their queues.
func (s *Store) releaseDependents(ctx context.Context, tx pgx.Tx, release []int64, now time.Time) error {
	if len(release) == 0 {
		return nil
	}
	rs, err := tx.Query(ctx, s.q.get(sqlStillWaiting), release)
	if err != nil {
		return fmt.Errorf("read dependencies: %w", err)
	}
	still, err := pgx.CollectRows(rs, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("read dependencies: %w", err)
	}
	release = slices.DeleteFunc(slices.Clone(release), func(id int64) bool { return slices.Contains(still, id) })
	if len(release) == 0 {
		return nil
	}
	rs, err = tx.Query(ctx, s.q.get(sqlRelease), release, now)
	if err != nil {
		return fmt.Errorf("release dependents: %w", err)
	}
	queues, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("release dependents: %w", err)
	}
	slices.Sort(queues)
	return s.notify(ctx, tx, slices.Compact(queues))
}

// cancelDependents cancels plan.cancel and drops their dependency edges.
func (s *Store) cancelDependents(ctx context.Context, tx pgx.Tx, plan *dependentsPlan, now time.Time) error {
	if len(plan.cancel) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlCancelJobs), plan.cancel, now, plan.errs, plan.bys); err != nil {
		return fmt.Errorf("cancel dependents: %w", err)
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlDropDepsOf), plan.cancel); err != nil {
		return fmt.Errorf("cancel dependents: %w", err)
	}
	return nil
}

// cancelPending cancels pending (not running) jobs locked by the caller,
// with msg as their error when not empty, and handles their dependents.
func (s *Store) cancelPending(ctx context.Context, tx pgx.Tx, ids []int64, withDependents []int64, now time.Time, msg string) error {
	if len(ids) == 0 {
		return nil
	}
	errs := make([]*string, len(ids))
	if msg != "" {
		e, err := errorJSON(&store.AttemptError{At: now, Message: msg})
		if err != nil {
			return err
		}
		for i := range errs {
			errs[i] = e
		}
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlCancelJobs), ids, now, errs, make([]*int64, len(ids))); err != nil {
		return fmt.Errorf("cancel jobs: %w", err)
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlDropDepsOf), ids); err != nil {
		return fmt.Errorf("cancel jobs: %w", err)
	}
	return s.depsEnded(ctx, tx, withDependents, store.JobStateCancelled, false, now)
}

// sqlOldestQueued locks a queue's oldest queued jobs.
const sqlOldestQueued = `SELECT id, has_dependents FROM {s}.jobs WHERE queue = $1 AND state IN ` + queuedStates + `
	ORDER BY id LIMIT $2 FOR UPDATE`

// sqlCountDropped adds to a queue's dropped counter.
const sqlCountDropped = `UPDATE {s}.queues SET dropped = dropped + $2 WHERE name = $1`

// dropOldest cancels the q.adding oldest queued jobs of q and returns
// their IDs.
func (s *Store) dropOldest(ctx context.Context, tx pgx.Tx, q *deepQueue, now time.Time) (map[int64]bool, error) {
	rs, err := tx.Query(ctx, s.q.get(sqlOldestQueued), q.name, q.adding)
	if err != nil {
		return nil, fmt.Errorf("find oldest queued jobs: %w", err)
	}
	var ids, withDeps []int64
	for rs.Next() {
		var id int64
		var hasDeps bool
		if err := rs.Scan(&id, &hasDeps); err != nil {
			rs.Close()
			return nil, fmt.Errorf("find oldest queued jobs: %w", err)
		}
		ids = append(ids, id)
		if hasDeps {
			withDeps = append(withDeps, id)
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("find oldest queued jobs: %w", err)
	}
	msg := store.DroppedMessage(q.name, q.maxDepth)
	if err := s.cancelPending(ctx, tx, ids, withDeps, now, msg); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlCountDropped), q.name, len(ids)); err != nil {
		return nil, fmt.Errorf("count dropped jobs: %w", err)
	}
	dropped := make(map[int64]bool, len(ids))
	for _, id := range ids {
		dropped[id] = true
	}
	return dropped, nil
}
