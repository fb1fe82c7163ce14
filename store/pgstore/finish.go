package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/jobhistory"
	"github.com/sortiehq/sortie/store/internal/transition"
)

// sqlFinish applies a batch of outcomes in one statement (finish_jobs,
// schemaV2): one UPDATE from parallel arrays, fenced by state and claim
// token. With $8 false it skips
// jobs that others depend on (JobFinish then finishes those in a
// transaction that also releases or cancels the dependents). It notifies
// the queues where a job became available, scheduled or retrying, and the
// queues with limits (a finished job frees a slot).
const sqlFinish = `SELECT id, claim_token, state, has_dependents, woke FROM {s}.finish_jobs($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// outcomeArgs are the parameters of sqlFinish for some outcomes.
type outcomeArgs struct {
	ids, tokens []int64
	kinds       []int16
	runAts      []time.Time
	errs        []*string
	results     [][]byte
	index       []int // outcome index of each element
	// byRef maps a claim to its element; built on first use.
	byRef map[store.LeaseRef]int
	// unstartedIDs and unstartedTokens are the claims of the releases
	// whose handler never started (store.Report.Unstarted).
	unstartedIDs, unstartedTokens []int64
}

// add appends report o, the i-th of its call. The statement applies the
// state rules (finishSet); the error and result the report records come
// from transition.Next, with attempt 0 for the statement to fill in.
func (a *outcomeArgs) add(i int, o *store.Report, now time.Time) error {
	runAt := o.RunAt
	if runAt.IsZero() {
		runAt = now
	}
	step := transition.Next(o, 0, 1, now)
	ej, err := errorJSON(step.Error)
	if err != nil {
		return err
	}
	result := step.Result
	a.ids, a.tokens = append(a.ids, o.ID), append(a.tokens, o.ClaimToken)
	a.kinds, a.runAts = append(a.kinds, int16(o.Kind)), append(a.runAts, runAt)
	a.errs, a.results = append(a.errs, ej), append(a.results, result)
	a.index = append(a.index, i)
	if o.Unstarted {
		a.unstartedIDs, a.unstartedTokens = append(a.unstartedIDs, o.ID), append(a.unstartedTokens, o.ClaimToken)
	}
	return nil
}

// finished is one applied outcome as sqlFinish returns it.
type finished struct {
	id, token     int64
	state         store.JobState
	hasDependents bool
}

// runFinish runs sqlFinish and returns the applied outcomes.
func (s *Store) runFinish(ctx context.Context, db execer, a *outcomeArgs, now time.Time, withDependents bool) ([]finished, error) {
	rs, err := db.Query(ctx, s.q.get(sqlFinish), a.ids, a.tokens, a.kinds, a.runAts, a.errs, a.results, now, withDependents, s.channel)
	if err != nil {
		return nil, fmt.Errorf("apply outcomes: %w", err)
	}
	defer rs.Close()
	var out []finished
	for rs.Next() {
		var f finished
		var state string
		var woke int64
		if err := rs.Scan(&f.id, &f.token, &state, &f.hasDependents, &woke); err != nil {
			return nil, fmt.Errorf("apply outcomes: %w", err)
		}
		f.state = store.JobState(state)
		out = append(out, f)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("apply outcomes: %w", err)
	}
	return out, nil
}

// JobFinish applies the outcomes in one statement when none of their jobs
// has dependents; outcomes it could not apply there (a job with
// dependents, or a refused one) go through a transaction that also
// handles the dependents.
func (s *Store) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	results := make([]store.ReportResult, len(p.Reports))
	if len(p.Reports) == 0 {
		return results, nil
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	a, err := outcomesArgs(p)
	if err != nil {
		return nil, fmt.Errorf("pgstore: finish: %w", err)
	}
	if len(a.unstartedIDs) > 0 {
		return s.finishGivingBack(ctx, a, p.Now, results)
	}
	var done []finished
	err = s.retryConflicts(ctx, func() (err error) {
		done, err = s.runFinish(ctx, s.pool, a, p.Now, false)
		return err
	})
	if err != nil {
		return nil, s.opErr("finish", err)
	}
	applied := applyResults(results, a, done)
	if applied == len(a.ids) {
		s.waits.finished(done)
		return results, nil
	}
	rest := &outcomeArgs{}
	for k, i := range a.index {
		if !results[i].Applied {
			rest.ids, rest.tokens = append(rest.ids, a.ids[k]), append(rest.tokens, a.tokens[k])
			rest.kinds, rest.runAts = append(rest.kinds, a.kinds[k]), append(rest.runAts, a.runAts[k])
			rest.errs, rest.results = append(rest.errs, a.errs[k]), append(rest.results, a.results[k])
			rest.index = append(rest.index, i)
		}
	}
	var more []finished
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		more, err = s.finishTx(ctx, tx, rest, p.Now)
		return err
	})
	if err != nil {
		return nil, s.opErr("finish", err)
	}
	applyResults(results, rest, more)
	s.waits.finished(done)
	s.waits.finished(more)
	return results, nil
}

// finishGivingBack applies outcomes of which some release jobs whose
// handler never started, in one transaction that first gives their starts
// back (sqlGiveBackStarts). Such releases are rare (a claim that came back
// late, a pause or a stop before a reserved start): they take the
// transaction path, and the common finish stays one statement.
func (s *Store) finishGivingBack(ctx context.Context, a *outcomeArgs, now time.Time, results []store.ReportResult) ([]store.ReportResult, error) {
	var done []finished
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.q.get(sqlGiveBackStarts), a.unstartedIDs, a.unstartedTokens, now); err != nil {
			return fmt.Errorf("give back starts: %w", err)
		}
		var err error
		done, err = s.finishTx(ctx, tx, a, now)
		return err
	})
	if err != nil {
		return nil, s.opErr("finish", err)
	}
	applyResults(results, a, done)
	s.waits.finished(done)
	return results, nil
}

// sqlGiveBackStarts gives back to the rate windows the starts of the
// running claims ($1 IDs, $2 tokens) whose handler never started, as of
// $3: for each window that counted a start (the queue's, and the job's
// partition's) and still holds it at $3, it adds a row of minus the
// starts at the job's AttemptedAt. Every reader sums rate_starts.n, and a
// claim recorded its starts at its latest AttemptedAt (claim_limited,
// claim_partitioned), never earlier than the job's, so a window holds the
// minus row whenever it holds the start it cancels: no window counts
// fewer starts than were made. It locks the jobs in ID order, as every
// statement of the store does, for the finish that follows in the same
// transaction.
const sqlGiveBackStarts = `WITH j AS (
		SELECT j.queue, j.partition_key, j.attempted_at
		FROM unnest($1::bigint[], $2::bigint[]) AS r(id, token)
		JOIN {s}.jobs j ON j.id = r.id AND j.claim_token = r.token
		WHERE j.state = 'running'
		ORDER BY j.id FOR UPDATE OF j
	), w AS (
		SELECT j.queue, j.partition_key, j.attempted_at,
			coalesce((q.settings->>'rate_limit')::bigint, 0) AS rate_limit,
			make_interval(secs => coalesce((q.settings->>'rate_period')::bigint, 0) / 1e9) AS period,
			coalesce((q.settings->>'partition_rate_limit')::bigint, 0) AS part_rate,
			make_interval(secs => coalesce((q.settings->>'partition_rate_period')::bigint, 0) / 1e9) AS part_period
		FROM j JOIN {s}.queues q ON q.name = j.queue
	)
	INSERT INTO {s}.rate_starts (queue, partition, at, n)
	SELECT w.queue, '', w.attempted_at, -count(*) FROM w
		WHERE w.rate_limit > 0 AND w.attempted_at > $3::timestamptz - w.period GROUP BY w.queue, w.attempted_at
	UNION ALL
	SELECT w.queue, w.partition_key, w.attempted_at, -count(*) FROM w
		WHERE w.part_rate > 0 AND w.partition_key IS NOT NULL AND w.attempted_at > $3::timestamptz - w.part_period
		GROUP BY w.queue, w.partition_key, w.attempted_at`

// finishTx applies outcomes in tx, releasing or cancelling the dependents
// of the jobs that finished.
func (s *Store) finishTx(ctx context.Context, tx pgx.Tx, a *outcomeArgs, now time.Time) ([]finished, error) {
	done, err := s.runFinish(ctx, tx, a, now, true)
	if err != nil {
		return nil, err
	}
	byState := map[store.JobState][]int64{}
	for _, f := range done {
		if f.hasDependents && f.state.Finished() {
			byState[f.state] = append(byState[f.state], f.id)
		}
	}
	for _, st := range []store.JobState{store.JobStateCompleted, store.JobStateCancelled, store.JobStateDead} {
		if ids := byState[st]; len(ids) > 0 {
			if err := s.depsEnded(ctx, tx, ids, st, false, now); err != nil {
				return nil, err
			}
		}
	}
	return done, nil
}

// outcomesArgs validates the outcomes and encodes them in job ID order, the
// order every statement of the store locks jobs in, so that a finish and a
// lease extension of the same jobs never wait on each other in a cycle. A
// job named twice gets its first outcome; the later ones are refused.
func outcomesArgs(p *store.JobFinishParams) (*outcomeArgs, error) {
	if err := store.ValidateReports(p.Reports); err != nil {
		return nil, err
	}
	order := make([]int, len(p.Reports))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(p.Reports[x].ID, p.Reports[y].ID) })
	a := &outcomeArgs{}
	seen := make(map[store.LeaseRef]bool, len(p.Reports))
	for _, i := range order {
		o := p.Reports[i]
		ref := store.LeaseRef{ID: o.ID, ClaimToken: o.ClaimToken}
		if seen[ref] {
			continue
		}
		seen[ref] = true
		if err := a.add(i, o, p.Now); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// sortedRefs returns the IDs and tokens of refs in job ID order (see
// outcomesArgs).
func sortedRefs(refs []store.LeaseRef) (ids, tokens []int64) {
	sorted := slices.Clone(refs)
	slices.SortFunc(sorted, func(x, y store.LeaseRef) int { return cmp.Compare(x.ID, y.ID) })
	ids, tokens = make([]int64, len(sorted)), make([]int64, len(sorted))
	for i, r := range sorted {
		ids[i], tokens[i] = r.ID, r.ClaimToken
	}
	return ids, tokens
}

// applyResults records the applied outcomes in results and returns how
// many there were.
func applyResults(results []store.ReportResult, a *outcomeArgs, done []finished) int {
	if a.byRef == nil {
		a.byRef = make(map[store.LeaseRef]int, len(a.ids))
		for k := range a.ids {
			a.byRef[store.LeaseRef{ID: a.ids[k], ClaimToken: a.tokens[k]}] = k
		}
	}
	for _, f := range done {
		if k, ok := a.byRef[store.LeaseRef{ID: f.id, ClaimToken: f.token}]; ok {
			results[a.index[k]] = store.ReportResult{Applied: true, State: f.state}
		}
	}
	return len(done)
}

// sqlLeaseExtend extends the leases still held, records their progress and
// reports cancel requests.
const sqlLeaseExtend = `SELECT id, claim_token, cancel_requested FROM {s}.extend_leases($1, $2, $3, $4)`

// LeaseExtend extends the leases and records their progress in one
// statement.
func (s *Store) LeaseExtend(ctx context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error) {
	out := make([]store.LeaseStatus, len(p.Leases))
	if len(p.Leases) == 0 {
		return out, nil
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	ids, tokens := sortedRefs(p.Leases)
	progress := make([]*float64, len(ids))
	for i := range ids {
		if pr, ok := p.Progress[store.LeaseRef{ID: ids[i], ClaimToken: tokens[i]}]; ok {
			progress[i] = &pr
		}
	}
	var held map[store.LeaseRef]bool
	err := s.retryConflicts(ctx, func() (err error) {
		held, err = s.extendLeases(ctx, ids, tokens, progress, p.Now.Add(p.Lease))
		return err
	})
	if err != nil {
		return nil, s.opErr("extend leases", err)
	}
	for i, l := range p.Leases {
		if cancel, ok := held[l]; ok {
			out[i] = store.LeaseStatus{Held: true, CancelRequested: cancel}
		}
	}
	return out, nil
}

// extendLeases runs sqlLeaseExtend and returns the claims still held, each
// with its cancel request.
func (s *Store) extendLeases(ctx context.Context, ids, tokens []int64, progress []*float64, until time.Time) (map[store.LeaseRef]bool, error) {
	rs, err := s.pool.Query(ctx, s.q.get(sqlLeaseExtend), ids, tokens, progress, until)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	held := map[store.LeaseRef]bool{}
	for rs.Next() {
		var ref store.LeaseRef
		var cancel bool
		if err := rs.Scan(&ref.ID, &ref.ClaimToken, &cancel); err != nil {
			return nil, err
		}
		held[ref] = cancel
	}
	return held, rs.Err()
}

// sqlExpired locks running jobs whose lease ended.
const sqlExpired = `SELECT id, queue, attempt, max_attempts, cancel_requested, has_dependents FROM {s}.jobs
	WHERE state = 'running' AND lease_until < $1 ORDER BY lease_until LIMIT $2 FOR UPDATE SKIP LOCKED`

// sqlRescue moves rescued jobs to their new states with a lease-lost error.
const sqlRescue = `UPDATE {s}.jobs j SET state = u.state, lease_until = NULL, cancel_requested = false,
		finalized_at = CASE WHEN u.state IN ('dead', 'cancelled') THEN $3::timestamptz END,
		errors = COALESCE(j.errors, '[]'::jsonb) || jsonb_build_array(u.err::jsonb)
	FROM unnest($1::bigint[], $2::text[], $4::text[]) AS u(id, state, err)
	WHERE j.id = u.id`

// JobRescue takes back jobs whose lease expired, in one transaction.
func (s *Store) JobRescue(ctx context.Context, p *store.JobRescueParams) (int, error) {
	if err := store.ValidateLimit("JobRescueParams", p.Limit); err != nil {
		return 0, err
	}
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rs, err := tx.Query(ctx, s.q.get(sqlExpired), p.Now, p.Limit)
		if err != nil {
			return fmt.Errorf("find expired leases: %w", err)
		}
		var ids []int64
		var states, errs, wake []string
		var history jobhistory.Tally
		ended := map[store.JobState][]int64{}
		for rs.Next() {
			var id int64
			var queue string
			var attempt, maxAttempts int32
			var cancel, hasDeps bool
			if err := rs.Scan(&id, &queue, &attempt, &maxAttempts, &cancel, &hasDeps); err != nil {
				rs.Close()
				return fmt.Errorf("find expired leases: %w", err)
			}
			state := transition.RescueState(int(attempt), int(maxAttempts), cancel)
			re := transition.RescueError(int(attempt), p.Now)
			e, err := errorJSON(&re)
			if err != nil {
				rs.Close()
				return err
			}
			ids, states, errs = append(ids, id), append(states, string(state)), append(errs, *e)
			if o, ok := transition.OutcomeOf(state, true); ok {
				history.Add(queue, p.Now, o, 1)
			}
			if state == store.JobStateAvailable && !slices.Contains(wake, queue) {
				wake = append(wake, queue)
			}
			if state != store.JobStateAvailable && hasDeps {
				ended[state] = append(ended[state], id)
			}
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return fmt.Errorf("find expired leases: %w", err)
		}
		n = len(ids)
		if n == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, s.q.get(sqlRescue), ids, states, p.Now, errs); err != nil {
			return fmt.Errorf("rescue jobs: %w", err)
		}
		if err := s.addHistory(ctx, tx, &history); err != nil {
			return err
		}
		for st, ids := range ended {
			if err := s.depsEnded(ctx, tx, ids, st, false, p.Now); err != nil {
				return err
			}
		}
		return s.notify(ctx, tx, wake)
	})
	if err != nil {
		return 0, s.opErr("rescue", err)
	}
	if err := s.foldCounts(ctx); err != nil {
		return n, s.opErr("rescue", err)
	}
	return n, nil
}
