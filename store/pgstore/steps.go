package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/steps"
)

// schemaSteps brings version 8 to version 9: durable steps.
//
// A spawned child names its parent and spawn step (parent_id, spawn_step;
// jobs_parent lists a job's children in ID order), and a job waiting at a
// Sleep or Await names the step (waits_for, cleared by every claim).
// job_steps holds each job's steps, keyed by job and name, seq giving
// their order; jobs_steps_deleted deletes a deleted or pruned job's steps
// with it.
//
// A spawn step's pending counts its children in the pending states. The
// three row triggers keep it whatever moves a child between the pending
// and the finished states (an outcome, a rescue, a cancel, a cascade, a
// drop, a retry, a revival), inserts a pending one (an import) or deletes
// one; their WHEN clauses cost the rows of other jobs nothing. The
// trigger that takes the count to zero makes a parent waiting at that
// step available and notifies its queue, in the statement that moved the
// child. The step row serializes a child's move with its parent's Await
// (StepAwait locks it first, then the parent, as the trigger does), so a
// parent never waits for a child that has already finished. Each
// statement can run again on a schema that has it.
var schemaSteps = []string{
	`ALTER TABLE {s}.jobs ADD COLUMN IF NOT EXISTS parent_id bigint,
		ADD COLUMN IF NOT EXISTS spawn_step text,
		ADD COLUMN IF NOT EXISTS cancel_with_parent boolean NOT NULL DEFAULT false,
		ADD COLUMN IF NOT EXISTS waits_for text`,
	`CREATE INDEX IF NOT EXISTS jobs_parent ON {s}.jobs (parent_id, id) WHERE parent_id IS NOT NULL`,
	`CREATE TABLE IF NOT EXISTS {s}.job_steps (
		job_id      bigint NOT NULL,
		name        text NOT NULL,
		seq         integer NOT NULL,
		kind        text NOT NULL,
		attempt     integer NOT NULL,
		recorded_at timestamptz NOT NULL,
		result      bytea,
		until       timestamptz,
		children    bigint[],
		child_count integer NOT NULL DEFAULT 0,
		pending     integer NOT NULL DEFAULT 0,
		PRIMARY KEY (job_id, name)
	)`,
	`CREATE OR REPLACE FUNCTION {s}.child_moved() RETURNS trigger LANGUAGE plpgsql AS $$
	DECLARE
		parent bigint;
		step text;
		delta integer := 1;
		left_n integer;
		q text;
	BEGIN
		IF TG_OP = 'UPDATE' AND current_setting('sortie.finishing', true) = 'on' THEN
			RETURN NULL; -- finish_jobs counts its children itself, once per step
		END IF;
		IF TG_OP = 'DELETE' THEN
			parent := OLD.parent_id; step := OLD.spawn_step; delta := -1;
		ELSE
			parent := NEW.parent_id; step := NEW.spawn_step;
			IF TG_OP = 'UPDATE' AND NEW.state IN ('completed', 'cancelled', 'dead') THEN
				delta := -1;
			END IF;
		END IF;
		UPDATE {s}.job_steps SET pending = pending + delta WHERE job_id = parent AND name = step
			RETURNING pending INTO left_n;
		IF delta < 0 AND left_n = 0 THEN
			UPDATE {s}.jobs SET state = 'available', waits_for = NULL
				WHERE id = parent AND state = 'waiting' AND waits_for = step
				RETURNING queue INTO q;
			IF q IS NOT NULL THEN
				PERFORM pg_notify(TG_ARGV[0], q);
			END IF;
		END IF;
		RETURN NULL;
	END $$`,
	`DROP TRIGGER IF EXISTS jobs_child_state ON {s}.jobs`,
	`CREATE TRIGGER jobs_child_state AFTER UPDATE OF state ON {s}.jobs FOR EACH ROW
		WHEN (NEW.parent_id IS NOT NULL
			AND (OLD.state IN ('completed', 'cancelled', 'dead')) <> (NEW.state IN ('completed', 'cancelled', 'dead')))
		EXECUTE FUNCTION {s}.child_moved({channel})`,
	`DROP TRIGGER IF EXISTS jobs_child_insert ON {s}.jobs`,
	`CREATE TRIGGER jobs_child_insert AFTER INSERT ON {s}.jobs FOR EACH ROW
		WHEN (NEW.parent_id IS NOT NULL AND NEW.state NOT IN ('completed', 'cancelled', 'dead'))
		EXECUTE FUNCTION {s}.child_moved({channel})`,
	`DROP TRIGGER IF EXISTS jobs_child_delete ON {s}.jobs`,
	`CREATE TRIGGER jobs_child_delete AFTER DELETE ON {s}.jobs FOR EACH ROW
		WHEN (OLD.parent_id IS NOT NULL AND OLD.state NOT IN ('completed', 'cancelled', 'dead'))
		EXECUTE FUNCTION {s}.child_moved({channel})`,
	`CREATE OR REPLACE FUNCTION {s}.steps_deleted() RETURNS trigger LANGUAGE plpgsql ` + planPins + ` AS $$
	BEGIN
		DELETE FROM {s}.job_steps s USING old_rows o WHERE s.job_id = o.id;
		RETURN NULL;
	END $$`,
	`DROP TRIGGER IF EXISTS jobs_steps_deleted ON {s}.jobs`,
	`CREATE TRIGGER jobs_steps_deleted AFTER DELETE ON {s}.jobs
		REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.steps_deleted()`,
	recordStepsSQL,
	finishJobsSQL(true, true),
	claimJobsSQL,
	claimLimitedSQL,
	claimPartitionedSQL,
}

// recordStepsSQL creates record_steps, which records a batch of steps
// (StepRecord) in one statement: each step whose job runs under its
// token and has no step of that name is inserted, numbered after the
// job's steps; it returns per step (by its place, ord) whether the claim
// was held and whether the step was inserted.
var recordStepsSQL = `CREATE OR REPLACE FUNCTION {s}.record_steps(p_ids bigint[], p_tokens bigint[], p_names text[],
		p_results bytea[], p_now timestamptz)
	RETURNS TABLE (ord bigint, held boolean, inserted boolean)
	LANGUAGE plpgsql ` + planPins + ` AS $$
	#variable_conflict use_column
	DECLARE
		running CONSTANT text := 'running';
	BEGIN
		RETURN QUERY WITH r AS (
			SELECT * FROM unnest(p_ids, p_tokens, p_names, p_results) WITH ORDINALITY AS r(id, token, name, result, ord)
		), ok AS (
			SELECT r.*, j.attempt FROM r JOIN {s}.jobs j ON j.id = r.id AND j.claim_token = r.token AND j.state = running
		), ins AS (
			INSERT INTO {s}.job_steps (job_id, name, seq, kind, attempt, recorded_at, result)
			SELECT ok.id, ok.name,
				(SELECT count(*) FROM {s}.job_steps s WHERE s.job_id = ok.id) + row_number() OVER (PARTITION BY ok.id ORDER BY ok.ord),
				'step', ok.attempt, p_now, ok.result
			FROM ok
			ON CONFLICT (job_id, name) DO NOTHING
			RETURNING job_id, name
		)
		SELECT r.ord, ok.id IS NOT NULL, EXISTS (SELECT 1 FROM ins WHERE ins.job_id = r.id AND ins.name = r.name)
		FROM r LEFT JOIN ok ON ok.ord = r.ord;
	END $$`

// The SQL of the other step calls, each in a transaction of its own.
const (
	// sqlStepLock reads and locks step $2 of job $1: first, so that a
	// call and a child's trigger lock the step row, then the parent.
	sqlStepLock = `SELECT kind, until, children, pending FROM {s}.job_steps WHERE job_id = $1 AND name = $2 FOR UPDATE`
	// sqlStepClaim reads and locks job $1 if it runs under claim $2.
	sqlStepClaim = `SELECT queue, attempt, cancel_requested FROM {s}.jobs
		WHERE id = $1 AND claim_token = $2 AND state = 'running' FOR UPDATE`
	sqlStepInsert = `INSERT INTO {s}.job_steps (job_id, name, seq, kind, attempt, recorded_at, until)
		VALUES ($1, $2, (SELECT count(*) FROM {s}.job_steps WHERE job_id = $1), $3, $4, $5, $6)`
	// sqlSuspend ends job $1's attempt at step $4: state $2 at $3, the
	// attempt not counted.
	sqlSuspend = `UPDATE {s}.jobs SET state = $2, run_at = $3, attempt = attempt - 1, lease_until = NULL, waits_for = $4
		WHERE id = $1`
	sqlSpawnLink = `UPDATE {s}.jobs SET parent_id = $2, spawn_step = $3, cancel_with_parent = $4 WHERE id = ANY($1::bigint[])`
	sqlSpawnStep = `UPDATE {s}.job_steps SET children = $3, child_count = cardinality($3::bigint[]), pending = $4
		WHERE job_id = $1 AND name = $2`
	// sqlLinkedChildren locks the pending children of job $1 to cancel
	// with it, in ID order.
	sqlLinkedChildren = `SELECT id, state, has_dependents FROM {s}.jobs
		WHERE parent_id = $1 AND cancel_with_parent AND state IN ('waiting', 'scheduled', 'available', 'running', 'retrying')
		ORDER BY id FOR UPDATE`
	sqlStepList = `SELECT name, kind, attempt, recorded_at, result, until, children, child_count, pending
		FROM {s}.job_steps WHERE job_id = $1 ORDER BY seq`
	sqlJobExists = `SELECT EXISTS (SELECT 1 FROM {s}.jobs WHERE id = $1)`
)

// stepsCol is the column a job read adds for its steps: their summaries
// as a JSON array, NULL for none.
const stepsCol = `(SELECT json_agg(json_build_object('n', s.name, 'k', s.kind, 'a', s.attempt, 'r', s.recorded_at,
		's', length(s.result), 'u', s.until, 'c', s.child_count, 'p', s.pending) ORDER BY s.seq)
		FROM {s}.job_steps s WHERE s.job_id = j.id)`

// stepSummary is one element of stepsCol.
type stepSummary struct {
	Name       string     `json:"n"`
	Kind       string     `json:"k"`
	Attempt    int        `json:"a"`
	RecordedAt time.Time  `json:"r"`
	Size       int        `json:"s"`
	Until      *time.Time `json:"u"`
	ChildCount int        `json:"c"`
	Pending    int        `json:"p"`
}

// StepRecord records steps of running attempts with one statement. See
// store.Store.
func (s *Store) StepRecord(ctx context.Context, p *store.StepRecordParams) ([]store.StepResult, error) {
	if err := steps.CheckRecords(p.Steps); err != nil {
		return nil, err
	}
	res := make([]store.StepResult, len(p.Steps))
	if len(p.Steps) == 0 {
		return res, nil
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	// A name twice for one job in the batch: the first stands.
	type key struct {
		id   int64
		name string
	}
	first := make(map[key]int, len(p.Steps))
	var ids, tokens []int64
	var names []string
	var results [][]byte
	var at []int
	for i, r := range p.Steps {
		if _, dup := first[key{r.ID, r.Name}]; dup {
			continue
		}
		first[key{r.ID, r.Name}] = i
		ids, tokens, names, results, at = append(ids, r.ID), append(tokens, r.ClaimToken), append(names, r.Name),
			append(results, r.Result), append(at, i)
	}
	err := s.retryConflicts(ctx, func() error {
		rs, err := s.pool.Query(ctx, s.q.get(`SELECT ord, held, inserted FROM {s}.record_steps($1, $2, $3, $4, $5)`),
			ids, tokens, names, results, p.Now)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var ord int64
			var held, inserted bool
			if err := rs.Scan(&ord, &held, &inserted); err != nil {
				return err
			}
			res[at[ord-1]] = store.StepResult{Applied: held, Exists: held && !inserted}
		}
		return rs.Err()
	})
	if err != nil {
		return nil, s.opErr("record steps", err)
	}
	for i, r := range p.Steps {
		if j := first[key{r.ID, r.Name}]; j != i {
			res[i] = store.StepResult{Applied: res[j].Applied, Exists: res[j].Applied}
		}
	}
	return res, nil
}

// stepClaimed is what a step call reads of the running job it acts for.
type stepClaimed struct {
	queue           string
	attempt         int32
	cancelRequested bool
}

// lockStep locks step name of job id and then the job, if it runs under
// token: nil claimed for a stale claim, nil step for none of that name.
func (s *Store) lockStep(ctx context.Context, tx pgx.Tx, id, token int64, name string) (*stepClaimed, *store.JobStep, error) {
	st := &store.JobStep{Name: name}
	var kind string
	var until *time.Time
	err := tx.QueryRow(ctx, s.q.get(sqlStepLock), id, name).Scan(&kind, &until, &st.Children, &st.Pending)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		st = nil
	case err != nil:
		return nil, nil, fmt.Errorf("read step %q of job %d: %w", name, id, err)
	default:
		st.Kind, st.Until = store.StepKind(kind), utc(until)
	}
	c := &stepClaimed{}
	err = tx.QueryRow(ctx, s.q.get(sqlStepClaim), id, token).Scan(&c.queue, &c.attempt, &c.cancelRequested)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("read job %d: %w", id, err)
	}
	return c, st, nil
}

// suspend ends job id's attempt at step name, in state at runAt, and
// signals its queue at the commit.
func (s *Store) suspend(ctx context.Context, tx pgx.Tx, id int64, c *stepClaimed, state store.JobState, runAt time.Time, name string) error {
	if _, err := tx.Exec(ctx, s.q.get(sqlSuspend), id, string(state), runAt, name); err != nil {
		return fmt.Errorf("suspend job %d: %w", id, err)
	}
	return s.notify(ctx, tx, []string{c.queue})
}

// StepSleep ends a running attempt at a durable sleep, in one
// transaction. See store.Store.
func (s *Store) StepSleep(ctx context.Context, p *store.StepSleepParams) (*store.StepResult, error) {
	if err := steps.CheckSleep(p); err != nil {
		return nil, err
	}
	var res *store.StepResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		c, st, err := s.lockStep(ctx, tx, p.ID, p.ClaimToken, p.Name)
		switch {
		case err != nil:
			return err
		case c == nil:
			res = &store.StepResult{}
			return nil
		case c.cancelRequested:
			res = &store.StepResult{Applied: true, CancelRequested: true}
			return nil
		}
		until := p.Until
		if st != nil {
			if err := steps.Existing(p.ID, st, store.StepSleep); err != nil {
				return err
			}
			until = st.Until
		} else if _, err := tx.Exec(ctx, s.q.get(sqlStepInsert), p.ID, p.Name, string(store.StepSleep), c.attempt, p.Now, until); err != nil {
			return fmt.Errorf("record sleep %q of job %d: %w", p.Name, p.ID, err)
		}
		state := steps.SleepState(until, p.Now)
		if err := s.suspend(ctx, tx, p.ID, c, state, until, p.Name); err != nil {
			return err
		}
		res = steps.Suspended(state)
		res.Exists = st != nil
		return nil
	})
	if err != nil {
		return nil, s.stepErr("sleep", err)
	}
	return res, nil
}

// stepErr wraps the error of a step call: a refusal as it is, an engine
// error with the store and the operation.
func (s *Store) stepErr(op string, err error) error {
	if store.Plain(err) {
		return err
	}
	return s.opErr(op, err)
}

// StepAwait ends a running attempt until the children of one of its spawn
// steps have finished, in one transaction. See store.Store.
func (s *Store) StepAwait(ctx context.Context, p *store.StepAwaitParams) (*store.StepResult, error) {
	if err := steps.CheckAwait(p); err != nil {
		return nil, err
	}
	var res *store.StepResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		c, st, err := s.lockStep(ctx, tx, p.ID, p.ClaimToken, p.Name)
		switch {
		case err != nil:
			return err
		case c == nil:
			res = &store.StepResult{}
			return nil
		case c.cancelRequested:
			res = &store.StepResult{Applied: true, CancelRequested: true}
			return nil
		case st == nil || st.Kind != store.StepSpawn:
			return steps.NoSpawnError(p.ID, p.Name)
		case st.Pending == 0:
			res = &store.StepResult{Applied: true}
			return nil
		}
		if err := s.suspend(ctx, tx, p.ID, c, store.JobStateWaiting, p.Now, p.Name); err != nil {
			return err
		}
		res = steps.Suspended(store.JobStateWaiting)
		return nil
	})
	if err != nil {
		return nil, s.stepErr("await", err)
	}
	return res, nil
}

// StepSpawn enqueues children of a running job once, recording them as a
// step, in one transaction. See store.Store.
func (s *Store) StepSpawn(ctx context.Context, p *store.StepSpawnParams) (*store.StepResult, error) {
	if err := steps.CheckSpawn(p); err != nil {
		return nil, err
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var res *store.StepResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		b, err := newBatch(&store.JobEnqueueManyParams{Jobs: p.Jobs, Now: p.Now})
		if err != nil {
			return err
		}
		res, err = s.spawnTx(ctx, tx, p, b)
		return err
	})
	if err != nil {
		return nil, s.stepErr("spawn", err)
	}
	return res, nil
}

func (s *Store) spawnTx(ctx context.Context, tx pgx.Tx, p *store.StepSpawnParams, b *batch) (*store.StepResult, error) {
	c, st, err := s.lockStep(ctx, tx, p.ID, p.ClaimToken, p.Name)
	switch {
	case err != nil:
		return nil, err
	case c == nil:
		return &store.StepResult{}, nil
	case st != nil:
		if err := steps.Existing(p.ID, st, store.StepSpawn); err != nil {
			return nil, err
		}
		return &store.StepResult{Applied: true, Exists: true, Children: st.Children}, nil
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlStepInsert), p.ID, p.Name, string(store.StepSpawn), c.attempt, p.Now, nil); err != nil {
		return nil, fmt.Errorf("record spawn %q of job %d: %w", p.Name, p.ID, err)
	}
	if err := s.enqueueTx(ctx, tx, b); err != nil {
		return nil, err
	}
	ids := make([]int64, len(b.results))
	pending := 0
	for i, r := range b.results {
		ids[i] = r.ID
		if r.State.Pending() {
			pending++
		}
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlSpawnLink), ids, p.ID, p.Name, p.CancelWithParent); err != nil {
		return nil, fmt.Errorf("link the children of job %d: %w", p.ID, err)
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlSpawnStep), p.ID, p.Name, ids, pending); err != nil {
		return nil, fmt.Errorf("record spawn %q of job %d: %w", p.Name, p.ID, err)
	}
	return &store.StepResult{Applied: true, Children: ids}, nil
}

// cancelChildren cancels the pending children of job id that have
// CancelWithParent, as JobCancel does (a running one is asked to stop),
// and theirs; deleted says id was deleted.
func (s *Store) cancelChildren(ctx context.Context, tx pgx.Tx, id int64, deleted bool, now time.Time) error {
	rs, err := tx.Query(ctx, s.q.get(sqlLinkedChildren), id)
	if err != nil {
		return fmt.Errorf("read the children of job %d: %w", id, err)
	}
	var running, pending, withDeps []int64
	for rs.Next() {
		var cid int64
		var state string
		var hasDeps bool
		if err := rs.Scan(&cid, &state, &hasDeps); err != nil {
			rs.Close()
			return fmt.Errorf("read the children of job %d: %w", id, err)
		}
		if state == string(store.JobStateRunning) {
			running = append(running, cid)
			continue
		}
		pending = append(pending, cid)
		if hasDeps {
			withDeps = append(withDeps, cid)
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read the children of job %d: %w", id, err)
	}
	if len(running) > 0 {
		if _, err := tx.Exec(ctx, s.q.get(`UPDATE {s}.jobs SET cancel_requested = true WHERE id = ANY($1)`), running); err != nil {
			return fmt.Errorf("request cancel: %w", err)
		}
	}
	if err := s.cancelPending(ctx, tx, pending, withDeps, now, steps.ParentCancelledMessage(id, deleted)); err != nil {
		return err
	}
	for _, c := range append(running, pending...) {
		if err := s.cancelChildren(ctx, tx, c, false, now); err != nil {
			return err
		}
	}
	return nil
}

// StepList returns a job's steps, whole. See store.Store.
func (s *Store) StepList(ctx context.Context, p *store.StepListParams) ([]store.JobStep, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rs, err := s.pool.Query(ctx, s.q.get(sqlStepList), p.ID)
	if err != nil {
		return nil, s.opErr("list steps", err)
	}
	var out []store.JobStep
	for rs.Next() {
		var st store.JobStep
		var kind string
		var until *time.Time
		if err := rs.Scan(&st.Name, &kind, &st.Attempt, &st.RecordedAt, &st.Result, &until, &st.Children, &st.ChildCount, &st.Pending); err != nil {
			rs.Close()
			return nil, s.opErr("list steps", err)
		}
		st.Kind, st.Until, st.RecordedAt, st.Size = store.StepKind(kind), utc(until), st.RecordedAt.UTC(), len(st.Result)
		out = append(out, st)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, s.opErr("list steps", err)
	}
	if len(out) > 0 {
		return out, nil
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, s.q.get(sqlJobExists), p.ID).Scan(&exists); err != nil {
		return nil, s.opErr("list steps", err)
	}
	if !exists {
		return nil, fmt.Errorf("pgstore: list steps of job %d: %w", p.ID, store.ErrNotFound)
	}
	return out, nil
}

// decodeSteps reads the stepsCol value b into j.Steps.
func decodeSteps(j *store.JobRow, b []byte) error {
	if b == nil {
		return nil
	}
	var list []stepSummary
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("decode the steps of job %d: %w", j.ID, err)
	}
	j.Steps = make([]store.JobStep, len(list))
	for i, x := range list {
		j.Steps[i] = store.JobStep{Name: x.Name, Kind: store.StepKind(x.Kind), Attempt: x.Attempt, RecordedAt: x.RecordedAt.UTC(),
			Size: x.Size, Until: utc(x.Until), ChildCount: x.ChildCount, Pending: x.Pending}
	}
	return nil
}

// The SQL of importing steps.
const (
	// sqlImportSteps writes imported steps; a spawn step's pending counts
	// the children already stored that are pending, and the triggers count
	// those that arrive after.
	sqlImportSteps = `INSERT INTO {s}.job_steps (job_id, name, seq, kind, attempt, recorded_at, result, until, children, child_count, pending)
		SELECT u.job_id, u.name, u.seq, u.kind, u.attempt, u.recorded_at, u.result, u.until,
			CASE WHEN u.kind = 'spawn' THEN ARRAY(SELECT jsonb_array_elements_text(u.children)::bigint) END,
			jsonb_array_length(u.children),
			(SELECT count(*) FROM {s}.jobs c WHERE c.parent_id = u.job_id AND c.spawn_step = u.name
				AND c.state IN ('waiting', 'scheduled', 'available', 'running', 'retrying'))
		FROM unnest($1::bigint[], $2::text[], $3::integer[], $4::text[], $5::integer[], $6::timestamptz[], $7::bytea[],
			$8::timestamptz[], $9::jsonb[]) AS u(job_id, name, seq, kind, attempt, recorded_at, result, until, children)`
	// sqlImportAwaits makes available the jobs of $1 that wait at an
	// Await whose spawn step has no child pending and all its children
	// stored, and notifies their queues on channel $2.
	sqlImportAwaits = `WITH r AS (
		UPDATE {s}.jobs j SET state = 'available', waits_for = NULL
		FROM {s}.job_steps s
		WHERE j.id = ANY($1::bigint[]) AND j.state = 'waiting' AND s.job_id = j.id AND s.name = j.waits_for AND s.pending = 0
			AND (SELECT count(*) FROM {s}.jobs c WHERE c.id = ANY(s.children)) = cardinality(s.children)
		RETURNING j.queue
	)
	SELECT count(pg_notify($2, q)) FROM (SELECT DISTINCT queue AS q FROM r) x`
)

// importSteps writes the steps of the jobs of an import the call adds.
func (s *Store) importSteps(ctx context.Context, tx pgx.Tx, jobs []*store.JobRow, res []store.ImportResult) error {
	var (
		ids, attempts, seqs []int64
		names, kinds        []string
		recorded, untils    []*time.Time
		results             [][]byte
		children            []*string
	)
	for i, j := range jobs {
		if res[i].Status != store.ImportAdded {
			continue
		}
		for k, st := range j.Steps {
			ids, names, kinds, seqs = append(ids, j.ID), append(names, st.Name), append(kinds, string(st.Kind)), append(seqs, int64(k+1))
			at := st.RecordedAt
			attempts, recorded, untils = append(attempts, int64(st.Attempt)), append(recorded, &at), append(untils, nullTime(st.Until))
			var result []byte
			if st.Kind == store.StepRun {
				result = st.Result
			}
			c := "[]"
			if st.Kind == store.StepSpawn {
				c = steps.EncodeChildren(st.Children)
			}
			results, children = append(results, result), append(children, &c)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlImportSteps), ids, names, seqs, kinds, attempts, recorded, results, untils, children); err != nil {
		return fmt.Errorf("write steps: %w", err)
	}
	return nil
}

// importAwaits releases the jobs of an import (the ones it added, and the
// parents of the children it added) that wait at an Await their children
// no longer hold back (steps.ImportAwaitReady, as one statement).
func (s *Store) importAwaits(ctx context.Context, tx pgx.Tx, jobs []*store.JobRow, res []store.ImportResult) error {
	var ids []int64
	for i, j := range jobs {
		if res[i].Status != store.ImportAdded {
			continue
		}
		if j.WaitsFor != "" && j.State == store.JobStateWaiting {
			ids = append(ids, j.ID)
		}
		if j.ParentID != 0 {
			ids = append(ids, j.ParentID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var n int64
	if err := tx.QueryRow(ctx, s.q.get(sqlImportAwaits), ids, s.channel).Scan(&n); err != nil {
		return fmt.Errorf("release awaiting jobs: %w", err)
	}
	return nil
}
