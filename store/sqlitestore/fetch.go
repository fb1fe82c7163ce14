package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/fetchplan"
	"github.com/sortiehq/sortie/store/internal/ratelimit"
)

// JobFetch claims up to p.Limit available jobs of p.Queue in (Priority,
// RunAt, ID) order. Scheduled and retrying jobs of the queue that are due are
// made available first, in the same transaction. All jobs claimed by one call
// share one new ClaimToken. p.Limit must be at least 1. A short fetch reads
// its NextAt from the read pool after the claim commits.
func (s *Store) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	if err := store.ValidateLimit("JobFetchParams", p.Limit); err != nil {
		return nil, err
	}
	var kinds string
	if len(p.Kinds) > 0 {
		b, err := json.Marshal(p.Kinds)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: fetch: encode kinds: %w", err)
		}
		kinds = string(b)
	}
	now, lease := micros(p.Now), micros(p.Now.Add(p.Lease))
	var jobs []*store.JobRow
	r := &request{}
	r.op = func(t *txn, r *request) error {
		var err error
		jobs, err = fetch(t, r, p, kinds, now, lease)
		return err
	}
	if err := s.do(ctx, r); err != nil {
		return nil, opErr("fetch", err)
	}
	s.waker.fetched(p.Queue, p.Worker, len(jobs) < p.Limit)
	fetchplan.Sort(jobs)
	res := &store.JobFetchResult{Jobs: jobs}
	if len(jobs) < p.Limit {
		next, err := s.nextAt(ctx, p.Queue, p.Now)
		if err != nil {
			return nil, s.readErr("fetch", err)
		}
		res.NextAt = next
	}
	return res, nil
}

// fetch runs in the writer. A queue without settings costs one claim: its
// cached settings are read with the sequences, once per group.
func fetch(t *txn, r *request, p *store.JobFetchParams, kinds string, now, lease int64) ([]*store.JobRow, error) {
	st := t.w.stmts
	qs, err := t.queue(p.Queue)
	if err != nil {
		return nil, err
	}
	if qs != nil && qs.paused {
		return nil, nil
	}
	promoted, err := promoteDue(t, r, p.Queue, now)
	if err != nil {
		return nil, err
	}
	tok, err := t.peekToken()
	if err != nil {
		return nil, err
	}
	limit := int64(p.Limit)
	if qs != nil {
		var running, started int64
		if qs.s.MaxRunning > 0 {
			if running, err = t.runningCount(r, p.Queue); err != nil {
				return nil, err
			}
		}
		if rate := ratelimit.Queue(qs.s); rate.On() && fetchplan.QueueRoom(qs.s, limit, running, 0) > 0 {
			if started, err = rateWindow(t, p.Queue, "", rate, p.Now); err != nil {
				return nil, err
			}
		}
		if limit = fetchplan.QueueRoom(qs.s, limit, running, started); limit == 0 {
			return nil, nil
		}
	}
	var jobs []*store.JobRow
	if qs != nil && qs.partitioned() {
		jobs, err = claimPartitioned(t, p, qs, kinds, limit, now, lease, tok)
		if err != nil {
			return nil, err
		}
	} else {
		claim, merged := st.claim, st.claimMerged
		if kinds != "" {
			claim, merged = st.claimKinds, st.claimMergedKinds
		}
		if jobs, err = claimPlain(t, claim, p, kinds, limit, now, lease, tok); err == nil && len(jobs) == 0 {
			// Keyed jobs are available, or none is.
			jobs, err = claimPlain(t, merged, p, kinds, limit, now, lease, tok)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(jobs) > 0 {
		t.takeToken()
		r.count(p.Queue, store.JobStateAvailable, -int64(len(jobs)))
		r.count(p.Queue, store.JobStateRunning, int64(len(jobs)))
		if err := recordStarts(t, p.Queue, qs, jobs, now); err != nil {
			return nil, err
		}
	}
	if promoted > int64(len(jobs)) {
		// Due jobs this call did not take: tell other workers.
		r.wake(p.Queue)
	}
	return jobs, nil
}

// claimPlain runs claim (sqlClaim, sqlClaimMerged or one of their Kinds
// variants, which bind kinds) and returns the jobs it claimed.
func claimPlain(t *txn, claim *sql.Stmt, p *store.JobFetchParams, kinds string, limit, now, lease, tok int64) ([]*store.JobRow, error) {
	var rows *sql.Rows
	var err error
	if kinds == "" {
		rows, err = claim.QueryContext(t.ctx, p.Queue, limit, now, p.Worker, lease, tok)
	} else {
		rows, err = claim.QueryContext(t.ctx, p.Queue, limit, now, p.Worker, lease, tok, kinds)
	}
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	jobs, err := scanJobs(rows, make([]*store.JobRow, 0, min(limit, 128)))
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	return jobs, nil
}

// rateWindow counts the starts of queue's partition ("" for the queue
// itself) in w's window ending at now, after deleting those w lets go (see
// ratelimit.Window).
func rateWindow(t *txn, queue, partition string, w ratelimit.Window, now time.Time) (int64, error) {
	if _, err := t.w.stmts.ratePrune.ExecContext(t.ctx, queue, partition, micros(w.ForgetBefore(now))); err != nil {
		return 0, fmt.Errorf("prune rate window: %w", err)
	}
	var n int64
	if err := t.w.stmts.rateCount.QueryRowContext(t.ctx, queue, partition, micros(w.From(now))).Scan(&n); err != nil {
		return 0, fmt.Errorf("count rate window: %w", err)
	}
	return n, nil
}

// giveBackStart forgets the start that the claim of running job id of
// queue recorded in the rate windows that counted it: its handler never
// started (store.Report.Unstarted). A start already out of the window at
// now is left to the pruning: no fetch at now counts it, and the row
// recordStarts wrote for it may be gone.
func giveBackStart(t *txn, id int64, queue string, now time.Time) error {
	qs, err := t.queue(queue)
	if err != nil || qs == nil || (qs.s.RateLimit == 0 && qs.s.PartitionRateLimit == 0) {
		return err
	}
	var at int64
	var partition string
	if err := t.w.stmts.startOf.QueryRowContext(t.ctx, id).Scan(&at, &partition); err != nil {
		return fmt.Errorf("give back the start of job %d: %w", id, err)
	}
	forget := func(partition string, w ratelimit.Window) error {
		if !w.On() || at <= micros(w.From(now)) {
			return nil
		}
		if _, err := t.w.stmts.rateGiveBack.ExecContext(t.ctx, queue, partition, at); err != nil {
			return fmt.Errorf("give back the start of job %d: %w", id, err)
		}
		return nil
	}
	if err := forget("", ratelimit.Queue(qs.s)); err != nil {
		return err
	}
	if partition == "" {
		return nil
	}
	return forget(partition, ratelimit.Partition(qs.s))
}

// recordStarts adds one row per claimed job to the rate windows of the
// queue and of each job's partition that have a rate limit, each group's
// at the latest AttemptedAt of its jobs (now, unless a job was due later:
// fetchplan.AttemptedAt).
func recordStarts(t *txn, queue string, qs *queueState, jobs []*store.JobRow, now int64) error {
	if qs == nil {
		return nil
	}
	add := func(partition string, n int, at int64) error {
		if _, err := t.w.stmts.rateAdd.ExecContext(t.ctx, queue, partition, at, n); err != nil {
			return fmt.Errorf("record starts: %w", err)
		}
		return nil
	}
	type group struct {
		n  int
		at int64
	}
	if qs.s.RateLimit > 0 {
		at := now
		for _, j := range jobs {
			at = max(at, micros(j.AttemptedAt))
		}
		if err := add("", len(jobs), at); err != nil {
			return err
		}
	}
	if qs.s.PartitionRateLimit > 0 {
		per := make(map[string]group)
		for _, j := range jobs {
			if j.PartitionKey != "" {
				g := per[j.PartitionKey]
				per[j.PartitionKey] = group{n: g.n + 1, at: max(g.at, now, micros(j.AttemptedAt))}
			}
		}
		for k, g := range per {
			if err := add(k, g.n, g.at); err != nil {
				return err
			}
		}
	}
	return nil
}

// claimPartitioned claims up to limit jobs of a queue with partition
// limits. It lists the partitions that have available jobs (one index seek
// each), takes from each partition with room at most its room of head jobs
// (an index range read of that many rows, however long its backlog), plus
// the head jobs without a partition key, merges them in (priority, RunAt,
// ID) order and claims the first limit.
func claimPartitioned(t *txn, p *store.JobFetchParams, qs *queueState, kinds string, limit, now, lease, tok int64) ([]*store.JobRow, error) {
	st := t.w.stmts
	var running map[string]int64
	if qs.s.PartitionMaxRunning > 0 {
		rows, err := st.runningPartitions.QueryContext(t.ctx, p.Queue)
		if err != nil {
			return nil, fmt.Errorf("count running jobs per partition: %w", err)
		}
		running = make(map[string]int64)
		for rows.Next() {
			var k string
			var n int64
			if err := rows.Scan(&k, &n); err != nil {
				rows.Close()
				return nil, fmt.Errorf("count running jobs per partition: %w", err)
			}
			running[k] = n
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("count running jobs per partition: %w", err)
		}
	}
	rows, err := st.availablePartitions.QueryContext(t.ctx, p.Queue)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list partitions: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	var heads []fetchplan.Head
	for _, k := range keys {
		var started int64
		if rate := ratelimit.Partition(qs.s); rate.On() && fetchplan.PartitionRoom(qs.s, limit, running[k], 0) > 0 {
			if started, err = rateWindow(t, p.Queue, k, rate, p.Now); err != nil {
				return nil, err
			}
		}
		room := fetchplan.PartitionRoom(qs.s, limit, running[k], started)
		if room == 0 {
			continue
		}
		var rows *sql.Rows
		if kinds == "" {
			rows, err = st.partitionHeads.QueryContext(t.ctx, p.Queue, k, room)
		} else {
			rows, err = st.partitionHeadsKinds.QueryContext(t.ctx, p.Queue, k, room, kinds)
		}
		if heads, err = scanHeads(rows, err, heads); err != nil {
			return nil, err
		}
	}
	if kinds == "" {
		rows, err = st.unpartitionedHeads.QueryContext(t.ctx, p.Queue, limit)
	} else {
		rows, err = st.unpartitionedHeadsKinds.QueryContext(t.ctx, p.Queue, limit, kinds)
	}
	if heads, err = scanHeads(rows, err, heads); err != nil {
		return nil, err
	}
	if len(heads) == 0 {
		return nil, nil
	}
	ids := fetchplan.MergeHeads(heads, limit)
	claimed, err := st.claimIDs.QueryContext(t.ctx, t.idList(ids), now, p.Worker, lease, tok)
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	jobs, err := scanJobs(claimed, make([]*store.JobRow, 0, len(ids)))
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	return jobs, nil
}

// scanHeads appends the rows of a heads query (run with error err) to heads.
func scanHeads(rows *sql.Rows, err error, heads []fetchplan.Head) ([]fetchplan.Head, error) {
	if err != nil {
		return nil, fmt.Errorf("read partition heads: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var h fetchplan.Head
		var runAt int64
		if err := rows.Scan(&h.ID, &h.Priority, &runAt); err != nil {
			return nil, fmt.Errorf("read partition heads: %w", err)
		}
		h.RunAt = fromMicros(runAt)
		heads = append(heads, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read partition heads: %w", err)
	}
	return heads, nil
}

// promoteDue makes the due scheduled and retrying jobs of queue available
// and returns how many it changed. With none due it costs one index probe.
func promoteDue(t *txn, r *request, queue string, now int64) (int64, error) {
	st := t.w.stmts
	rows, err := st.dueCount.QueryContext(t.ctx, queue, now)
	if err != nil {
		return 0, fmt.Errorf("count due jobs: %w", err)
	}
	var total int64
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			rows.Close()
			return 0, fmt.Errorf("count due jobs: %w", err)
		}
		r.count(queue, store.JobState(state), -n)
		total += n
	}
	if err := rows.Close(); err != nil {
		return 0, fmt.Errorf("count due jobs: %w", err)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("count due jobs: %w", err)
	}
	if total == 0 {
		return 0, nil
	}
	if _, err := st.promoteDue.ExecContext(t.ctx, queue, now); err != nil {
		return 0, fmt.Errorf("promote due jobs: %w", err)
	}
	r.count(queue, store.JobStateAvailable, total)
	return total, nil
}
