package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/imported"
)

// sqlStoredJobs reads what imported.Same compares of the jobs
// stored under an import's IDs.
const sqlStoredJobs = `SELECT id, kind, queue, created_at, args FROM {s}.jobs WHERE id = ANY($1::bigint[])`

// importColumns are the columns JobImport's COPY fills: all of a job's.
var importColumns = []string{"id", "kind", "queue", "args", "state", "priority", "attempt", "max_attempts", "run_at",
	"created_at", "attempted_at", "attempted_by", "finalized_at", "lease_until", "claim_token", "unique_key", "errors",
	"tags", "meta", "timeout", "partition_key", "result", "progress", "cancel_requested", "workflow_id", "depends_on",
	"ignore_dep_failure", "has_dependents", "cancelled_by", "parent_id", "spawn_step", "cancel_with_parent", "waits_for"}

// sqlImported completes an import after its COPY: it records the
// dependency edges $1 → $2 of the waiting jobs, appends the jobs to the
// count deltas ($3, $4, $5), moves the job ID and claim token sequences
// past the largest imported ($6, $7) when they are behind them (a
// sequence never handed out has handed out last_value - 1), and notifies
// queues $9 on channel $8 (delivered at commit).
const sqlImported = `WITH deps AS (
		INSERT INTO {s}.job_deps (dep_id, job_id) SELECT * FROM unnest($1::bigint[], $2::bigint[])
	), counted AS (
		INSERT INTO {s}.job_count_deltas (queue, state, n) SELECT * FROM unnest($3::text[], $4::text[], $5::bigint[])
	)
	SELECT
		(SELECT count(setval('{s}.job_id_seq', $6)) FROM {s}.job_id_seq
			WHERE CASE WHEN is_called THEN last_value ELSE last_value - 1 END < $6),
		(SELECT count(setval('{s}.claim_token_seq', $7)) FROM {s}.claim_token_seq
			WHERE CASE WHEN is_called THEN last_value ELSE last_value - 1 END < $7),
		(SELECT count(pg_notify($8, q)) FROM unnest($9::text[]) AS q)`

// importRaces is how many times JobImport runs again when a concurrent
// write took one of its IDs or unique keys between its check and its
// COPY; the next run reports that job as a conflict.
const importRaces = 3

// JobImport checks and writes exported jobs in one transaction (see
// store.Store.JobImport): one query for the stored jobs under their IDs
// and one for the holders of their unique keys; then, unless a job
// conflicts or p.DryRun, one update that flags and reads the
// dependencies outside the call, one COPY of every added row, and one
// statement for the dependency edges, the counts, the sequences and the
// wake-ups. A batch of a few thousand jobs costs those few round trips.
//
// The sequence moves past the imported IDs at the import's end, so an
// enqueue running meanwhile may take from it an ID the import writes:
// whichever inserts second fails (the enqueue with a duplicate key, the
// import by reporting that ID taken). Import into a store nothing else
// enqueues into, or whose IDs are above the imported ones.
func (s *Store) JobImport(ctx context.Context, p *store.JobImportParams) ([]store.ImportResult, error) {
	if err := store.ImportValidate(p.Jobs); err != nil {
		return nil, fmt.Errorf("pgstore: import: %w", err)
	}
	if len(p.Jobs) == 0 {
		return []store.ImportResult{}, nil
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var res []store.ImportResult
	var err error
	for range importRaces + 1 {
		err = s.inTx(ctx, func(tx pgx.Tx) (err error) {
			res, err = s.importTx(ctx, tx, p)
			return err
		})
		if !uniqueViolation(err) {
			break
		}
	}
	if uniqueViolation(err) {
		return nil, fmt.Errorf("pgstore: import: concurrent writes kept taking IDs or unique keys of the import; nothing was written, import again: %w", err)
	}
	if err != nil {
		return nil, s.opErr("import", err)
	}
	return res, nil
}

// importTx checks p's jobs against the store and, when none conflicts
// and p is not a dry run, writes the added ones.
func (s *Store) importTx(ctx context.Context, tx pgx.Tx, p *store.JobImportParams) ([]store.ImportResult, error) {
	res, conflict, err := s.importCheck(ctx, tx, p.Jobs)
	if err != nil || conflict || p.DryRun {
		return res, err
	}
	w, err := s.planImport(ctx, tx, p, res)
	if err != nil || len(w.rows) == 0 {
		return res, err
	}
	// The steps go first: a pending child's row counts itself in its
	// parent's spawn step as it arrives (child_moved).
	if err := s.importSteps(ctx, tx, p.Jobs, res); err != nil {
		return nil, err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{s.schema, "jobs"}, importColumns, pgx.CopyFromRows(w.rows)); err != nil {
		return nil, fmt.Errorf("copy jobs: %w", err)
	}
	var ids, tokens, woke int64
	err = tx.QueryRow(ctx, s.q.get(sqlImported), w.depFrom, w.depTo, w.countQueues, w.countStates, w.counts,
		w.maxID, w.maxToken, s.channel, w.wake).Scan(&ids, &tokens, &woke)
	if err != nil {
		return nil, fmt.Errorf("record imported jobs: %w", err)
	}
	return res, s.importAwaits(ctx, tx, p.Jobs, res)
}

// importCheck returns what JobImport does with each of jobs (see
// imported.Statuses), and whether any conflicts.
func (s *Store) importCheck(ctx context.Context, tx pgx.Tx, jobs []*store.JobRow) ([]store.ImportResult, bool, error) {
	ids := make([]int64, len(jobs))
	var keys []string
	for i, r := range jobs {
		ids[i] = r.ID
		if r.UniqueKey != "" && r.State.Pending() {
			keys = append(keys, r.UniqueKey)
		}
	}
	stored, err := s.storedJobs(ctx, tx, ids)
	if err != nil {
		return nil, false, err
	}
	holders := map[string]store.EnqueueResult{}
	if len(keys) > 0 {
		if holders, err = s.uniqueHolders(ctx, tx, keys); err != nil {
			return nil, false, err
		}
	}
	res, conflict := imported.Statuses(jobs, func(id int64) *store.JobRow { return stored[id] },
		func(key string) (int64, bool) { h, ok := holders[key]; return h.ID, ok })
	return res, conflict, nil
}

// storedJobs reads the jobs stored under ids, with the fields
// imported.Same compares.
func (s *Store) storedJobs(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64]*store.JobRow, error) {
	rs, err := tx.Query(ctx, s.q.get(sqlStoredJobs), ids)
	if err != nil {
		return nil, fmt.Errorf("read stored jobs: %w", err)
	}
	defer rs.Close()
	out := map[int64]*store.JobRow{}
	for rs.Next() {
		j := &store.JobRow{}
		if err := rs.Scan(&j.ID, &j.Kind, &j.Queue, &j.CreatedAt, &j.Args); err != nil {
			return nil, fmt.Errorf("read stored jobs: %w", err)
		}
		out[j.ID] = j
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read stored jobs: %w", err)
	}
	return out, nil
}

// importWrite is what an import writes: the rows to COPY and the
// parameters of sqlImported.
type importWrite struct {
	rows                     [][]any
	depFrom, depTo           []int64
	countQueues, countStates []string
	counts                   []int64
	maxID, maxToken          int64
	wake                     []string
}

// planImport decides the state of each added job (imported.State for
// a waiting one, from the states of its dependencies: earlier jobs of the
// call as imported, the others as stored, flagged as depended on and
// locked by markDependedOn) and returns what to write.
func (s *Store) planImport(ctx context.Context, tx pgx.Tx, p *store.JobImportParams, res []store.ImportResult) (*importWrite, error) {
	added, dependedOn, external := importLinks(p.Jobs, res)
	stored, err := s.markDependedOn(ctx, tx, external)
	if err != nil {
		return nil, err
	}
	stateOf := func(d int64) (store.JobState, bool) {
		if st, ok := added[d]; ok {
			return st, true
		}
		st, ok := stored[d]
		return st, ok
	}
	w := &importWrite{}
	type countKey struct{ queue, state string }
	counts := map[countKey]int64{}
	wake := map[string]bool{}
	for i, r := range p.Jobs {
		if res[i].Status != store.ImportAdded {
			continue
		}
		state := r.State
		if state == store.JobStateWaiting {
			state = w.wait(r, p.Now, stateOf)
			added[r.ID] = state
		}
		row, err := importRow(r, state, dependedOn[r.ID])
		if err != nil {
			return nil, err
		}
		w.rows = append(w.rows, row)
		counts[countKey{r.Queue, string(state)}]++
		w.maxID, w.maxToken = max(w.maxID, r.ID), max(w.maxToken, r.ClaimToken)
		wake[r.Queue] = wake[r.Queue] || wakesWorkers(state) || state == store.JobStateRetrying
	}
	for k, n := range counts {
		w.countQueues, w.countStates, w.counts = append(w.countQueues, k.queue), append(w.countStates, k.state), append(w.counts, n)
	}
	for q, ok := range wake {
		if ok {
			w.wake = append(w.wake, q)
		}
	}
	slices.Sort(w.wake)
	return w, nil
}

// importLinks returns the states of the jobs of an import to add (as
// exported), the jobs they link to (dependedOn: see links), and those of
// the latter that the call does not add.
func importLinks(jobs []*store.JobRow, res []store.ImportResult) (added map[int64]store.JobState, dependedOn map[int64]bool, external []int64) {
	added = make(map[int64]store.JobState, len(jobs))
	dependedOn = map[int64]bool{}
	for i, r := range jobs {
		if res[i].Status == store.ImportAdded {
			added[r.ID] = r.State
		}
	}
	for i, r := range jobs {
		if res[i].Status != store.ImportAdded {
			continue
		}
		for _, d := range links(r) {
			if _, ok := added[d]; !ok && !dependedOn[d] {
				external = append(external, d)
			}
			dependedOn[d] = true
		}
	}
	return added, dependedOn, external
}

// links returns the earlier jobs r names: its dependencies, and the one
// whose ending cancelled it.
func links(r *store.JobRow) []int64 {
	if r.CancelledBy == 0 {
		return r.DependsOn
	}
	return append(slices.Clip(r.DependsOn), r.CancelledBy)
}

// wait returns the state of waiting job r (imported.State) given the
// current states of its dependencies (stateOf; false for one the store
// does not hold), and records an edge for each dependency that holds it
// back while it waits.
func (w *importWrite) wait(r *store.JobRow, now time.Time, stateOf func(int64) (store.JobState, bool)) store.JobState {
	holds := make([]bool, len(r.DependsOn))
	for k, d := range r.DependsOn {
		st, ok := stateOf(d)
		holds[k] = ok && st.HoldsBack(r.IgnoreDepFailure)
	}
	state := imported.State(r, holds, now)
	if state != store.JobStateWaiting {
		return state
	}
	for k, d := range r.DependsOn {
		if holds[k] && !slices.Contains(r.DependsOn[:k], d) {
			w.depFrom, w.depTo = append(w.depFrom, d), append(w.depTo, r.ID)
		}
	}
	return state
}

// importRow returns the values of importColumns for r stored in state.
func importRow(r *store.JobRow, state store.JobState, hasDependents bool) ([]any, error) {
	errs, err := jsonArg(r.Errors)
	if err != nil {
		return nil, fmt.Errorf("job %d: encode errors: %w", r.ID, err)
	}
	tags, err := jsonArg(r.Tags)
	if err != nil {
		return nil, fmt.Errorf("job %d: encode tags: %w", r.ID, err)
	}
	var deps *string
	if len(r.DependsOn) > 0 {
		if deps, err = jsonArg(r.DependsOn); err != nil {
			return nil, fmt.Errorf("job %d: encode depends_on: %w", r.ID, err)
		}
	}
	return []any{r.ID, r.Kind, r.Queue, r.Args, string(state), int16(r.Priority), int32(r.Attempt), int32(r.MaxAttempts), r.RunAt,
		r.CreatedAt, nullTime(r.AttemptedAt), nullStr(r.AttemptedBy), nullTime(r.FinalizedAt), nullTime(r.LeaseUntil), r.ClaimToken,
		nullStr(r.UniqueKey), errs, tags, r.Meta, int64(r.Timeout), nullStr(r.PartitionKey), r.Result, r.Progress,
		r.CancelRequested, nullID(r.WorkflowID), deps, r.IgnoreDepFailure, hasDependents, nullID(r.CancelledBy),
		nullID(r.ParentID), nullStr(r.SpawnStep), r.CancelWithParent, nullStr(r.WaitsFor)}, nil
}

// nullID binds ID 0 as NULL.
func nullID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}
