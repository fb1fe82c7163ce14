package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/depgraph"
	"github.com/sortiehq/sortie/store/internal/intake"
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
	results, args, width, err := encodeJobs(p)
	if err != nil {
		return nil, opErr("enqueue", err)
	}
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error { return enqueue(t, r, p, args, width, results) }
	if err := s.do(ctx, r); err != nil {
		return nil, opErr("enqueue", err)
	}
	return results, nil
}

// encodeJobs validates p's jobs and returns their results (State filled in)
// and the INSERT arguments, width per job, with the ID left nil. width is
// insertRowParamsPlain when no job uses a queue feature at insert, else
// insertRowParams.
func encodeJobs(p *store.JobEnqueueManyParams) ([]store.EnqueueResult, []any, int, error) {
	if err := store.ValidateJobs(p.Jobs); err != nil {
		return nil, nil, 0, err
	}
	results := make([]store.EnqueueResult, len(p.Jobs))
	now := micros(p.Now)
	width := insertRowParamsPlain
	if p.Workflow {
		width = insertRowParams
	}
	for _, j := range p.Jobs {
		if j.PartitionKey != "" || j.HasDeps() || j.IgnoreDepFailure {
			width = insertRowParams
			break
		}
	}
	args := make([]any, 0, len(p.Jobs)*width)
	for i, j := range p.Jobs {
		state, at := intake.StartState(j.RunAt, p.Now)
		runAt := micros(at)
		tags, err := tagsArg(j.Tags)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("job %d of %d: encode tags: %w", i, len(p.Jobs), err)
		}
		results[i].State = state
		args = append(args, nil, j.Kind, j.Queue, bytesArg(j.Args), string(state), j.Priority, j.MaxAttempts,
			runAt, now, nullString(j.UniqueKey), tags, bytesArg(j.Meta), int64(j.Timeout))
		if width == insertRowParams {
			args = append(args, nullString(j.PartitionKey), nil, nil, j.IgnoreDepFailure)
		}
	}
	return results, args, width, nil
}

// Positions in an insert row of the values the writer fills in.
const (
	rowID         = 0
	rowState      = 4
	rowWorkflowID = 14
	rowDependsOn  = 15
)

// enqueue runs in the writer: it resolves unique keys, assigns IDs in batch
// order, resolves dependencies, applies the queues' MaxDepth and inserts the
// new jobs with multi-row INSERTs.
// Each job has width values in args (see encodeJobs).
func enqueue(t *txn, r *request, p *store.JobEnqueueManyParams, args []any, width int, results []store.EnqueueResult) error {
	insert, err := markDuplicates(t, p.Jobs, args, width, results)
	if err != nil {
		return err
	}
	if insert == 0 {
		intake.ResolveDuplicates(results)
		return nil
	}
	firstID, err := assignIDs(t, p, args, width, results, insert)
	if err != nil {
		return err
	}
	intake.ResolveDuplicates(results)
	var deps []depEdge
	var doomed []doomedJob
	if slices.ContainsFunc(p.Jobs, (*store.NewJob).HasDeps) {
		if deps, doomed, err = resolveDeps(t, p, args, results, firstID); err != nil {
			return err
		}
	}
	rows, queues := batchRows(r, p.Jobs, args, width, results, insert)
	// Depth, checked before the insert (the counters do not hold this
	// batch yet); drops happen after it, since the batch's own jobs may be
	// among the oldest to go.
	drops, err := checkDepth(t, r, queues)
	if err != nil {
		return err
	}
	for i, j := range p.Jobs {
		if !results[i].Duplicate {
			r.count(j.Queue, results[i].State, 1)
			r.counted(j.Queue, p.Now, results[i].State, false)
		}
	}
	if err := insertRows(t, rows, width); err != nil {
		return err
	}
	if err := insertDeps(t, r, deps, doomed, p.Now); err != nil {
		return err
	}
	return applyDrops(t, r, drops, results, p.Now)
}

// markDuplicates sets each job's starting state in results, marks the
// duplicates (of a pending holder in the table, or of an earlier job of
// the batch) and returns how many jobs are left to insert.
func markDuplicates(t *txn, jobs []*store.NewJob, args []any, width int, results []store.EnqueueResult) (int, error) {
	insert := len(jobs)
	for i := range jobs {
		results[i] = store.EnqueueResult{State: store.JobState(args[i*width+rowState].(string))}
	}
	intake.MarkDuplicates(jobs, results)
	for i, j := range jobs {
		if results[i].Duplicate {
			insert--
			continue
		}
		if j.UniqueKey == "" {
			continue
		}
		var id int64
		var state string
		err := t.w.stmts.uniqueHolder.QueryRowContext(t.ctx, j.UniqueKey).Scan(&id, &state)
		switch {
		case err == nil:
			results[i] = store.EnqueueResult{ID: id, Duplicate: true, State: store.JobState(state)}
			insert--
		case errNoRows(err):
		default:
			return 0, fmt.Errorf("look up unique key %q: %w", j.UniqueKey, err)
		}
	}
	return insert, nil
}

// assignIDs gives the insert jobs that are not duplicates their IDs, in
// batch order, in results and in their rows of args, and returns the first.
func assignIDs(t *txn, p *store.JobEnqueueManyParams, args []any, width int, results []store.EnqueueResult, insert int) (int64, error) {
	id, err := t.allocIDs(insert)
	if err != nil {
		return 0, err
	}
	firstID := id
	for i := range p.Jobs {
		if results[i].Duplicate {
			continue
		}
		results[i].ID = id
		row := args[i*width : (i+1)*width]
		row[rowID] = id
		if width == insertRowParams {
			row[rowWorkflowID] = nil
			if p.Workflow {
				row[rowWorkflowID] = firstID
			}
			row[rowDependsOn] = nil
		}
		id++
	}
	return firstID, nil
}

// batchRows returns the insert values of the jobs that are not duplicates
// and their queued jobs per queue, and marks the queues to wake.
func batchRows(r *request, jobs []*store.NewJob, args []any, width int, results []store.EnqueueResult, insert int) ([]any, []queueAdd) {
	rows := args
	if insert < len(jobs) {
		rows = make([]any, 0, insert*width)
	}
	var queues []queueAdd
	for i, j := range jobs {
		if results[i].Duplicate {
			continue
		}
		if insert < len(jobs) {
			rows = append(rows, args[i*width:(i+1)*width]...)
		}
		state := results[i].State
		queues = addQueued(queues, j.Queue, state.Queued())
		if state == store.JobStateAvailable || state == store.JobStateScheduled {
			r.wake(j.Queue)
		}
	}
	return rows, queues
}

// checkDepth applies each queue's MaxDepth to the batch's queued jobs: it
// fails a batch that OverflowReject refuses, and returns the drops that
// OverflowDropOldest makes.
func checkDepth(t *txn, r *request, queues []queueAdd) ([]queueDrop, error) {
	var drops []queueDrop
	for _, q := range queues {
		qs, err := t.queue(q.name)
		if err != nil {
			return nil, err
		}
		if qs == nil || qs.s.MaxDepth <= 0 || q.n == 0 {
			continue
		}
		queued, err := t.queuedCount(r, q.name)
		if err != nil {
			return nil, err
		}
		if over := intake.DepthExcess(queued, q.n, qs.s.MaxDepth); over > 0 {
			if qs.s.Overflow != store.OverflowDropOldest {
				return nil, store.QueueFullError(q.name, qs.s.MaxDepth, queued, q.n)
			}
			drops = append(drops, queueDrop{q.name, qs.s.MaxDepth, over})
		}
	}
	return drops, nil
}

// insertRows inserts rows, width values per job, in multi-row INSERTs.
func insertRows(t *txn, rows []any, width int) error {
	inserts := &t.w.stmts.insert
	if width == insertRowParamsPlain {
		inserts = &t.w.stmts.insertPlain
	}
	for c, size := range insertChunks {
		for len(rows) >= size*width {
			n := size * width
			if _, err := inserts[c].ExecContext(t.ctx, rows[:n]...); err != nil {
				return fmt.Errorf("insert jobs: %w", err)
			}
			rows = rows[n:]
		}
	}
	return nil
}

// insertDeps inserts the dependency edges of the new waiting jobs and cancels
// the new jobs whose dependency already ended dead or cancelled.
func insertDeps(t *txn, r *request, deps []depEdge, doomed []doomedJob, now time.Time) error {
	if len(deps) > 0 {
		t.hasDeps = true
	}
	for _, d := range deps {
		if _, err := t.w.stmts.depAdd.ExecContext(t.ctx, d.dep, d.job); err != nil {
			return fmt.Errorf("insert dependencies: %w", err)
		}
	}
	for _, d := range doomed {
		e := &store.AttemptError{At: now, Message: d.msg}
		if err := finishOne(t, d.id, store.JobStateCancelled, micros(now), e); err != nil {
			return err
		}
		if err := markCancelledBy(t, d.id, d.dep); err != nil {
			return err
		}
		r.ended = append(r.ended, d.id)
	}
	return nil
}

// applyDrops cancels the oldest queued jobs of each drop, and marks the
// batch's own jobs among them cancelled in results.
func applyDrops(t *txn, r *request, drops []queueDrop, results []store.EnqueueResult, now time.Time) error {
	for _, d := range drops {
		dropped, err := dropOldest(t, r, d, now)
		if err != nil {
			return err
		}
		for i := range results {
			if !results[i].Duplicate && dropped[results[i].ID] {
				results[i].State = store.JobStateCancelled
			}
		}
	}
	return nil
}

// queueAdd counts a batch's queued jobs of one queue.
type queueAdd struct {
	name string
	n    int64
}

func addQueued(qs []queueAdd, name string, queued bool) []queueAdd {
	var n int64
	if queued {
		n = 1
	}
	for i := range qs {
		if qs[i].name == name {
			qs[i].n += n
			return qs
		}
	}
	return append(qs, queueAdd{name, n})
}

// queueDrop is a drop-oldest to make: over jobs of queue.
type queueDrop struct {
	queue    string
	maxDepth int
	over     int64
}

// depEdge is one unfinished dependency of a new waiting job.
type depEdge struct{ dep, job int64 }

// doomedJob is a new job cancelled at enqueue because a dependency already
// ended dead or cancelled.
type doomedJob struct {
	id, dep int64
	msg     string
}

// resolveDeps decides the state of each new job with dependencies, in batch
// order (so a job depending on an earlier one of the batch sees its state),
// and returns the dependency rows to insert and the jobs to cancel at once.
func resolveDeps(t *txn, p *store.JobEnqueueManyParams, args []any, results []store.EnqueueResult, firstID int64) ([]depEdge, []doomedJob, error) {
	var deps []depEdge
	var doomed []doomedJob
	for i, j := range p.Jobs {
		if results[i].Duplicate || !j.HasDeps() {
			continue
		}
		ids := depgraph.IDs(j, results)
		self := results[i].ID
		states := make([]store.JobState, len(ids))
		for k, d := range ids {
			st, err := depState(t, d, self, firstID, results[:i])
			if errNoRows(err) {
				return nil, nil, depgraph.UnknownError(i, len(p.Jobs), j.Kind, d)
			}
			if err != nil {
				return nil, nil, err
			}
			states[k] = st
		}
		v := depgraph.Judge(results[i].State, j.IgnoreDepFailure, ids, states)
		row := args[i*insertRowParams : (i+1)*insertRowParams]
		row[rowDependsOn] = string(appendIDs(nil, ids))
		results[i].State = v.State
		switch v.State {
		case store.JobStateCancelled:
			doomed = append(doomed, doomedJob{self, v.CancelledBy, v.Message})
		case store.JobStateWaiting:
			// Edges only to the dependencies that hold the job back: one
			// that already completed never ends again to remove its edge.
			for k, d := range ids {
				if states[k].HoldsBack(j.IgnoreDepFailure) {
					deps = append(deps, depEdge{d, self})
				}
			}
		}
		row[rowState] = string(results[i].State)
	}
	return deps, doomed, nil
}

// depState returns the state of dependency d of the new job self: from the
// batch's earlier results when it is one of the batch (firstID up), else
// from the table. A dependency that does not exist (or is the job itself)
// returns sql.ErrNoRows.
func depState(t *txn, d, self, firstID int64, earlier []store.EnqueueResult) (store.JobState, error) {
	if d == self {
		return "", sql.ErrNoRows
	}
	if d >= firstID && d < self {
		// An earlier job of this batch, not inserted yet.
		k := slices.IndexFunc(earlier, func(e store.EnqueueResult) bool { return !e.Duplicate && e.ID == d })
		return earlier[k].State, nil
	}
	var v string
	err := t.w.stmts.jobState.QueryRowContext(t.ctx, d).Scan(&v)
	if err != nil && !errNoRows(err) {
		return "", fmt.Errorf("read dependency %d: %w", d, err)
	}
	return store.JobState(v), err
}

// queuedCount returns the queued (waiting, scheduled, available, retrying)
// jobs of queue: the counters plus the changes of this group not yet
// written to them.
func (t *txn) queuedCount(r *request, queue string) (int64, error) {
	var n int64
	if err := t.w.stmts.queuedCount.QueryRowContext(t.ctx, queue).Scan(&n); err != nil {
		return 0, fmt.Errorf("count queued jobs: %w", err)
	}
	for _, cs := range [][]countDelta{t.counts, r.counts} {
		for _, c := range cs {
			if c.queue == queue && c.state.Queued() {
				n += c.n
			}
		}
	}
	return n, nil
}

// runningCount returns the running jobs of queue, as queuedCount does.
func (t *txn) runningCount(r *request, queue string) (int64, error) {
	var n int64
	if err := t.w.stmts.countOf.QueryRowContext(t.ctx, queue, string(store.JobStateRunning)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count running jobs: %w", err)
	}
	for _, cs := range [][]countDelta{t.counts, r.counts} {
		for _, c := range cs {
			if c.queue == queue && c.state == store.JobStateRunning {
				n += c.n
			}
		}
	}
	return n, nil
}

// dropOldest cancels the d.over oldest queued jobs of d.queue and returns
// their IDs.
func dropOldest(t *txn, r *request, d queueDrop, now time.Time) (map[int64]bool, error) {
	rows, err := t.w.stmts.oldestQueued.QueryContext(t.ctx, d.queue, d.over)
	if err != nil {
		return nil, fmt.Errorf("find oldest queued jobs: %w", err)
	}
	type victim struct {
		id    int64
		state store.JobState
	}
	var victims []victim
	for rows.Next() {
		var v victim
		var state string
		if err := rows.Scan(&v.id, &state); err != nil {
			rows.Close()
			return nil, fmt.Errorf("find oldest queued jobs: %w", err)
		}
		v.state = store.JobState(state)
		victims = append(victims, v)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("find oldest queued jobs: %w", err)
	}
	dropped := make(map[int64]bool, len(victims))
	ids := make([]int64, 0, len(victims))
	jobs := make([]*store.JobRow, 0, len(victims))
	for _, v := range victims {
		dropped[v.id] = true
		ids = append(ids, v.id)
		jobs = append(jobs, &store.JobRow{ID: v.id, Queue: d.queue, State: v.state})
	}
	if err := cancelJobs(t, r, jobs, now, store.DroppedMessage(d.queue, d.maxDepth)); err != nil {
		return nil, err
	}
	if _, err := t.w.stmts.queueDropped.ExecContext(t.ctx, d.queue, len(victims)); err != nil {
		return nil, fmt.Errorf("count dropped jobs: %w", err)
	}
	if err := depsEnded(t, r, ids, store.JobStateCancelled, false, now); err != nil {
		return nil, err
	}
	return dropped, nil
}
