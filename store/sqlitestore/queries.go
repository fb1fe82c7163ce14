package sqlitestore

import (
	"strings"
)

// The SQL of the hot path, as named constants. States that select a partial
// index are written literally (see schemaV1). Lists of IDs arrive as one JSON
// array bound as text and read with json_each, so one statement serves any
// batch size.
//
// A LIMIT is written "?n + 0", never "?n": SQLite plans with the value of a
// bare LIMIT parameter and so re-prepares the statement every time it is
// bound again (that re-parse was 10% of the writer's CPU in the drain
// benchmark); an expression is planned once.
const (
	sqlSavepoint  = `SAVEPOINT req`
	sqlRelease    = `RELEASE req`
	sqlRollbackTo = `ROLLBACK TO req`

	sqlSyncFull   = `PRAGMA synchronous = FULL`
	sqlSyncNormal = `PRAGMA synchronous = NORMAL`

	sqlSequences   = `SELECT (SELECT value FROM sortie_meta WHERE key = 'next_job_id'), (SELECT value FROM sortie_meta WHERE key = 'next_claim_token')`
	sqlSetSequence = `UPDATE sortie_meta SET value = ?2 WHERE key = ?1`

	sqlCountAdd = `INSERT INTO job_counts (queue, state, n) VALUES (?1, ?2, ?3)
		ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n`

	sqlUniqueHolder = `SELECT id, state FROM jobs WHERE unique_key = ?1`

	// sqlDueCount counts the scheduled and retrying jobs of a queue that are
	// due; it is one index probe when none is.
	sqlDueCount = `SELECT state, count(*) FROM jobs
		WHERE queue = ?1 AND state IN ('scheduled', 'retrying') AND run_at <= ?2 GROUP BY state`
	sqlPromoteDue = `UPDATE jobs SET state = 'available'
		WHERE queue = ?1 AND state IN ('scheduled', 'retrying') AND run_at <= ?2`

	sqlClaim = `UPDATE jobs SET state = 'running', attempt = attempt + 1, attempted_at = ?3,
			attempted_by = NULLIF(?4, ''), lease_until = ?5, claim_token = ?6
		WHERE id IN (SELECT id FROM jobs WHERE state = 'available' AND queue = ?1
			ORDER BY priority, run_at, id LIMIT ?2 + 0)
		RETURNING ` + jobColumns
	sqlClaimKinds = `UPDATE jobs SET state = 'running', attempt = attempt + 1, attempted_at = ?3,
			attempted_by = NULLIF(?4, ''), lease_until = ?5, claim_token = ?6
		WHERE id IN (SELECT id FROM jobs WHERE state = 'available' AND queue = ?1
			AND kind IN (SELECT value FROM json_each(?7))
			ORDER BY priority, run_at, id LIMIT ?2 + 0)
		RETURNING ` + jobColumns

	// sqlRunningOf reads the fencing facts of the running jobs among a list of IDs.
	sqlRunningOf = `SELECT id, queue, claim_token, attempt, max_attempts FROM jobs
		WHERE id IN (SELECT value FROM json_each(?1)) AND state = 'running'`

	// sqlCompleteMany moves running jobs to finished_jobs as completed.
	sqlCompleteMany = `INSERT INTO finished_jobs (` + jobColumns + `)
		SELECT id, kind, queue, args, 'completed', priority, attempt, max_attempts, run_at, created_at,
			attempted_at, attempted_by, ?2, NULL, claim_token, unique_key, errors, tags, meta, timeout
		FROM jobs WHERE id IN (SELECT value FROM json_each(?1))`
	sqlDeleteMany = `DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?1))`

	// sqlFinishOne moves one job to finished_jobs in state ?2 with
	// FinalizedAt ?3, appending the JSON error ?4 when not NULL.
	sqlFinishOne = `INSERT INTO finished_jobs (` + jobColumns + `)
		SELECT id, kind, queue, args, ?2, priority, attempt, max_attempts, run_at, created_at,
			attempted_at, attempted_by, ?3, NULL, claim_token, unique_key,
			CASE WHEN ?4 IS NULL THEN errors ELSE json_insert(coalesce(errors, '[]'), '$[#]', json(?4)) END,
			tags, meta, timeout
		FROM jobs WHERE id = ?1`
	sqlDeleteOne = `DELETE FROM jobs WHERE id = ?1`

	// sqlMoveOne changes a job to the pending state ?2 with RunAt ?3 (kept
	// when NULL), adds ?4 to Attempt, clears the lease and appends the JSON
	// error ?5 when not NULL.
	sqlMoveOne = `UPDATE jobs SET state = ?2, run_at = coalesce(?3, run_at), attempt = attempt + ?4,
			lease_until = NULL,
			errors = CASE WHEN ?5 IS NULL THEN errors ELSE json_insert(coalesce(errors, '[]'), '$[#]', json(?5)) END
		WHERE id = ?1`

	sqlLeaseExtend = `UPDATE jobs SET lease_until = ?3 WHERE id = ?1 AND claim_token = ?2 AND state = 'running'`

	sqlExpired = `SELECT id, queue, attempt, max_attempts FROM jobs
		WHERE state = 'running' AND lease_until < ?1 ORDER BY lease_until LIMIT ?2 + 0`

	sqlGetPending  = `SELECT ` + jobColumns + ` FROM jobs WHERE id = ?1`
	sqlGetFinished = `SELECT ` + jobColumns + ` FROM finished_jobs WHERE id = ?1`
	sqlGetAny      = `SELECT ` + jobColumns + ` FROM jobs WHERE id = ?1
		UNION ALL SELECT ` + jobColumns + ` FROM finished_jobs WHERE id = ?1`

	sqlRetryPending = `UPDATE jobs SET state = 'available', run_at = ?2, finalized_at = NULL,
			max_attempts = CASE WHEN attempt >= max_attempts THEN attempt + 1 ELSE max_attempts END
		WHERE id = ?1`
	sqlRetryFinished = `INSERT INTO jobs (` + jobColumns + `)
		SELECT id, kind, queue, args, 'available', priority, attempt,
			CASE WHEN attempt >= max_attempts THEN attempt + 1 ELSE max_attempts END,
			?2, created_at, attempted_at, attempted_by, NULL, NULL, claim_token, unique_key, errors, tags, meta, timeout
		FROM finished_jobs WHERE id = ?1`
	sqlDeleteFinished = `DELETE FROM finished_jobs WHERE id = ?1`

	sqlPruneCompleted = `DELETE FROM finished_jobs WHERE id IN (SELECT id FROM finished_jobs
		WHERE state = 'completed' AND finalized_at < ?1 LIMIT ?2 + 0) RETURNING queue`
	sqlPruneCancelled = `DELETE FROM finished_jobs WHERE id IN (SELECT id FROM finished_jobs
		WHERE state = 'cancelled' AND finalized_at < ?1 LIMIT ?2 + 0) RETURNING queue`
	sqlPruneDead = `DELETE FROM finished_jobs WHERE id IN (SELECT id FROM finished_jobs
		WHERE state = 'dead' AND finalized_at < ?1 LIMIT ?2 + 0) RETURNING queue`

	sqlCounts      = `SELECT queue, state, n FROM job_counts WHERE n <> 0`
	sqlCountsQueue = `SELECT queue, state, n FROM job_counts WHERE queue = ?1 AND n <> 0`
	sqlNextRunAt   = `SELECT min(run_at) FROM jobs WHERE queue = ?1 AND state IN ('scheduled', 'retrying')`
)

// insertColumns are the columns an enqueue binds, per row.
const (
	insertColumns = `id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
	claim_token, unique_key, tags, meta, timeout`
	insertRow        = `(?, ?, ?, ?, ?, ?, 0, ?, ?, ?, 0, ?, ?, ?, ?)`
	insertRowParams  = 13
	insertChunkLarge = 128
	insertChunkSmall = 16
)

// insertChunks are the row counts of the prepared multi-row inserts; a batch
// is cut into chunks of these sizes, largest first.
var insertChunks = [...]int{insertChunkLarge, insertChunkSmall, 1}

// insertSQL returns the INSERT for n rows. It runs once per chunk size, when
// the writer prepares its statements, never per enqueue.
func insertSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO jobs (` + insertColumns + `) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(insertRow)
	}
	return b.String()
}
