package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
)

// sqlPromoteDue makes a queue's due scheduled and retrying jobs available.
const sqlPromoteDue = `UPDATE {s}.jobs SET state = 'available' WHERE id = ANY(ARRAY(
		SELECT id FROM {s}.jobs WHERE queue = $1 AND state IN ('scheduled', 'retrying') AND run_at <= $2
		ORDER BY run_at LIMIT 1000 FOR UPDATE SKIP LOCKED))`

// sqlClaimSet is the SET clause of every claim. The token subquery runs
// once per statement, so the jobs of one claim share one new token.
const sqlClaimSet = `UPDATE {s}.jobs j SET state = 'running', attempt = j.attempt + 1, attempted_at = $3,
		attempted_by = $4, lease_until = $5, claim_token = (SELECT nextval('{s}.claim_token_seq'))`

// sqlClaim is a fetch from a queue without limits: claim_jobs (schemaV2)
// promotes due jobs and claims available ones in one statement.
const sqlClaim = `SELECT ` + jobCols + ` FROM {s}.claim_jobs($1, $2, $3, $4, $5, $6, $7)`

// sqlClaimLimited claims from a queue whose row the caller locked: the
// claim of claim_jobs, as a statement of the caller's transaction.
const sqlClaimLimited = sqlClaimSet + `
	WHERE j.id = ANY(ARRAY(
		SELECT id FROM {s}.jobs
		WHERE state = 'available' AND queue = $1 AND ($6::text[] IS NULL OR kind = ANY($6::text[]))
		ORDER BY priority, run_at, id
		LIMIT $2
		FOR UPDATE SKIP LOCKED))
	RETURNING ` + jobCols

// sqlClaimIDs claims the available jobs among IDs $1 of queue $2.
const sqlClaimIDs = sqlClaimSet + `
	WHERE j.id = ANY(ARRAY(
		SELECT id FROM {s}.jobs
		WHERE id = ANY($1::bigint[]) AND state = 'available' AND queue = $2 AND ($6::text[] IS NULL OR kind = ANY($6::text[]))
		FOR UPDATE SKIP LOCKED))
	RETURNING ` + jobCols

// sqlQueueState reads, after a short claim, a queue's pause and limits
// (false when it has no row), whether they include partition limits, and
// the earliest due time of its scheduled and retrying jobs, in one
// statement.
const sqlQueueState = `SELECT COALESCE(q.paused, false), COALESCE(q.limited, false),
		COALESCE(q.settings ? 'partition_max_running' OR q.settings ? 'partition_rate_limit', false),
		(SELECT min(run_at) FROM {s}.jobs WHERE queue = $1 AND state IN ('scheduled', 'retrying'))
	FROM (SELECT 1) x LEFT JOIN {s}.queues q ON q.name = $1`

// sqlClaimQueueLimited is a fetch from a queue whose limits are queue-wide:
// claim_limited (schemaV5) in one statement.
const sqlClaimQueueLimited = `SELECT ` + jobCols + ` FROM {s}.claim_limited($1, $2, $3, $4, $5, $6)`

// sqlQueueNextAt is the next due time of a short fetch from a limited
// queue (queue_next_at, schemaV5).
const sqlQueueNextAt = `SELECT {s}.queue_next_at($1, $2)`

// sqlLockQueue locks a queue's row and reads its state.
const sqlLockQueue = `SELECT paused, settings FROM {s}.queues WHERE name = $1 FOR UPDATE`

// sqlRunningCount counts a queue's running jobs.
const sqlRunningCount = `SELECT count(*) FROM {s}.jobs WHERE queue = $1 AND state = 'running'`

// sqlRunningPartitions counts a queue's running jobs per partition.
const sqlRunningPartitions = `SELECT partition_key, count(*) FROM {s}.jobs
	WHERE queue = $1 AND state = 'running' AND partition_key IS NOT NULL GROUP BY partition_key`

// sqlRatePrune deletes starts too old for any window a fetch may ask about.
const sqlRatePrune = `DELETE FROM {s}.rate_starts WHERE queue = $1 AND partition = $2 AND at <= $3`

// sqlRateCount counts the starts after $3 (recorded later ones included).
const sqlRateCount = `SELECT COALESCE(sum(n), 0)::bigint FROM {s}.rate_starts WHERE queue = $1 AND partition = $2 AND at > $3`

// sqlRateAdd records starts.
const sqlRateAdd = `INSERT INTO {s}.rate_starts (queue, partition, at, n) SELECT $1, p, $3, c FROM unnest($2::text[], $4::integer[]) AS u(p, c)`

// sqlAvailablePartitions lists the partitions of a queue that have
// available jobs, one index seek each (a skip scan), however long their
// backlogs.
const sqlAvailablePartitions = `WITH RECURSIVE p(k) AS (
		(SELECT partition_key FROM {s}.jobs WHERE queue = $1 AND state = 'available' AND partition_key IS NOT NULL
			ORDER BY partition_key LIMIT 1)
		UNION ALL
		SELECT (SELECT partition_key FROM {s}.jobs WHERE queue = $1 AND state = 'available' AND partition_key > p.k
			ORDER BY partition_key LIMIT 1)
		FROM p WHERE p.k IS NOT NULL
	)
	SELECT k FROM p WHERE k IS NOT NULL`

// sqlPartitionHeads returns the first $3 available jobs of one partition.
const sqlPartitionHeads = `SELECT id, priority, run_at FROM {s}.jobs
	WHERE queue = $1 AND state = 'available' AND partition_key = $2 AND ($4::text[] IS NULL OR kind = ANY($4::text[]))
	ORDER BY priority, run_at, id LIMIT $3`

// sqlUnkeyedHeads returns the first $2 available jobs without a partition.
const sqlUnkeyedHeads = `SELECT id, priority, run_at FROM {s}.jobs
	WHERE queue = $1 AND state = 'available' AND partition_key IS NULL AND ($3::text[] IS NULL OR kind = ANY($3::text[]))
	ORDER BY priority, run_at, id LIMIT $2`

// JobFetch claims up to p.Limit available jobs of p.Queue. For a queue
// without limits it is one statement (claim_jobs: due jobs made available,
// then the claim, FOR UPDATE SKIP LOCKED so fetchers never wait on each
// other), and one more for a short fetch's next due time. A queue with
// limits locks its queue row, so the limits hold across processes: with
// queue-wide limits in one more statement (claim_limited) and one for the
// next due time (queue_next_at), with partition limits in a transaction.
func (s *Store) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("pgstore: fetch: JobFetchParams.Limit must be at least 1, got %d", p.Limit)
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
	store.SortClaimOrder(res.Jobs)
	return res, nil
}

// fetchFromLimited claims from a queue with limits into res, and sets its
// NextAt when it claims fewer than p.Limit.
func (s *Store) fetchFromLimited(ctx context.Context, p *store.JobFetchParams, kinds []string, lease time.Time, partitioned bool, res *store.JobFetchResult) error {
	var err error
	if partitioned {
		err = s.inTx(ctx, func(tx pgx.Tx) error {
			var err error
			res.Jobs, err = s.fetchLimited(ctx, tx, p, kinds, lease)
			return err
		})
	} else {
		err = s.retryConflicts(ctx, func() error {
			var err error
			res.Jobs, err = collectJobs(s.pool.Query(ctx, s.q.get(sqlClaimQueueLimited), p.Queue, p.Limit, p.Now, p.Worker, lease, kinds))
			return err
		})
	}
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

// fetchLimited claims from a queue with limits, holding its row lock.
func (s *Store) fetchLimited(ctx context.Context, tx pgx.Tx, p *store.JobFetchParams, kinds []string, lease time.Time) ([]*store.JobRow, error) {
	var paused bool
	var raw []byte
	err := tx.QueryRow(ctx, s.q.get(sqlLockQueue), p.Queue).Scan(&paused, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock queue: %w", err)
	}
	if paused {
		return nil, nil
	}
	qs, err := decodeSettings(raw)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, s.q.get(sqlPromoteDue), p.Queue, p.Now); err != nil {
		return nil, fmt.Errorf("promote due jobs: %w", err)
	}
	var running, started int64
	if qs.MaxRunning > 0 {
		if err := tx.QueryRow(ctx, s.q.get(sqlRunningCount), p.Queue).Scan(&running); err != nil {
			return nil, fmt.Errorf("count running jobs: %w", err)
		}
	}
	if rate := qs.QueueRate(); rate.On() && qs.QueueRoom(int64(p.Limit), running, 0) > 0 {
		if started, err = s.rateWindow(ctx, tx, p.Queue, "", rate, p.Now); err != nil {
			return nil, err
		}
	}
	limit := qs.QueueRoom(int64(p.Limit), running, started)
	if limit == 0 {
		return nil, nil
	}
	var jobs []*store.JobRow
	if qs.Partitioned() {
		ids, err := s.partitionedHeads(ctx, tx, p, &qs, kinds, limit)
		if err != nil || len(ids) == 0 {
			return nil, err
		}
		jobs, err = collectJobs(tx.Query(ctx, s.q.get(sqlClaimIDs), ids, p.Queue, p.Now, p.Worker, lease, kinds))
		if err != nil {
			return nil, fmt.Errorf("claim jobs: %w", err)
		}
	} else {
		jobs, err = collectJobs(tx.Query(ctx, s.q.get(sqlClaimLimited), p.Queue, limit, p.Now, p.Worker, lease, kinds))
		if err != nil {
			return nil, fmt.Errorf("claim jobs: %w", err)
		}
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	var parts []string
	var counts []int32
	if qs.RateLimit > 0 {
		parts, counts = append(parts, ""), append(counts, int32(len(jobs)))
	}
	if qs.PartitionRateLimit > 0 {
		per := map[string]int32{}
		for _, j := range jobs {
			if j.PartitionKey != "" {
				per[j.PartitionKey]++
			}
		}
		for k, n := range per {
			parts, counts = append(parts, k), append(counts, n)
		}
	}
	if len(parts) > 0 {
		if _, err := tx.Exec(ctx, s.q.get(sqlRateAdd), p.Queue, parts, p.Now, counts); err != nil {
			return nil, fmt.Errorf("record starts: %w", err)
		}
	}
	return jobs, nil
}

// rateWindow counts the starts of a queue's partition ("" for the queue
// itself) in w's window ending at now, after deleting those w lets go (see
// store.RateWindow).
func (s *Store) rateWindow(ctx context.Context, tx pgx.Tx, queue, partition string, w store.RateWindow, now time.Time) (int64, error) {
	if _, err := tx.Exec(ctx, s.q.get(sqlRatePrune), queue, partition, w.ForgetBefore(now)); err != nil {
		return 0, fmt.Errorf("prune rate window: %w", err)
	}
	var n int64
	if err := tx.QueryRow(ctx, s.q.get(sqlRateCount), queue, partition, w.From(now)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count rate window: %w", err)
	}
	return n, nil
}

// partitionedHeads picks up to limit jobs of a queue with partition
// limits: from each partition with room at most its room of head jobs (an
// index range read of that many rows, however long its backlog), plus the
// head jobs without a partition key, in claim order.
func (s *Store) partitionedHeads(ctx context.Context, tx pgx.Tx, p *store.JobFetchParams, qs *store.QueueSettings, kinds []string, limit int64) ([]int64, error) {
	running := map[string]int64{}
	if qs.PartitionMaxRunning > 0 {
		rs, err := tx.Query(ctx, s.q.get(sqlRunningPartitions), p.Queue)
		if err != nil {
			return nil, fmt.Errorf("count running jobs per partition: %w", err)
		}
		for rs.Next() {
			var k string
			var n int64
			if err := rs.Scan(&k, &n); err != nil {
				rs.Close()
				return nil, fmt.Errorf("count running jobs per partition: %w", err)
			}
			running[k] = n
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("count running jobs per partition: %w", err)
		}
	}
	rs, err := tx.Query(ctx, s.q.get(sqlAvailablePartitions), p.Queue)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	keys, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	var heads []store.Head
	for _, k := range keys {
		var started int64
		if rate := qs.PartitionRate(); rate.On() && qs.PartitionRoom(limit, running[k], 0) > 0 {
			if started, err = s.rateWindow(ctx, tx, p.Queue, k, rate, p.Now); err != nil {
				return nil, err
			}
		}
		room := qs.PartitionRoom(limit, running[k], started)
		if room == 0 {
			continue
		}
		if heads, err = scanHeads(tx.Query(ctx, s.q.get(sqlPartitionHeads), p.Queue, k, room, kinds))(heads); err != nil {
			return nil, err
		}
	}
	if heads, err = scanHeads(tx.Query(ctx, s.q.get(sqlUnkeyedHeads), p.Queue, limit, kinds))(heads); err != nil {
		return nil, err
	}
	return store.MergeHeads(heads, limit), nil
}

// scanHeads returns a function appending the rows of a heads query to
// heads.
func scanHeads(rs pgx.Rows, err error) func([]store.Head) ([]store.Head, error) {
	return func(heads []store.Head) ([]store.Head, error) {
		if err != nil {
			return nil, fmt.Errorf("read partition heads: %w", err)
		}
		defer rs.Close()
		for rs.Next() {
			var h store.Head
			var priority int16
			if err := rs.Scan(&h.ID, &priority, &h.RunAt); err != nil {
				return nil, fmt.Errorf("read partition heads: %w", err)
			}
			h.Priority = int(priority)
			heads = append(heads, h)
		}
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("read partition heads: %w", err)
		}
		return heads, nil
	}
}
