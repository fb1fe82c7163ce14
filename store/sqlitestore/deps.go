package sqlitestore

import (
	"fmt"
	"time"

	"github.com/sortiehq/sortie/store"
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
	dep, id int64
	queue   string
	ignore  bool
	attempt int
}

// depsEnded handles the waiting dependents of ids, which ended in state
// (completed, cancelled or dead), or were deleted: a dependent whose
// dependencies have now all finished becomes available (scheduled if its
// RunAt is later); when the jobs ended dead or cancelled, a dependent without
// IgnoreDepFailure is cancelled with an error naming the dependency (which
// is recorded as its cancelled_by, unless it was deleted), and so on down
// the graph. With no dependents it costs one index probe.
func depsEnded(t *txn, r *request, ids []int64, state store.JobState, deleted bool, now time.Time) error {
	if err := t.loadSequences(); err != nil {
		return err
	}
	if !t.hasDeps {
		return nil
	}
	st := t.w.stmts
	for len(ids) > 0 {
		list := t.idList(ids)
		rows, err := st.dependentsOf.QueryContext(t.ctx, list)
		if err != nil {
			return fmt.Errorf("read dependents: %w", err)
		}
		var deps []dependent
		for rows.Next() {
			var d dependent
			if err := rows.Scan(&d.dep, &d.id, &d.queue, &d.ignore, &d.attempt); err != nil {
				rows.Close()
				return fmt.Errorf("read dependents: %w", err)
			}
			deps = append(deps, d)
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("read dependents: %w", err)
		}
		if len(deps) == 0 {
			return nil
		}
		if _, err := st.depsDeleteDeps.ExecContext(t.ctx, list); err != nil {
			return fmt.Errorf("delete dependencies: %w", err)
		}
		var next []int64
		seen := make(map[int64]bool, len(deps))
		for _, d := range deps {
			if seen[d.id] {
				continue
			}
			seen[d.id] = true
			if state == store.JobStateCompleted || d.ignore {
				var left bool
				if err := st.depsLeft.QueryRowContext(t.ctx, d.id).Scan(&left); err != nil {
					return fmt.Errorf("read dependencies of job %d: %w", d.id, err)
				}
				if left {
					continue
				}
				var ns string
				if err := st.makeReady.QueryRowContext(t.ctx, d.id, micros(now)).Scan(&ns); err != nil {
					return fmt.Errorf("release job %d: %w", d.id, err)
				}
				r.count(d.queue, store.JobStateWaiting, -1)
				r.count(d.queue, store.JobState(ns), 1)
				r.wake(d.queue)
				continue
			}
			msg := store.DependencyEndedMessage(d.dep, state)
			if deleted {
				msg = store.DependencyDeletedMessage(d.dep)
			}
			e := &store.AttemptError{Attempt: d.attempt, At: now, Message: msg}
			if err := finishOne(t, d.id, store.JobStateCancelled, micros(now), e); err != nil {
				return err
			}
			if !deleted {
				if err := markCancelledBy(t, d.id, d.dep); err != nil {
					return err
				}
			}
			if _, err := st.depsDeleteJob.ExecContext(t.ctx, d.id); err != nil {
				return fmt.Errorf("delete dependencies of job %d: %w", d.id, err)
			}
			r.count(d.queue, store.JobStateWaiting, -1)
			r.count(d.queue, store.JobStateCancelled, 1)
			r.counted(d.queue, now, store.JobStateCancelled, false)
			r.ended = append(r.ended, d.id)
			next = append(next, d.id)
		}
		ids, state, deleted = next, store.JobStateCancelled, false
	}
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
