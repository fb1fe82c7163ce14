package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/imported"
)

// The SQL of JobImport. A pending job goes to jobs, a finished one to
// finished_jobs with the cause of its cancellation.
const (
	sqlImportPending  = `INSERT INTO jobs (` + jobColumns + `) VALUES (` + importSlots + `)`
	sqlImportFinished = `INSERT INTO finished_jobs (` + jobColumns + `, cancelled_by) VALUES (` + importSlots + `, ?32)`
	importSlots       = `?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20,
		?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31`
	// sqlImportFound reads the stored jobs among the IDs of the JSON array
	// ?1: what SameImportedJob compares, and the state.
	sqlImportFound = `SELECT id, kind, queue, args, created_at, state FROM jobs WHERE id IN (SELECT value FROM json_each(?1))
		UNION ALL SELECT id, kind, queue, args, created_at, state FROM finished_jobs WHERE id IN (SELECT value FROM json_each(?1))`
	// sqlImportHolders reads the pending jobs holding the keys of the JSON
	// array ?1.
	sqlImportHolders = `SELECT unique_key, id FROM jobs WHERE unique_key IN (SELECT value FROM json_each(?1))`
	// sqlImportDepState reads the state of job ?1, wherever it is.
	sqlImportDepState = `SELECT state FROM jobs WHERE id = ?1 UNION ALL SELECT state FROM finished_jobs WHERE id = ?1`
)

// JobImport writes exported jobs as they were, in one transaction, or
// none of them. See store.Store.
func (s *Store) JobImport(ctx context.Context, p *store.JobImportParams) ([]store.ImportResult, error) {
	if err := store.ImportValidate(p.Jobs); err != nil {
		return nil, opErr("import", err)
	}
	rows := make([][]any, len(p.Jobs))
	for i, j := range p.Jobs {
		var err error
		if rows[i], err = importArgs(j); err != nil {
			return nil, opErr("import", fmt.Errorf("job %d: %w", j.ID, err))
		}
	}
	var res []store.ImportResult
	r := &request{durable: !p.DryRun}
	r.op = func(t *txn, r *request) error {
		var err error
		res, err = importJobs(t, r, p, rows)
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return nil, opErr("import", err)
	}
	return res, nil
}

// importArgs returns the values of job j's row, in jobColumns order and
// then cancelled_by.
func importArgs(j *store.JobRow) ([]any, error) {
	tags, err := tagsArg(j.Tags)
	if err != nil {
		return nil, err
	}
	var errs, deps any
	if len(j.Errors) > 0 {
		b, err := json.Marshal(j.Errors)
		if err != nil {
			return nil, err
		}
		errs = string(b)
	}
	if len(j.DependsOn) > 0 {
		deps = string(appendIDs(nil, j.DependsOn))
	}
	return []any{j.ID, j.Kind, j.Queue, bytesArg(j.Args), string(j.State), j.Priority, j.Attempt, j.MaxAttempts,
		micros(j.RunAt), micros(j.CreatedAt), nullMicros(j.AttemptedAt), nullString(j.AttemptedBy),
		nullMicros(j.FinalizedAt), nullMicros(j.LeaseUntil), j.ClaimToken, nullString(j.UniqueKey), errs, tags,
		bytesArg(j.Meta), int64(j.Timeout), nullString(j.PartitionKey), bytesArg(j.Result), j.Progress,
		j.CancelRequested, nullInt(j.WorkflowID), deps, j.IgnoreDepFailure,
		nullInt(j.ParentID), nullString(j.SpawnStep), j.CancelWithParent, nullString(j.WaitsFor), nullInt(j.CancelledBy)}, nil
}

// nullMicros encodes a time as micros, the zero time as NULL.
func nullMicros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return micros(t)
}

// nullInt binds 0 as NULL.
func nullInt(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

// importJobs runs in the writer: it checks every job, and unless one
// conflicts or p is a dry run, inserts the added ones with their
// dependency edges, counters and sequences.
func importJobs(t *txn, r *request, p *store.JobImportParams, rows [][]any) ([]store.ImportResult, error) {
	res, states, err := importCheck(t, p.Jobs)
	if err != nil || p.DryRun {
		return res, err
	}
	for _, x := range res {
		if x.Status.Conflict() {
			return res, nil
		}
	}
	pending, err := t.w.conn.PrepareContext(t.ctx, sqlImportPending)
	if err != nil {
		return nil, err
	}
	defer pending.Close()
	finished, err := t.w.conn.PrepareContext(t.ctx, sqlImportFinished)
	if err != nil {
		return nil, err
	}
	defer finished.Close()
	if err := t.loadSequences(); err != nil {
		return nil, err
	}
	var touched []int64 // jobs that may wait at an Await this call can end
	for i, j := range p.Jobs {
		if res[i].Status != store.ImportAdded {
			continue
		}
		state, err := importState(t, j, states, p)
		if err != nil {
			return nil, err
		}
		states[j.ID] = state
		row := rows[i]
		row[rowState] = string(state)
		if state.Finished() {
			_, err = finished.ExecContext(t.ctx, row...)
		} else {
			_, err = pending.ExecContext(t.ctx, row[:len(row)-1]...)
		}
		if err != nil {
			return nil, fmt.Errorf("insert job %d: %w", j.ID, err)
		}
		if state == store.JobStateWaiting {
			if err := importDeps(t, j, states); err != nil {
				return nil, err
			}
		}
		if err := importSteps(t, j); err != nil {
			return nil, err
		}
		if j.WaitsFor != "" && state == store.JobStateWaiting {
			touched = append(touched, j.ID)
		}
		if j.ParentID != 0 {
			touched = append(touched, j.ParentID)
		}
		r.count(j.Queue, state, 1)
		if state == store.JobStateAvailable {
			r.wake(j.Queue)
		}
		if j.ID >= t.nextID {
			t.nextID, t.idDirty = j.ID+1, true
		}
		if j.ClaimToken >= t.nextToken {
			t.nextToken, t.tokDirty = j.ClaimToken+1, true
		}
	}
	return res, importAwaits(t, r, touched)
}

// importCheck says what JobImport would do with each job, and returns the
// states of the stored jobs among them.
func importCheck(t *txn, jobs []*store.JobRow) ([]store.ImportResult, map[int64]store.JobState, error) {
	ids := make([]int64, len(jobs))
	var keys []string
	for i, j := range jobs {
		ids[i] = j.ID
		if j.UniqueKey != "" && j.State.Pending() {
			keys = append(keys, j.UniqueKey)
		}
	}
	found, states, err := importFound(t, ids)
	if err != nil {
		return nil, nil, err
	}
	holders, err := importHolders(t, keys)
	if err != nil {
		return nil, nil, err
	}
	res, _ := imported.Statuses(jobs, func(id int64) *store.JobRow { return found[id] }, func(key string) (int64, bool) {
		id, ok := holders[key]
		return id, ok
	})
	return res, states, nil
}

// importFound reads the stored jobs with the given IDs.
func importFound(t *txn, ids []int64) (map[int64]*store.JobRow, map[int64]store.JobState, error) {
	rs, err := t.w.conn.QueryContext(t.ctx, sqlImportFound, t.idList(ids))
	if err != nil {
		return nil, nil, fmt.Errorf("read stored jobs: %w", err)
	}
	defer rs.Close()
	found := make(map[int64]*store.JobRow)
	states := make(map[int64]store.JobState)
	for rs.Next() {
		var (
			j         store.JobRow
			createdAt int64
			state     string
		)
		if err := rs.Scan(&j.ID, &j.Kind, &j.Queue, &j.Args, &createdAt, &state); err != nil {
			return nil, nil, fmt.Errorf("read stored jobs: %w", err)
		}
		j.CreatedAt = fromMicros(createdAt)
		found[j.ID] = &j
		states[j.ID] = store.JobState(state)
	}
	return found, states, rs.Err()
}

// importHolders maps each of keys held by a pending job to that job.
func importHolders(t *txn, keys []string) (map[string]int64, error) {
	holders := make(map[string]int64)
	if len(keys) == 0 {
		return holders, nil
	}
	b, err := json.Marshal(keys)
	if err != nil {
		return nil, err
	}
	rs, err := t.w.conn.QueryContext(t.ctx, sqlImportHolders, string(b))
	if err != nil {
		return nil, fmt.Errorf("read unique keys: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var (
			k  string
			id int64
		)
		if err := rs.Scan(&k, &id); err != nil {
			return nil, fmt.Errorf("read unique keys: %w", err)
		}
		holders[k] = id
	}
	return holders, rs.Err()
}

// importState returns the state job j is stored in (imported.State),
// from the states of its dependencies: known (imported earlier in the
// call, or found), else read.
func importState(t *txn, j *store.JobRow, states map[int64]store.JobState, p *store.JobImportParams) (store.JobState, error) {
	if j.State != store.JobStateWaiting {
		return j.State, nil
	}
	holds := make([]bool, len(j.DependsOn))
	for k, d := range j.DependsOn {
		st, ok := states[d]
		if !ok {
			var s string
			err := t.w.conn.QueryRowContext(t.ctx, sqlImportDepState, d).Scan(&s)
			if err != nil && !errNoRows(err) {
				return "", fmt.Errorf("job %d: read dependency %d: %w", j.ID, d, err)
			}
			st = store.JobState(s) // "" for a job that no longer exists
			states[d] = st
		}
		holds[k] = st != "" && st.HoldsBack(j.IgnoreDepFailure)
	}
	return imported.State(j, holds, p.Now), nil
}

// importDeps inserts the dependency edges of waiting job j: one per
// dependency that holds it back.
func importDeps(t *txn, j *store.JobRow, states map[int64]store.JobState) error {
	t.hasDeps = true
	for _, d := range j.DependsOn {
		if st := states[d]; st != "" && st.HoldsBack(j.IgnoreDepFailure) {
			if _, err := t.w.stmts.depAdd.ExecContext(t.ctx, d, j.ID); err != nil {
				return fmt.Errorf("job %d: insert dependency %d: %w", j.ID, d, err)
			}
		}
	}
	return nil
}
