package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/sortiehq/sortie/store"
)

// JobFetch claims up to p.Limit available jobs of p.Queue in (Priority,
// RunAt, ID) order. Scheduled and retrying jobs of the queue that are due are
// made available first, in the same transaction. All jobs claimed by one call
// share one new ClaimToken. p.Limit must be at least 1.
func (s *Store) JobFetch(ctx context.Context, p *store.JobFetchParams) ([]*store.JobRow, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("sqlitestore: fetch: JobFetchParams.Limit must be at least 1, got %d", p.Limit)
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
	sort.Slice(jobs, func(i, j int) bool {
		a, b := jobs[i], jobs[j]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		if !a.RunAt.Equal(b.RunAt) {
			return a.RunAt.Before(b.RunAt)
		}
		return a.ID < b.ID
	})
	return jobs, nil
}

// fetch runs in the writer.
func fetch(t *txn, r *request, p *store.JobFetchParams, kinds string, now, lease int64) ([]*store.JobRow, error) {
	st := t.w.stmts
	promoted, err := promoteDue(t, r, p.Queue, now)
	if err != nil {
		return nil, err
	}
	tok, err := t.peekToken()
	if err != nil {
		return nil, err
	}
	var rows *sql.Rows
	if kinds == "" {
		rows, err = st.claim.QueryContext(t.ctx, p.Queue, p.Limit, now, p.Worker, lease, tok)
	} else {
		rows, err = st.claimKinds.QueryContext(t.ctx, p.Queue, p.Limit, now, p.Worker, lease, tok, kinds)
	}
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	jobs, err := scanJobs(rows, make([]*store.JobRow, 0, min(p.Limit, 128)))
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	if len(jobs) > 0 {
		t.takeToken()
		r.count(p.Queue, store.JobStateAvailable, -int64(len(jobs)))
		r.count(p.Queue, store.JobStateRunning, int64(len(jobs)))
	}
	if promoted > int64(len(jobs)) {
		// Due jobs this call did not take: tell other workers.
		r.wake(p.Queue)
	}
	return jobs, nil
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
