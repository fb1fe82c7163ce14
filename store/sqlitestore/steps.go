package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/steps"
)

// The SQL of durable steps (see schemaSteps).
const (
	// sqlStepRecord records a step of job ?1 if it runs under claim ?2,
	// unless the job has a step of that name; it returns the job's ID when
	// it recorded one.
	sqlStepRecord = `INSERT INTO job_steps (job_id, name, seq, kind, attempt, recorded_at, result, until)
		SELECT id, ?3, (SELECT count(*) FROM job_steps WHERE job_id = ?1), ?4, attempt, ?5, ?6, ?7
		FROM jobs WHERE id = ?1 AND claim_token = ?2 AND state = 'running'
		ON CONFLICT (job_id, name) DO NOTHING
		RETURNING job_id`
	// sqlStepClaim reads what a step call needs of job ?1 if it runs
	// under claim ?2.
	sqlStepClaim = `SELECT queue, attempt, cancel_requested FROM jobs WHERE id = ?1 AND claim_token = ?2 AND state = 'running'`
	// sqlStepOne reads step ?2 of job ?1.
	sqlStepOne = `SELECT kind, until, children, pending FROM job_steps WHERE job_id = ?1 AND name = ?2`
	// sqlSuspend ends the running attempt of job ?1 at step ?4: state ?2,
	// RunAt ?3, the attempt not counted.
	sqlSuspend = `UPDATE jobs SET state = ?2, run_at = ?3, attempt = attempt - 1, lease_until = NULL, waits_for = ?4
		WHERE id = ?1`
	// sqlSpawnStep records spawn step ?2 of job ?1 with its children.
	sqlSpawnStep = `UPDATE job_steps SET children = ?3, child_count = ?4, pending = ?5 WHERE job_id = ?1 AND name = ?2`
	// sqlSpawnLink names the parent and spawn step of the children (the
	// JSON array ?1), wherever they went: a child enqueued cancelled is
	// finished already.
	sqlSpawnLink         = `UPDATE jobs SET parent_id = ?2, spawn_step = ?3, cancel_with_parent = ?4 WHERE id IN (SELECT value FROM json_each(?1))`
	sqlSpawnLinkFinished = `UPDATE finished_jobs SET parent_id = ?2, spawn_step = ?3, cancel_with_parent = ?4 WHERE id IN (SELECT value FROM json_each(?1))`
	sqlSpawned           = `UPDATE sortie_meta SET value = 1 WHERE key = 'spawned' AND value = 0`
	// sqlStepWakes takes the parents the triggers queued for release.
	sqlStepWakes = `DELETE FROM step_wakes RETURNING job_id`
	// sqlReleaseAwait makes job ?1 available if it still waits at a spawn
	// step none of whose children is pending.
	sqlReleaseAwait = `UPDATE jobs SET state = 'available', waits_for = NULL
		WHERE id = ?1 AND state = 'waiting' AND waits_for IS NOT NULL
			AND (SELECT pending FROM job_steps s WHERE s.job_id = jobs.id AND s.name = jobs.waits_for) = 0
		RETURNING queue`
	// sqlLinkedChildren reads the pending children of job ?1 to cancel
	// with it.
	sqlLinkedChildren = `SELECT id, state, queue, unique_key, depends_on, ignore_dep_failure FROM jobs
		WHERE parent_id = ?1 AND cancel_with_parent = 1`
	// sqlLinkedAny reads which jobs of the JSON array ?1 are spawned
	// children or spawned some.
	sqlLinkedAny = `SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(?1)) AND parent_id IS NOT NULL
		UNION SELECT id FROM finished_jobs WHERE id IN (SELECT value FROM json_each(?1)) AND parent_id IS NOT NULL
		UNION SELECT job_id FROM job_steps WHERE job_id IN (SELECT value FROM json_each(?1)) AND kind = 'spawn'`
	sqlStepsDelete = `DELETE FROM job_steps WHERE job_id IN (SELECT value FROM json_each(?1))`
	// sqlStepList reads a job's steps in order; sqlStepSummaries those of
	// the jobs of the JSON array ?1, without results and children.
	sqlStepList = `SELECT name, kind, attempt, recorded_at, result, until, children, child_count, pending
		FROM job_steps WHERE job_id = ?1 ORDER BY seq`
	sqlStepSummaries = `SELECT job_id, name, kind, attempt, recorded_at, length(result), until, child_count, pending
		FROM job_steps WHERE job_id IN (SELECT value FROM json_each(?1)) ORDER BY job_id, seq`
	sqlJobExists = `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?1) OR EXISTS (SELECT 1 FROM finished_jobs WHERE id = ?1)`
	// sqlImportStep writes an imported step; its pending starts at 0 and
	// counts the children as the triggers see them arrive.
	sqlImportStep = `INSERT INTO job_steps (job_id, name, seq, kind, attempt, recorded_at, result, until, children, child_count, pending)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,
			(SELECT count(*) FROM jobs WHERE parent_id = ?1 AND spawn_step = ?2))`
	// sqlChildrenHeld counts the jobs of the JSON array ?1 the store holds.
	sqlChildrenHeld = `SELECT (SELECT count(*) FROM jobs WHERE id IN (SELECT value FROM json_each(?1)))
		+ (SELECT count(*) FROM finished_jobs WHERE id IN (SELECT value FROM json_each(?1)))`
	// sqlAwaiting reads job ?1 if it waits at an Await: the step and its
	// children.
	sqlAwaiting = `SELECT s.name, s.children, s.pending FROM jobs j JOIN job_steps s ON s.job_id = j.id AND s.name = j.waits_for
		WHERE j.id = ?1 AND j.state = 'waiting'`
)

// stepStmts are the writer's statements of steps.
type stepStmts struct {
	record, claim, one, suspend, spawnStep *sql.Stmt
	link, linkFinished, spawned, wakes     *sql.Stmt
	releaseAwait, linkedChildren, delete   *sql.Stmt
	linked                                 *sql.Stmt
}

// steps prepares the statements of steps.
func (p *preparer) steps() {
	s := &p.s.steps
	s.record = p.prep(sqlStepRecord)
	s.claim = p.prep(sqlStepClaim)
	s.one = p.prep(sqlStepOne)
	s.suspend = p.prep(sqlSuspend)
	s.spawnStep = p.prep(sqlSpawnStep)
	s.link = p.prep(sqlSpawnLink)
	s.linkFinished = p.prep(sqlSpawnLinkFinished)
	s.spawned = p.prep(sqlSpawned)
	s.wakes = p.prep(sqlStepWakes)
	s.releaseAwait = p.prep(sqlReleaseAwait)
	s.linkedChildren = p.prep(sqlLinkedChildren)
	s.delete = p.prep(sqlStepsDelete)
	s.linked = p.prep(sqlLinkedAny)
}

// StepRecord records steps of running attempts in one write request. See
// store.Store.
func (s *Store) StepRecord(ctx context.Context, p *store.StepRecordParams) ([]store.StepResult, error) {
	if err := steps.CheckRecords(p.Steps); err != nil {
		return nil, err
	}
	res := make([]store.StepResult, len(p.Steps))
	if len(p.Steps) == 0 {
		return res, nil
	}
	now := micros(p.Now)
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		for i, rec := range p.Steps {
			var err error
			if res[i], err = recordStep(t, rec, now); err != nil {
				return err
			}
		}
		return nil
	}
	if err := s.do(ctx, r); err != nil {
		return nil, opErr("record steps", err)
	}
	return res, nil
}

// recordStep records one step in the writer.
func recordStep(t *txn, rec *store.StepRecord, now int64) (store.StepResult, error) {
	var id int64
	err := t.w.stmts.steps.record.QueryRowContext(t.ctx, rec.ID, rec.ClaimToken, rec.Name, string(store.StepRun), now,
		bytesArg(rec.Result), nil).Scan(&id)
	switch {
	case err == nil:
		return store.StepResult{Applied: true}, nil
	case !errNoRows(err):
		return store.StepResult{}, fmt.Errorf("record step %q of job %d: %w", rec.Name, rec.ID, err)
	}
	// Nothing recorded: a stale claim, or a step of that name.
	if _, err := stepClaim(t, rec.ID, rec.ClaimToken); err == steps.ErrStale {
		return store.StepResult{}, nil
	} else if err != nil {
		return store.StepResult{}, err
	}
	return store.StepResult{Applied: true, Exists: true}, nil
}

// claimed is what a step call reads of the running job it acts for.
type claimed struct {
	queue           string
	attempt         int
	cancelRequested bool
}

// stepClaim reads job id if it runs under token, else steps.ErrStale.
func stepClaim(t *txn, id, token int64) (*claimed, error) {
	c := &claimed{}
	err := t.w.stmts.steps.claim.QueryRowContext(t.ctx, id, token).Scan(&c.queue, &c.attempt, &c.cancelRequested)
	switch {
	case errNoRows(err):
		return nil, steps.ErrStale
	case err != nil:
		return nil, fmt.Errorf("read job %d: %w", id, err)
	}
	return c, nil
}

// stepOf reads step name of job id; nil when there is none.
func stepOf(t *txn, id int64, name string) (*store.JobStep, error) {
	st := &store.JobStep{Name: name}
	var kind string
	var until sql.NullInt64
	var children sql.NullString
	err := t.w.stmts.steps.one.QueryRowContext(t.ctx, id, name).Scan(&kind, &until, &children, &st.Pending)
	switch {
	case errNoRows(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read step %q of job %d: %w", name, id, err)
	}
	st.Kind, st.Until = store.StepKind(kind), fromNullMicros(until)
	if children.Valid {
		if st.Children, err = steps.DecodeChildren(children.String); err != nil {
			return nil, fmt.Errorf("job %d, step %q: %w", id, name, err)
		}
	}
	return st, nil
}

// suspend ends job id's running attempt at step name in state at runAt.
func suspend(t *txn, r *request, id int64, c *claimed, state store.JobState, runAt time.Time, name string) error {
	if _, err := t.w.stmts.steps.suspend.ExecContext(t.ctx, id, string(state), micros(runAt), name); err != nil {
		return fmt.Errorf("suspend job %d: %w", id, err)
	}
	r.count(c.queue, store.JobStateRunning, -1)
	r.count(c.queue, state, 1)
	if state != store.JobStateWaiting {
		r.wake(c.queue)
	}
	_, err := wakeLimited(t, r, c.queue, nil)
	return err
}

// StepSleep ends a running attempt at a durable sleep. See store.Store.
func (s *Store) StepSleep(ctx context.Context, p *store.StepSleepParams) (*store.StepResult, error) {
	if err := steps.CheckSleep(p); err != nil {
		return nil, err
	}
	var res *store.StepResult
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		var err error
		res, err = sleep(t, r, p)
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return nil, opErr("sleep", err)
	}
	return res, nil
}

func sleep(t *txn, r *request, p *store.StepSleepParams) (*store.StepResult, error) {
	c, err := stepClaim(t, p.ID, p.ClaimToken)
	if err == steps.ErrStale {
		return &store.StepResult{}, nil
	} else if err != nil {
		return nil, err
	}
	if c.cancelRequested {
		return &store.StepResult{Applied: true, CancelRequested: true}, nil
	}
	st, err := stepOf(t, p.ID, p.Name)
	if err != nil {
		return nil, err
	}
	until := p.Until
	if st != nil {
		if err := steps.Existing(p.ID, st, store.StepSleep); err != nil {
			return nil, err
		}
		until = st.Until
	} else if _, err := t.w.stmts.steps.record.ExecContext(t.ctx, p.ID, p.ClaimToken, p.Name, string(store.StepSleep),
		micros(p.Now), nil, micros(until)); err != nil {
		return nil, fmt.Errorf("record sleep %q of job %d: %w", p.Name, p.ID, err)
	}
	state := steps.SleepState(until, p.Now)
	if err := suspend(t, r, p.ID, c, state, until, p.Name); err != nil {
		return nil, err
	}
	res := steps.Suspended(state)
	res.Exists = st != nil
	return res, nil
}

// StepAwait ends a running attempt until the children of one of its spawn
// steps have finished. See store.Store.
func (s *Store) StepAwait(ctx context.Context, p *store.StepAwaitParams) (*store.StepResult, error) {
	if err := steps.CheckAwait(p); err != nil {
		return nil, err
	}
	var res *store.StepResult
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		var err error
		res, err = await(t, r, p)
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return nil, opErr("await", err)
	}
	return res, nil
}

func await(t *txn, r *request, p *store.StepAwaitParams) (*store.StepResult, error) {
	c, err := stepClaim(t, p.ID, p.ClaimToken)
	if err == steps.ErrStale {
		return &store.StepResult{}, nil
	} else if err != nil {
		return nil, err
	}
	if c.cancelRequested {
		return &store.StepResult{Applied: true, CancelRequested: true}, nil
	}
	st, err := stepOf(t, p.ID, p.Name)
	if err != nil {
		return nil, err
	}
	if st == nil || st.Kind != store.StepSpawn {
		return nil, steps.NoSpawnError(p.ID, p.Name)
	}
	if st.Pending == 0 {
		return &store.StepResult{Applied: true}, nil
	}
	if err := suspend(t, r, p.ID, c, store.JobStateWaiting, p.Now, p.Name); err != nil {
		return nil, err
	}
	return steps.Suspended(store.JobStateWaiting), nil
}

// StepSpawn enqueues children of a running job once, recording them as a
// step, in one write request. See store.Store.
func (s *Store) StepSpawn(ctx context.Context, p *store.StepSpawnParams) (*store.StepResult, error) {
	if err := steps.CheckSpawn(p); err != nil {
		return nil, err
	}
	ep := &store.JobEnqueueManyParams{Jobs: p.Jobs, Now: p.Now}
	results, args, width, err := encodeJobs(ep)
	if err != nil {
		return nil, opErr("spawn", err)
	}
	var res *store.StepResult
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		var err error
		res, err = spawn(t, r, p, ep, args, width, results)
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return nil, opErr("spawn", err)
	}
	return res, nil
}

func spawn(t *txn, r *request, p *store.StepSpawnParams, ep *store.JobEnqueueManyParams, args []any, width int, results []store.EnqueueResult) (*store.StepResult, error) {
	if _, err := stepClaim(t, p.ID, p.ClaimToken); err == steps.ErrStale {
		return &store.StepResult{}, nil
	} else if err != nil {
		return nil, err
	}
	st, err := stepOf(t, p.ID, p.Name)
	if err != nil {
		return nil, err
	}
	if st != nil {
		if err := steps.Existing(p.ID, st, store.StepSpawn); err != nil {
			return nil, err
		}
		return &store.StepResult{Applied: true, Exists: true, Children: st.Children}, nil
	}
	ss := &t.w.stmts.steps
	if _, err := ss.record.ExecContext(t.ctx, p.ID, p.ClaimToken, p.Name, string(store.StepSpawn), micros(p.Now), nil, nil); err != nil {
		return nil, fmt.Errorf("record spawn %q of job %d: %w", p.Name, p.ID, err)
	}
	if err := enqueue(t, r, ep, args, width, results); err != nil {
		return nil, err
	}
	ids, pending := steps.Children(results)
	list := string(appendIDs(nil, ids))
	for _, st := range []*sql.Stmt{ss.link, ss.linkFinished} {
		if _, err := st.ExecContext(t.ctx, list, p.ID, p.Name, p.CancelWithParent); err != nil {
			return nil, fmt.Errorf("link the children of job %d: %w", p.ID, err)
		}
	}
	if _, err := ss.spawnStep.ExecContext(t.ctx, p.ID, p.Name, steps.EncodeChildren(ids), len(ids), pending); err != nil {
		return nil, fmt.Errorf("record spawn %q of job %d: %w", p.Name, p.ID, err)
	}
	if err := markSpawned(t); err != nil {
		return nil, err
	}
	return &store.StepResult{Applied: true, Children: ids}, nil
}

// markSpawned records that the file has spawned children.
func markSpawned(t *txn) error {
	if err := t.loadSequences(); err != nil {
		return err
	}
	if t.spawned {
		return nil
	}
	if _, err := t.w.stmts.steps.spawned.ExecContext(t.ctx); err != nil {
		return fmt.Errorf("mark spawned: %w", err)
	}
	t.spawned = true
	return nil
}

// releaseAwaits makes available the parents that the request's jobs,
// leaving the pending states, left with no child of their awaited step
// pending (the triggers queued them in step_wakes), and signals their
// queues.
func releaseAwaits(t *txn, r *request) error {
	if err := t.loadSequences(); err != nil || !t.spawned {
		return err
	}
	rows, err := t.w.stmts.steps.wakes.QueryContext(t.ctx)
	if err != nil {
		return fmt.Errorf("read released parents: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("read released parents: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("read released parents: %w", err)
	}
	for _, id := range ids {
		if err := releaseAwait(t, r, id); err != nil {
			return err
		}
	}
	return nil
}

// releaseAwait makes job id available if it still waits at an Await none
// of whose children is pending.
func releaseAwait(t *txn, r *request, id int64) error {
	var queue string
	err := t.w.stmts.steps.releaseAwait.QueryRowContext(t.ctx, id).Scan(&queue)
	switch {
	case errNoRows(err):
		return nil
	case err != nil:
		return fmt.Errorf("release job %d: %w", id, err)
	}
	r.count(queue, store.JobStateWaiting, -1)
	r.count(queue, store.JobStateAvailable, 1)
	r.wake(queue)
	return nil
}

// cancelChildren cancels the pending children of job id that have
// CancelWithParent, as JobCancel does (a running one is asked to stop),
// and theirs; deleted says id was deleted.
func cancelChildren(t *txn, r *request, id int64, deleted bool, now time.Time) error {
	if err := t.loadSequences(); err != nil || !t.spawned {
		return err
	}
	rows, err := t.w.stmts.steps.linkedChildren.QueryContext(t.ctx, id)
	if err != nil {
		return fmt.Errorf("read the children of job %d: %w", id, err)
	}
	var running, pending []*store.JobRow
	for rows.Next() {
		j := &store.JobRow{}
		var state string
		var key, deps sql.NullString
		if err := rows.Scan(&j.ID, &state, &j.Queue, &key, &deps, &j.IgnoreDepFailure); err != nil {
			rows.Close()
			return fmt.Errorf("read the children of job %d: %w", id, err)
		}
		j.State, j.UniqueKey = store.JobState(state), key.String
		if state == string(store.JobStateRunning) {
			running = append(running, j)
		} else {
			pending = append(pending, j)
		}
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("read the children of job %d: %w", id, err)
	}
	if len(running) > 0 {
		if _, err := t.w.stmts.cancelRequest.ExecContext(t.ctx, t.idList(idsOf(running))); err != nil {
			return fmt.Errorf("request cancel: %w", err)
		}
	}
	if len(pending) > 0 {
		if err := cancelJobs(t, r, pending, now, steps.ParentCancelledMessage(id, deleted)); err != nil {
			return err
		}
		if err := depsEnded(t, r, idsOf(pending), store.JobStateCancelled, false, now); err != nil {
			return err
		}
	}
	for _, j := range append(running, pending...) {
		if err := cancelChildren(t, r, j.ID, false, now); err != nil {
			return err
		}
	}
	return nil
}

// deleteSteps deletes the steps of the jobs ids, deleted or pruned.
func deleteSteps(t *txn, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := t.w.stmts.steps.delete.ExecContext(t.ctx, t.idList(ids)); err != nil {
		return fmt.Errorf("delete steps: %w", err)
	}
	return nil
}

// StepList returns a job's steps, whole, from a read connection. See
// store.Store.
func (s *Store) StepList(ctx context.Context, p *store.StepListParams) ([]store.JobStep, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	rows, err := s.rdb.QueryContext(ctx, sqlStepList, p.ID)
	if err != nil {
		return nil, s.readErr("list steps", err)
	}
	var out []store.JobStep
	for rows.Next() {
		st, err := scanStep(rows, true)
		if err != nil {
			rows.Close()
			return nil, s.readErr("list steps", err)
		}
		out = append(out, *st)
	}
	if err := rows.Close(); err != nil {
		return nil, s.readErr("list steps", err)
	}
	if len(out) > 0 {
		return out, nil
	}
	var exists bool
	if err := s.rdb.QueryRowContext(ctx, sqlJobExists, p.ID).Scan(&exists); err != nil {
		return nil, s.readErr("list steps", err)
	}
	if !exists {
		return nil, fmt.Errorf("list steps of job %d: %w", p.ID, store.ErrNotFound)
	}
	return out, nil
}

// scanStep reads a row of sqlStepList (whole) or, after the job ID, of
// sqlStepSummaries.
func scanStep(s scanner, whole bool) (*store.JobStep, error) {
	st := &store.JobStep{}
	var kind string
	var recordedAt int64
	var until, size sql.NullInt64
	var children sql.NullString
	var err error
	if whole {
		err = s.Scan(&st.Name, &kind, &st.Attempt, &recordedAt, &st.Result, &until, &children, &st.ChildCount, &st.Pending)
	} else {
		err = s.Scan(&st.Name, &kind, &st.Attempt, &recordedAt, &size, &until, &st.ChildCount, &st.Pending)
	}
	if err != nil {
		return nil, err
	}
	st.Kind, st.RecordedAt, st.Until = store.StepKind(kind), fromMicros(recordedAt), fromNullMicros(until)
	st.Size = int(size.Int64)
	if whole {
		st.Size = len(st.Result)
	}
	if children.Valid {
		if st.Children, err = steps.DecodeChildren(children.String); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// stepScanner reads a summary row after its job ID.
type stepScanner struct {
	rows *sql.Rows
	id   *int64
}

func (s stepScanner) Scan(dest ...any) error { return s.rows.Scan(append([]any{s.id}, dest...)...) }

// withSteps fills in the steps of jobs, as JobGet shows them, with one
// read of db.
func withSteps(ctx context.Context, db queryer, jobs []*store.JobRow) error {
	if len(jobs) == 0 {
		return nil
	}
	byID := make(map[int64]*store.JobRow, len(jobs))
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		byID[j.ID], ids[i] = j, j.ID
	}
	rows, err := db.QueryContext(ctx, sqlStepSummaries, string(appendIDs(nil, ids)))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		st, err := scanStep(stepScanner{rows, &id}, false)
		if err != nil {
			return err
		}
		if j := byID[id]; j != nil {
			j.Steps = append(j.Steps, *st)
		}
	}
	return rows.Err()
}

// queryer is what withSteps reads with: the read pool or the writer's
// connection.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// importSteps writes the steps of imported job j (whole, as StepList
// returns them), and marks the file as having spawned when j is a child
// or a parent.
func importSteps(t *txn, j *store.JobRow) error {
	for i, st := range j.Steps {
		var children any
		if st.Kind == store.StepSpawn {
			children = steps.EncodeChildren(st.Children)
		}
		var result any
		if st.Kind == store.StepRun {
			result = bytesArg(st.Result)
		}
		if _, err := t.w.conn.ExecContext(t.ctx, sqlImportStep, j.ID, st.Name, i, string(st.Kind), st.Attempt,
			micros(st.RecordedAt), result, nullMicros(st.Until), children, len(st.Children)); err != nil {
			return fmt.Errorf("job %d: insert step %q: %w", j.ID, st.Name, err)
		}
	}
	if j.ParentID != 0 || len(j.Steps) > 0 {
		return markSpawned(t)
	}
	return nil
}

// importAwaits releases the jobs of ids (imported ones and parents of
// imported children) that wait at an Await their children no longer hold
// back (steps.ImportAwaitReady).
func importAwaits(t *txn, r *request, ids []int64) error {
	seen := make(map[int64]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		st := &store.JobStep{}
		var children sql.NullString
		err := t.w.conn.QueryRowContext(t.ctx, sqlAwaiting, id).Scan(&st.Name, &children, &st.Pending)
		switch {
		case errNoRows(err):
			continue
		case err != nil:
			return fmt.Errorf("read job %d: %w", id, err)
		}
		if st.Children, err = steps.DecodeChildren(children.String); err != nil {
			return fmt.Errorf("job %d: %w", id, err)
		}
		var held int
		if err := t.w.conn.QueryRowContext(t.ctx, sqlChildrenHeld, steps.EncodeChildren(st.Children)).Scan(&held); err != nil {
			return fmt.Errorf("read the children of job %d: %w", id, err)
		}
		if steps.ImportAwaitReady(st, func(int64) bool { return held == len(st.Children) }) {
			if err := releaseAwait(t, r, id); err != nil {
				return err
			}
		}
	}
	return nil
}
