package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/depgraph"
	"github.com/sortiehq/sortie/store/internal/transition"
)

// sqlRetry makes the jobs $1 available or waiting ($3) at $2, with one
// more attempt when they used them all.
const sqlRetry = `UPDATE {s}.jobs SET state = $3, run_at = $2, finalized_at = NULL, lease_until = NULL,
		cancel_requested = false, cancelled_by = NULL,
		max_attempts = CASE WHEN attempt >= max_attempts THEN attempt + 1 ELSE max_attempts END
	WHERE id = ANY($1)`

// sqlLockCancelledBy locks the cancelled jobs that job $1's ending
// cancelled, in ID order. Their IDs are collected first from
// jobs_cancelled_by, so the plan reads that index and never the table.
const sqlLockCancelledBy = `SELECT id, unique_key, depends_on, ignore_dep_failure, has_dependents FROM {s}.jobs
	WHERE id = ANY(ARRAY(SELECT id FROM {s}.jobs WHERE cancelled_by = $1))
		AND state = 'cancelled' AND cancelled_by = $1
	ORDER BY id FOR UPDATE`

// sqlRevive makes a cancelled job wait again.
const sqlRevive = `UPDATE {s}.jobs SET state = 'waiting', finalized_at = NULL, cancelled_by = NULL WHERE id = $1`

// JobRetry makes a job available now, or waiting for the dependencies that
// hold it back, and revives the jobs its ending cancelled, in one
// transaction.
func (s *Store) JobRetry(ctx context.Context, p *store.JobRetryParams) (*store.JobRow, error) {
	return s.adminOp(ctx, store.ActionRetry, p.ID, p.Now)
}

// actRetry is JobRetry's action: it refuses a running job, and a finished
// one whose unique key a pending job holds.
func (s *Store) actRetry(ctx context.Context, tx pgx.Tx, jobs []lockedRow, now time.Time, wake *[]string) ([]error, error) {
	refused := make([]error, len(jobs))
	var moved []lockedRow
	byState := make(map[store.JobState][]int64)
	held := make(map[int64][]int64)
	for i, j := range jobs {
		if skip, err := transition.Retry(j.State); skip {
			refused[i] = err
			continue
		}
		if j.State.Finished() && j.UniqueKey != "" {
			holders, err := s.uniqueHolders(ctx, tx, []string{j.UniqueKey})
			if err != nil {
				return nil, err
			}
			if h, ok := holders[j.UniqueKey]; ok {
				refused[i] = fmt.Errorf("%w: unique key %q is held by job %d (%s)", store.ErrUniqueConflict, j.UniqueKey, h.ID, h.State)
				continue
			}
		}
		h, _, err := s.lockDeps(ctx, tx, j.DependsOn, j.IgnoreDepFailure)
		if err != nil {
			return nil, err
		}
		state := store.JobStateAvailable
		if len(h) > 0 {
			state = store.JobStateWaiting
			held[j.ID] = h
		} else {
			*wake = append(*wake, j.Queue)
		}
		byState[state] = append(byState[state], j.ID)
		moved = append(moved, j)
	}
	for _, state := range []store.JobState{store.JobStateAvailable, store.JobStateWaiting} {
		ids := byState[state]
		if len(ids) == 0 {
			continue
		}
		if _, err := tx.Exec(ctx, s.q.get(sqlRetry), ids, now, string(state)); err != nil {
			if uniqueViolation(err) {
				// Only a job acted on by itself has a unique key.
				return nil, &racedError{fmt.Errorf("%w: unique key %q is held by another pending job", store.ErrUniqueConflict, moved[0].UniqueKey)}
			}
			return nil, fmt.Errorf("retry: %w", err)
		}
	}
	for _, j := range moved {
		if err := s.addDeps(ctx, tx, held[j.ID], j.ID); err != nil {
			return nil, err
		}
		if j.hasDeps {
			if err := s.revive(ctx, tx, j.ID); err != nil {
				return nil, err
			}
		}
	}
	return refused, nil
}

// lockDeps locks the dependencies deps of a job that ignores failures or
// not, flagging them as depended on (so a concurrent finish either saw the
// dependency rows this transaction adds or waits for it), and returns
// those that hold the job back (store.JobState.HoldsBack) and whether all
// of them still exist.
func (s *Store) lockDeps(ctx context.Context, tx pgx.Tx, deps []int64, ignore bool) (held []int64, all bool, err error) {
	if len(deps) == 0 {
		return nil, true, nil
	}
	rs, err := tx.Query(ctx, s.q.get(sqlMarkDependedOn), deps)
	if err != nil {
		return nil, false, fmt.Errorf("read dependencies: %w", err)
	}
	defer rs.Close()
	n := 0
	for rs.Next() {
		var id int64
		var st string
		if err := rs.Scan(&id, &st); err != nil {
			return nil, false, fmt.Errorf("read dependencies: %w", err)
		}
		n++
		if store.JobState(st).HoldsBack(ignore) {
			held = append(held, id)
		}
	}
	if err := rs.Err(); err != nil {
		return nil, false, fmt.Errorf("read dependencies: %w", err)
	}
	return held, n == len(deps), nil
}

// addDeps records that job waits for deps.
func (s *Store) addDeps(ctx context.Context, tx pgx.Tx, deps []int64, job int64) error {
	if len(deps) == 0 {
		return nil
	}
	jobs := make([]int64, len(deps))
	for i := range jobs {
		jobs[i] = job
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlAddDeps), deps, jobs); err != nil {
		return fmt.Errorf("insert dependencies: %w", err)
	}
	return nil
}

// cancelledJob is a job cancelled because of a dependency's ending.
type cancelledJob struct {
	id            int64
	uniqueKey     *string
	dependsOn     []int64
	ignore        bool
	hasDependents bool
}

// revive makes the jobs cancelled because of job id, just retried, wait
// again, and theirs in turn (depgraph.Revive): each costs a few
// statements, and jobs that are not revived one row read.
func (s *Store) revive(ctx context.Context, tx pgx.Tx, id int64) error {
	return depgraph.Revive(reviver{s, ctx, tx}, id)
}

// reviver is the PostgreSQL store's part of depgraph.Revive.
type reviver struct {
	s   *Store
	ctx context.Context
	tx  pgx.Tx
}

// CancelledBy implements depgraph.Reviver.
func (v reviver) CancelledBy(id int64) ([]cancelledJob, error) {
	return v.s.lockCancelledBy(v.ctx, v.tx, id)
}

// Revive implements depgraph.Reviver: the walk goes on from y only when
// it has dependents.
func (v reviver) Revive(y cancelledJob) (int64, error) {
	ok, err := v.s.reviveOne(v.ctx, v.tx, y)
	if !ok || err != nil || !y.hasDependents {
		return 0, err
	}
	return y.id, nil
}

// lockCancelledBy locks and reads the jobs job id's ending cancelled.
func (s *Store) lockCancelledBy(ctx context.Context, tx pgx.Tx, id int64) ([]cancelledJob, error) {
	rs, err := tx.Query(ctx, s.q.get(sqlLockCancelledBy), id)
	if err != nil {
		return nil, fmt.Errorf("read the jobs job %d cancelled: %w", id, err)
	}
	defer rs.Close()
	var out []cancelledJob
	for rs.Next() {
		var y cancelledJob
		var deps []byte
		if err := rs.Scan(&y.id, &y.uniqueKey, &deps, &y.ignore, &y.hasDependents); err != nil {
			return nil, fmt.Errorf("read the jobs job %d cancelled: %w", id, err)
		}
		if deps != nil {
			if err := json.Unmarshal(deps, &y.dependsOn); err != nil {
				return nil, fmt.Errorf("job %d: decode depends_on: %w", y.id, err)
			}
		}
		out = append(out, y)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read the jobs job %d cancelled: %w", id, err)
	}
	return out, nil
}

// reviveOne makes cancelled job y wait again for the dependencies that hold
// it back, and reports whether it did: not when its unique key is held,
// one of its dependencies no longer exists, or none holds it back.
func (s *Store) reviveOne(ctx context.Context, tx pgx.Tx, y cancelledJob) (bool, error) {
	if y.uniqueKey != nil {
		holders, err := s.uniqueHolders(ctx, tx, []string{*y.uniqueKey})
		if err != nil || len(holders) > 0 {
			return false, err
		}
	}
	held, all, err := s.lockDeps(ctx, tx, y.dependsOn, y.ignore)
	if err != nil || !all || len(held) == 0 {
		return false, err
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlRevive), y.id); err != nil {
		if uniqueViolation(err) {
			return false, &racedError{fmt.Errorf("revive job %d: %w: a concurrent enqueue took its unique key; retry again", y.id, store.ErrUniqueConflict)}
		}
		return false, fmt.Errorf("revive job %d: %w", y.id, err)
	}
	return true, s.addDeps(ctx, tx, held, y.id)
}
