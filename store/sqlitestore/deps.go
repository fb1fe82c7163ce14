package sqlitestore

import (
	"fmt"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/depgraph"
)

// cancelJobs cancels the pending (not running) jobs, read as actTargets
// reads them, with one statement per table, recording msg as an error when
// not empty. The caller handles their dependents (depsEnded).
func cancelJobs(t *txn, r *request, jobs []*store.JobRow, now time.Time, msg string) error {
	var errArg any
	if msg != "" {
		var err error
		if errArg, err = optErrorArg(&store.AttemptError{At: now, Message: msg}); err != nil {
			return err
		}
	}
	list := t.idList(idsOf(jobs))
	if _, err := t.w.stmts.finishMany.ExecContext(t.ctx, list, string(store.JobStateCancelled), micros(now), errArg); err != nil {
		return fmt.Errorf("cancel jobs: %w", err)
	}
	if _, err := t.w.stmts.deleteMany.ExecContext(t.ctx, list); err != nil {
		return fmt.Errorf("cancel jobs: %w", err)
	}
	for _, j := range jobs {
		if j.State == store.JobStateWaiting {
			if _, err := t.w.stmts.depsDeleteJob.ExecContext(t.ctx, j.ID); err != nil {
				return fmt.Errorf("delete dependencies of job %d: %w", j.ID, err)
			}
		}
		r.count(j.Queue, j.State, -1)
		r.count(j.Queue, store.JobStateCancelled, 1)
		r.counted(j.Queue, now, store.JobStateCancelled, false)
		r.ended = append(r.ended, j.ID)
	}
	return nil
}

// dependent is a waiting job that depends on a job that ended.
type dependent struct {
	id      int64
	queue   string
	attempt int
}

// depsEnded handles the waiting dependents of ids, which ended in state
// (completed, cancelled or dead), or were deleted (depgraph.Cascade). With
// no dependents it costs one index probe.
func depsEnded(t *txn, r *request, ids []int64, state store.JobState, deleted bool, now time.Time) error {
	if err := t.loadSequences(); err != nil {
		return err
	}
	if !t.hasDeps {
		return nil
	}
	return depgraph.Cascade(cascader{t, r, now}, ids, state, deleted)
}

// cascader is the SQLite store's part of depgraph.Cascade.
type cascader struct {
	t   *txn
	r   *request
	now time.Time
}

// Dependents implements depgraph.Cascader.
func (c cascader) Dependents(ids []int64) ([]depgraph.Dependent[dependent], error) {
	st := c.t.w.stmts
	list := c.t.idList(ids)
	rows, err := st.dependentsOf.QueryContext(c.t.ctx, list)
	if err != nil {
		return nil, fmt.Errorf("read dependents: %w", err)
	}
	var deps []depgraph.Dependent[dependent]
	seen := make(map[int64]bool)
	for rows.Next() {
		var d depgraph.Dependent[dependent]
		if err := rows.Scan(&d.Dep, &d.Row.id, &d.Row.queue, &d.Ignore, &d.Row.attempt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read dependents: %w", err)
		}
		if !seen[d.Row.id] {
			seen[d.Row.id] = true
			deps = append(deps, d)
		}
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("read dependents: %w", err)
	}
	if len(deps) == 0 {
		return nil, nil
	}
	if _, err := st.depsDeleteDeps.ExecContext(c.t.ctx, list); err != nil {
		return nil, fmt.Errorf("delete dependencies: %w", err)
	}
	return deps, nil
}

// Apply implements depgraph.Cascader.
func (c cascader) Apply(ds []depgraph.Dependent[dependent]) ([]int64, error) {
	var next []int64
	for _, d := range ds {
		var err error
		if d.Fate.Release {
			err = c.release(d.Row)
		} else {
			err = c.cancel(d.Row, d.Fate)
			next = append(next, d.Row.id)
		}
		if err != nil {
			return nil, err
		}
	}
	return next, nil
}

// release makes d ready when no dependency holds it back any more.
func (c cascader) release(d dependent) error {
	st := c.t.w.stmts
	var left bool
	if err := st.depsLeft.QueryRowContext(c.t.ctx, d.id).Scan(&left); err != nil {
		return fmt.Errorf("read dependencies of job %d: %w", d.id, err)
	}
	if left {
		return nil
	}
	var ns string
	if err := st.makeReady.QueryRowContext(c.t.ctx, d.id, micros(c.now)).Scan(&ns); err != nil {
		return fmt.Errorf("release job %d: %w", d.id, err)
	}
	c.r.count(d.queue, store.JobStateWaiting, -1)
	c.r.count(d.queue, store.JobState(ns), 1)
	c.r.wake(d.queue)
	return nil
}

// cancel cancels d as f says.
func (c cascader) cancel(d dependent, f depgraph.Fate) error {
	e := &store.AttemptError{Attempt: d.attempt, At: c.now, Message: f.Message}
	if err := finishOne(c.t, d.id, store.JobStateCancelled, micros(c.now), e); err != nil {
		return err
	}
	if f.By != 0 {
		if err := markCancelledBy(c.t, d.id, f.By); err != nil {
			return err
		}
	}
	if _, err := c.t.w.stmts.depsDeleteJob.ExecContext(c.t.ctx, d.id); err != nil {
		return fmt.Errorf("delete dependencies of job %d: %w", d.id, err)
	}
	c.r.count(d.queue, store.JobStateWaiting, -1)
	c.r.count(d.queue, store.JobStateCancelled, 1)
	c.r.counted(d.queue, c.now, store.JobStateCancelled, false)
	c.r.ended = append(c.r.ended, d.id)
	return nil
}

// The values of txn.cancelledBy.
const (
	cbUnknown int8 = iota
	cbNone
	cbSome
)

// anyCancelledBy reports whether a finished job may have a cancelled_by:
// one index probe per request, which the marks it makes keep true. A
// request reads it afresh, since another request of its group may have
// written such a job with a statement of its own.
func anyCancelledBy(t *txn) (bool, error) {
	if t.cancelledBy == cbUnknown {
		var some bool
		if err := t.w.stmts.anyCancelledBy.QueryRowContext(t.ctx).Scan(&some); err != nil {
			return false, fmt.Errorf("look for cancelled dependents: %w", err)
		}
		t.cancelledBy = cbNone
		if some {
			t.cancelledBy = cbSome
		}
	}
	return t.cancelledBy == cbSome, nil
}

// markCancelledBy records that finished job id was cancelled because its
// dependency dep ended dead or cancelled, so that a retry of dep revives it.
func markCancelledBy(t *txn, id, dep int64) error {
	t.cancelledBy = cbSome
	if _, err := t.w.stmts.markCancelledBy.ExecContext(t.ctx, id, dep); err != nil {
		return fmt.Errorf("record the cause of cancelling job %d: %w", id, err)
	}
	return nil
}
