package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/depgraph"
	"github.com/sortiehq/sortie/store/internal/transition"
)

// JobRetry makes a job available now, or waiting for the dependencies that
// hold it back, and revives the jobs its ending cancelled; see store.Store.
func (s *Store) JobRetry(ctx context.Context, p *store.JobRetryParams) (*store.JobRow, error) {
	return s.adminOp(ctx, store.ActionRetry, p.ID, p.Now)
}

// actRetry is JobRetry's action: it refuses a running job, and a finished
// one whose unique key a pending job holds.
func actRetry(t *txn, r *request, jobs []*store.JobRow, now time.Time, alone bool) ([]error, error) {
	refused := make([]error, len(jobs))
	type move struct {
		finished bool
		state    store.JobState
	}
	var order []move
	var moved []*store.JobRow
	moves := make(map[move][]*store.JobRow)
	held := make(map[int64][]int64)
	for i, j := range jobs {
		if skip, err := transition.Retry(j.State); skip {
			refused[i] = err
			continue
		}
		if j.State.Finished() {
			if err := keyFree(t, j.UniqueKey); store.Plain(err) {
				refused[i] = err
				continue
			} else if err != nil {
				return nil, err
			}
		}
		h, err := heldBy(t, j.DependsOn, j.IgnoreDepFailure)
		if err != nil {
			return nil, err
		}
		m := move{j.State.Finished(), store.JobStateAvailable}
		if len(h) > 0 {
			m.state = store.JobStateWaiting
			held[j.ID] = h
		}
		if moves[m] == nil {
			order = append(order, m)
		}
		moves[m] = append(moves[m], j)
		moved = append(moved, j)
	}
	st := t.w.stmts
	at := micros(now)
	for _, m := range order {
		list := t.idList(idsOf(moves[m]))
		if m.finished {
			if _, err := st.retryFinished.ExecContext(t.ctx, list, at, string(m.state)); err != nil {
				return nil, fmt.Errorf("retry: %w", err)
			}
			if _, err := st.deleteFinishedMany.ExecContext(t.ctx, list); err != nil {
				return nil, fmt.Errorf("retry: %w", err)
			}
		} else if _, err := st.retryPending.ExecContext(t.ctx, list, at, string(m.state)); err != nil {
			return nil, fmt.Errorf("retry: %w", err)
		}
		for _, j := range moves[m] {
			r.count(j.Queue, j.State, -1)
			r.count(j.Queue, m.state, 1)
			if m.state == store.JobStateAvailable {
				r.wake(j.Queue)
			}
		}
	}
	for _, j := range moved {
		if err := addDeps(t, held[j.ID], j.ID); err != nil {
			return nil, err
		}
		if alone {
			continue
		}
		if err := revive(t, r, j.ID); err != nil {
			return nil, err
		}
	}
	return refused, nil
}

// keyFree returns ErrUniqueConflict when a pending job holds key.
func keyFree(t *txn, key string) error {
	id, state, err := keyHolder(t, key)
	if err == nil && id != 0 {
		err = fmt.Errorf("%w: unique key %q is held by job %d (%s)", store.ErrUniqueConflict, key, id, state)
	}
	return err
}

// keyHolder returns the pending job holding key, ID 0 when none does.
func keyHolder(t *txn, key string) (int64, string, error) {
	if key == "" {
		return 0, "", nil
	}
	var id int64
	var state string
	err := t.w.stmts.uniqueHolder.QueryRowContext(t.ctx, key).Scan(&id, &state)
	if errNoRows(err) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("look up unique key: %w", err)
	}
	return id, state, nil
}

// heldBy returns the dependencies among deps that hold back a job that
// ignores failures or not (store.JobState.HoldsBack); one that no longer
// exists does not.
func heldBy(t *txn, deps []int64, ignore bool) ([]int64, error) {
	var held []int64
	for _, d := range deps {
		state, err := jobState(t, d)
		if err != nil {
			return nil, err
		}
		if state.HoldsBack(ignore) {
			held = append(held, d)
		}
	}
	return held, nil
}

// jobState returns the state of job id, "" when it does not exist.
func jobState(t *txn, id int64) (store.JobState, error) {
	var v string
	err := t.w.stmts.jobState.QueryRowContext(t.ctx, id).Scan(&v)
	if errNoRows(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read dependency %d: %w", id, err)
	}
	return store.JobState(v), nil
}

// addDeps records that job waits for deps.
func addDeps(t *txn, deps []int64, job int64) error {
	for _, d := range deps {
		if _, err := t.w.stmts.depAdd.ExecContext(t.ctx, d, job); err != nil {
			return fmt.Errorf("insert dependencies: %w", err)
		}
		t.hasDeps = true
	}
	return nil
}

// cancelledJob is a job cancelled because of a dependency's ending.
type cancelledJob struct {
	id        int64
	queue     string
	uniqueKey string
	dependsOn []int64
	ignore    bool
}

// revive makes the jobs cancelled because of job id, just retried, wait
// again, and theirs in turn (depgraph.Revive). Each costs a few statements
// per dependency; jobs that are not revived cost one row read. When no
// finished job was cancelled by a dependency (anyCancelledBy) it costs
// nothing.
func revive(t *txn, r *request, id int64) error {
	if some, err := anyCancelledBy(t); err != nil || !some {
		return err
	}
	return depgraph.Revive(reviver{t, r}, id)
}

// reviver is the SQLite store's part of depgraph.Revive.
type reviver struct {
	t *txn
	r *request
}

// CancelledBy implements depgraph.Reviver: it reads the jobs whose
// cancelled_by is id, in ID order.
func (v reviver) CancelledBy(id int64) ([]cancelledJob, error) {
	rows, err := v.t.w.stmts.cancelledBecause.QueryContext(v.t.ctx, id)
	if err != nil {
		return nil, fmt.Errorf("read the jobs job %d cancelled: %w", id, err)
	}
	defer rows.Close()
	var out []cancelledJob
	for rows.Next() {
		var y cancelledJob
		var key, deps sql.NullString
		if err := rows.Scan(&y.id, &y.queue, &key, &deps, &y.ignore); err != nil {
			return nil, fmt.Errorf("read the jobs job %d cancelled: %w", id, err)
		}
		y.uniqueKey = key.String
		if y.dependsOn, err = decodeDeps(y.id, deps); err != nil {
			return nil, err
		}
		out = append(out, y)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the jobs job %d cancelled: %w", id, err)
	}
	return out, nil
}

// Revive implements depgraph.Reviver.
func (v reviver) Revive(y cancelledJob) (int64, error) {
	ok, err := v.reviveOne(y)
	if !ok || err != nil {
		return 0, err
	}
	return y.id, nil
}

// reviveOne makes cancelled job y wait again for the dependencies that hold
// it back, and reports whether it did.
func (v reviver) reviveOne(y cancelledJob) (bool, error) {
	t, r := v.t, v.r
	if holder, _, err := keyHolder(t, y.uniqueKey); err != nil || holder != 0 {
		return false, err
	}
	var held []int64
	for _, d := range y.dependsOn {
		state, err := jobState(t, d)
		if err != nil || state == "" {
			return false, err
		}
		if state.HoldsBack(y.ignore) {
			held = append(held, d)
		}
	}
	if len(held) == 0 {
		return false, nil
	}
	st := t.w.stmts
	if _, err := st.reviveFinished.ExecContext(t.ctx, y.id); err != nil {
		return false, fmt.Errorf("revive job %d: %w", y.id, err)
	}
	if _, err := st.deleteFinished.ExecContext(t.ctx, y.id); err != nil {
		return false, fmt.Errorf("revive job %d: %w", y.id, err)
	}
	if err := addDeps(t, held, y.id); err != nil {
		return false, err
	}
	r.count(y.queue, store.JobStateCancelled, -1)
	r.count(y.queue, store.JobStateWaiting, 1)
	return true, nil
}
