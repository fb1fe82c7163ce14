package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
)

// copyMinJobs is the smallest batch inserted with COPY. COPY costs more
// round trips than the one-statement insert (IDs and depth first, then the
// transaction), and pays for them from about this size on.
const copyMinJobs = 64

// sqlCopyPrepare checks the batch's queues for a MaxDepth and takes $1 IDs.
const sqlCopyPrepare = `SELECT EXISTS (SELECT 1 FROM {s}.queues WHERE name = ANY($2::text[]) AND max_depth > 0),
	ARRAY(SELECT nextval('{s}.job_id_seq') FROM generate_series(1, $1::integer))`

// copyColumns are the columns COPY fills; the others take their defaults.
var copyColumns = []string{"id", "kind", "queue", "args", "state", "priority", "max_attempts", "run_at", "created_at",
	"tags", "meta", "timeout", "partition_key"}

// sqlCountCopied appends the jobs a COPY inserted to the count deltas and
// notifies queues $5 on channel $4 (delivered at commit, so never for jobs
// that were not committed).
const sqlCountCopied = `WITH counted AS (
		INSERT INTO {s}.job_count_deltas (queue, state, n)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
	)
	SELECT count(pg_notify($4, q)) FROM unnest($5::text[]) AS q`

// enqueueCopy inserts a large batch without unique keys or dependencies
// with COPY, counts it and notifies its queues, in one transaction of three
// round trips: BEGIN with the MaxDepth check and the IDs, then the COPY,
// then the counts and notifications with COMMIT. It returns false, having
// inserted nothing, when a queue of the batch has a MaxDepth.
func (s *Store) enqueueCopy(ctx context.Context, b *batch) (bool, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("acquire a connection: %w", err)
	}
	// A connection released mid-transaction (after an error) is closed by
	// the pool, never handed out again.
	defer conn.Release()
	return s.copyBatch(ctx, conn.Conn(), b)
}

// copyBatch is enqueueCopy on one connection.
func (s *Store) copyBatch(ctx context.Context, conn *pgx.Conn, b *batch) (bool, error) {
	n := len(b.p.Jobs)
	var deep bool
	var ids []int64
	begin := &pgx.Batch{}
	begin.Queue("BEGIN")
	begin.Queue(s.q.get(sqlCopyPrepare), n, b.queues).QueryRow(func(row pgx.Row) error { return row.Scan(&deep, &ids) })
	if err := conn.SendBatch(ctx, begin).Close(); err != nil {
		return false, fmt.Errorf("reserve job IDs: %w", err)
	}
	if deep {
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			return false, fmt.Errorf("reserve job IDs: %w", err)
		}
		return false, nil
	}
	slices.Sort(ids)
	rows := make([][]any, n)
	type key struct{ queue, state string }
	per := map[key]int64{}
	for i, j := range b.p.Jobs {
		b.results[i].ID = ids[i]
		var tags any
		if b.tags[i] != nil {
			tags = *b.tags[i]
		}
		state := b.results[i].State
		rows[i] = []any{ids[i], j.Kind, j.Queue, j.Args, string(state), int16(j.Priority), int32(j.MaxAttempts),
			b.runAt[i], b.now[i], tags, j.Meta, int64(j.Timeout), nullStr(j.PartitionKey)}
		per[key{j.Queue, string(state)}]++
	}
	var cq, cs, wake []string
	var cn []int64
	for k, n := range per {
		cq, cs, cn = append(cq, k.queue), append(cs, k.state), append(cn, n)
		if wakesWorkers(store.JobState(k.state)) {
			wake = append(wake, k.queue)
		}
	}
	slices.Sort(wake)
	wake = slices.Compact(wake)
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{s.schema, "jobs"}, copyColumns, pgx.CopyFromRows(rows)); err != nil {
		return false, fmt.Errorf("copy jobs: %w", err)
	}
	commit := &pgx.Batch{}
	commit.Queue(s.q.get(sqlCountCopied), cq, cs, cn, s.channel, wake)
	commit.Queue("COMMIT")
	if err := conn.SendBatch(ctx, commit).Close(); err != nil {
		return false, fmt.Errorf("count copied jobs and commit: %w", err)
	}
	return true, nil
}
