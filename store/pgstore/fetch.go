package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/fetchplan"
)

// sqlClaim is a fetch from a queue without limits: claim_jobs (schemaV2)
// promotes due jobs and claims available ones in one statement.
const sqlClaim = `SELECT ` + jobCols + ` FROM {s}.claim_jobs($1, $2, $3, $4, $5, $6, $7)`

// sqlFirstDue is the earliest due time of queue $1's scheduled and
// retrying jobs, NULL when it has none: the first entry of jobs_due in
// order. Not min(): the planner read that as an aggregate over every entry
// of the queue in jobs_due, dead ones included (jobs made available since
// the last vacuum), and at 3,000 jobs/s a short fetch's queue state cost
// twice as much that way (250 buffers a call, against 96).
const sqlFirstDue = `SELECT run_at FROM {s}.jobs WHERE queue = $1 AND state IN ('scheduled', 'retrying') ORDER BY run_at LIMIT 1`

// sqlQueueState reads, after a short claim, a queue's pause and limits
// (false when it has no row), whether they include partition limits, and
// its first due time (sqlFirstDue), in one statement.
const sqlQueueState = `SELECT COALESCE(q.paused, false), COALESCE(q.limited, false),
		COALESCE(q.settings ? 'partition_max_running' OR q.settings ? 'partition_rate_limit', false),
		(` + sqlFirstDue + `)
	FROM (SELECT 1) x LEFT JOIN {s}.queues q ON q.name = $1`

// sqlClaimQueueLimited is a fetch from a queue whose limits are queue-wide:
// claim_limited (schemaV5) in one statement.
const sqlClaimQueueLimited = `SELECT ` + jobCols + ` FROM {s}.claim_limited($1, $2, $3, $4, $5, $6)`

// sqlClaimPartitioned is a fetch from a queue with partition limits:
// claim_partitioned (schemaV5) in one statement.
const sqlClaimPartitioned = `SELECT ` + jobCols + ` FROM {s}.claim_partitioned($1, $2, $3, $4, $5, $6)`

// sqlQueueNextAt is the next due time of a short fetch from a limited
// queue (queue_next_at, schemaV5).
const sqlQueueNextAt = `SELECT {s}.queue_next_at($1, $2)`

// JobFetch claims up to p.Limit available jobs of p.Queue. For a queue
// without limits it is one statement (claim_jobs: due jobs made available,
// then the claim, FOR UPDATE SKIP LOCKED so fetchers never wait on each
// other), and one more for a short fetch's next due time. A queue with
// limits locks its queue row, so the limits hold across processes: with
// queue-wide limits in one more statement (claim_limited), with partition
// limits in one more too (claim_partitioned), however many partitions have
// work, and one for a short fetch's next due time (queue_next_at).
func (s *Store) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	if err := store.ValidateLimit("JobFetchParams", p.Limit); err != nil {
		return nil, err
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var kinds []string
	if len(p.Kinds) > 0 {
		kinds = p.Kinds
	}
	lease := p.Now.Add(p.Lease)
	jobs, err := collectJobs(s.pool.Query(ctx, s.q.get(sqlClaim), p.Queue, p.Limit, p.Now, p.Worker, lease, kinds, s.channel))
	if err != nil {
		return nil, s.opErr("fetch", fmt.Errorf("claim jobs: %w", err))
	}
	res := &store.JobFetchResult{Jobs: jobs}
	if len(jobs) == p.Limit {
		return res, nil
	}
	var paused, limited, partitioned bool
	var next *time.Time
	if err := s.pool.QueryRow(ctx, s.q.get(sqlQueueState), p.Queue).Scan(&paused, &limited, &partitioned, &next); err != nil {
		return nil, s.opErr("fetch", err)
	}
	res.NextAt = utc(next)
	if limited && !paused && len(jobs) == 0 {
		if err := s.fetchFromLimited(ctx, p, kinds, lease, partitioned, res); err != nil {
			return nil, s.opErr("fetch", err)
		}
	}
	fetchplan.Sort(res.Jobs)
	return res, nil
}

// fetchFromLimited claims from a queue with limits into res, and sets its
// NextAt when it claims fewer than p.Limit.
func (s *Store) fetchFromLimited(ctx context.Context, p *store.JobFetchParams, kinds []string, lease time.Time, partitioned bool, res *store.JobFetchResult) error {
	claim := sqlClaimQueueLimited
	if partitioned {
		claim = sqlClaimPartitioned
	}
	err := s.retryConflicts(ctx, func() error {
		var err error
		res.Jobs, err = collectJobs(s.pool.Query(ctx, s.q.get(claim), p.Queue, p.Limit, p.Now, p.Worker, lease, kinds))
		return err
	})
	if err != nil {
		return fmt.Errorf("claim jobs: %w", err)
	}
	if len(res.Jobs) == p.Limit {
		res.NextAt = time.Time{}
		return nil
	}
	var next *time.Time
	if err := s.pool.QueryRow(ctx, s.q.get(sqlQueueNextAt), p.Queue, p.Now).Scan(&next); err != nil {
		return fmt.Errorf("next run time: %w", err)
	}
	res.NextAt = utc(next)
	return nil
}
