package sqlitestore

import (
	"context"
	"fmt"

	"github.com/sortiehq/sortie/store"
)

// JobEnqueueMany inserts p.Jobs atomically in one transaction, shared with
// the other writes queued at the same moment (group commit). It returns only
// after the commit, synced to disk under SynchronousFull. A job with an empty
// Kind or Queue fails the whole call. Priority and MaxAttempts are stored as
// given.
func (s *Store) JobEnqueueMany(ctx context.Context, p *store.JobEnqueueManyParams) ([]store.EnqueueResult, error) {
	if len(p.Jobs) == 0 {
		return []store.EnqueueResult{}, nil
	}
	// Encode outside the writer, so callers do this work in parallel.
	results, args, err := encodeJobs(p)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: enqueue: %w", err)
	}
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error { return enqueue(t, r, p.Jobs, args, results) }
	if err := s.do(ctx, r); err != nil {
		return nil, opErr("enqueue", err)
	}
	return results, nil
}

// encodeJobs validates p's jobs and returns their results (State filled in)
// and the INSERT arguments, insertRowParams per job, with the ID left nil.
func encodeJobs(p *store.JobEnqueueManyParams) ([]store.EnqueueResult, []any, error) {
	results := make([]store.EnqueueResult, len(p.Jobs))
	now := micros(p.Now)
	args := make([]any, 0, len(p.Jobs)*insertRowParams)
	for i, j := range p.Jobs {
		if j == nil {
			return nil, nil, fmt.Errorf("job %d of %d is nil", i, len(p.Jobs))
		}
		if j.Kind == "" {
			return nil, nil, fmt.Errorf("job %d of %d has an empty Kind", i, len(p.Jobs))
		}
		if j.Queue == "" {
			return nil, nil, fmt.Errorf("job %d of %d (kind %q) has an empty Queue", i, len(p.Jobs), j.Kind)
		}
		state, runAt := store.JobStateAvailable, now
		if !j.RunAt.IsZero() {
			runAt = micros(j.RunAt)
			if j.RunAt.After(p.Now) {
				state = store.JobStateScheduled
			}
		}
		tags, err := tagsArg(j.Tags)
		if err != nil {
			return nil, nil, fmt.Errorf("job %d of %d: encode tags: %w", i, len(p.Jobs), err)
		}
		results[i].State = state
		args = append(args, nil, j.Kind, j.Queue, bytesArg(j.Args), string(state), j.Priority, j.MaxAttempts,
			runAt, now, nullString(j.UniqueKey), tags, bytesArg(j.Meta), int64(j.Timeout))
	}
	return results, args, nil
}

// enqueue runs in the writer: it resolves unique keys, assigns IDs in batch
// order and inserts the new jobs with multi-row INSERTs.
func enqueue(t *txn, r *request, jobs []*store.NewJob, args []any, results []store.EnqueueResult) error {
	st := t.w.stmts
	// Unique keys: a pending holder in the table, or an earlier job of this
	// batch, makes the job a duplicate.
	var dupOf map[string]int // key -> index of the batch's first job with it
	insert := len(jobs)
	for i, j := range jobs {
		results[i].ID, results[i].Duplicate = 0, false
		if j.UniqueKey == "" {
			continue
		}
		if first, ok := dupOf[j.UniqueKey]; ok {
			results[i] = store.EnqueueResult{ID: int64(-1 - first), Duplicate: true}
			insert--
			continue
		}
		var id int64
		var state string
		err := st.uniqueHolder.QueryRowContext(t.ctx, j.UniqueKey).Scan(&id, &state)
		switch {
		case err == nil:
			results[i] = store.EnqueueResult{ID: id, Duplicate: true, State: store.JobState(state)}
			insert--
		case errNoRows(err):
		default:
			return fmt.Errorf("look up unique key %q: %w", j.UniqueKey, err)
		}
		if dupOf == nil {
			dupOf = make(map[string]int)
		}
		dupOf[j.UniqueKey] = i
	}
	if insert == 0 {
		resolveBatchDuplicates(results)
		return nil
	}
	id, err := t.allocIDs(insert)
	if err != nil {
		return err
	}
	rows := args
	if insert < len(jobs) {
		rows = make([]any, 0, insert*insertRowParams)
	}
	for i := range jobs {
		if results[i].Duplicate {
			continue
		}
		results[i].ID = id
		row := args[i*insertRowParams : (i+1)*insertRowParams]
		row[0] = id
		if insert < len(jobs) {
			rows = append(rows, row...)
		}
		id++
		r.count(jobs[i].Queue, results[i].State, 1)
		r.wake(jobs[i].Queue)
	}
	resolveBatchDuplicates(results)
	for c, size := range insertChunks {
		for len(rows) >= size*insertRowParams {
			n := size * insertRowParams
			if _, err := st.insert[c].ExecContext(t.ctx, rows[:n]...); err != nil {
				return fmt.Errorf("insert jobs: %w", err)
			}
			rows = rows[n:]
		}
	}
	return nil
}

// resolveBatchDuplicates fills in the results of jobs that duplicated an
// earlier job of the same batch (marked with ID -1-index).
func resolveBatchDuplicates(results []store.EnqueueResult) {
	for i := range results {
		if results[i].Duplicate && results[i].ID < 0 {
			first := results[-1-results[i].ID]
			results[i] = store.EnqueueResult{ID: first.ID, Duplicate: true, State: first.State}
		}
	}
}
