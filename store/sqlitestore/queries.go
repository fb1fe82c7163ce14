package sqlitestore

import (
	"fmt"
	"strings"

	"github.com/sortiehq/sortie/store"
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

	sqlSequences = `SELECT (SELECT value FROM sortie_meta WHERE key = 'next_job_id'),
		(SELECT value FROM sortie_meta WHERE key = 'next_claim_token'),
		(SELECT value FROM sortie_meta WHERE key = 'queues_version'),
		EXISTS (SELECT 1 FROM job_deps),
		(SELECT value FROM sortie_meta WHERE key = 'spawned')`
	sqlSetSequence = `UPDATE sortie_meta SET value = ?2 WHERE key = ?1`

	// The wake counter (see waker): incremented by every transaction that
	// signals queue watchers, read by other processes' wakers. The row is
	// made by the first increment.
	sqlWakeBump = `INSERT INTO sortie_meta (key, value) VALUES ('wake_seq', 1)
		ON CONFLICT (key) DO UPDATE SET value = value + 1 RETURNING value`
	sqlWakeRead = `SELECT value FROM sortie_meta WHERE key = 'wake_seq'`

	sqlCountAdd = `INSERT INTO job_counts (queue, state, n) VALUES (?1, ?2, ?3)
		ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n`
	sqlHistoryAdd = `INSERT INTO job_history (minute, queue, outcome, n) VALUES (?1, ?2, ?3, ?4)
		ON CONFLICT (minute, queue, outcome) DO UPDATE SET n = n + excluded.n`

	sqlUniqueHolder = `SELECT id, state FROM jobs WHERE unique_key = ?1`

	// sqlDueCount counts the scheduled and retrying jobs of a queue that are
	// due; it is one index probe when none is.
	sqlDueCount = `SELECT state, count(*) FROM jobs
		WHERE queue = ?1 AND state IN ('scheduled', 'retrying') AND run_at <= ?2 GROUP BY state`
	sqlPromoteDue = `UPDATE jobs SET state = 'available'
		WHERE queue = ?1 AND state IN ('scheduled', 'retrying') AND run_at <= ?2`

	// Every claim stamps attempted_at with the fetch's Now (?3, ?2 for
	// sqlClaimIDs), or the job's run_at or created_at when later
	// (fetchplan.AttemptedAt).
	//
	// sqlClaim claims the first ?2 available jobs of queue ?1 when none of
	// its available jobs has a partition key (the partial indexes need their
	// predicates written literally): one range read of jobs_fetch and one
	// probe of jobs_fetch_keyed. With keyed jobs available it claims
	// nothing, and the fetch runs sqlClaimMerged.
	sqlClaim = `UPDATE jobs SET state = 'running', attempt = attempt + 1, attempted_at = max(?3, run_at, created_at),
			attempted_by = NULLIF(?4, ''), lease_until = ?5, claim_token = ?6, waits_for = NULL
		WHERE id IN (SELECT id FROM jobs WHERE state = 'available' AND partition_key IS NULL AND queue = ?1
			AND NOT EXISTS (SELECT 1 FROM jobs WHERE state = 'available' AND partition_key IS NOT NULL AND queue = ?1)
			ORDER BY priority, run_at, id LIMIT ?2 + 0)
		RETURNING ` + pendingColumns
	sqlClaimKinds = `UPDATE jobs SET state = 'running', attempt = attempt + 1, attempted_at = max(?3, run_at, created_at),
			attempted_by = NULLIF(?4, ''), lease_until = ?5, claim_token = ?6, waits_for = NULL
		WHERE id IN (SELECT id FROM jobs WHERE state = 'available' AND partition_key IS NULL AND queue = ?1
			AND NOT EXISTS (SELECT 1 FROM jobs WHERE state = 'available' AND partition_key IS NOT NULL AND queue = ?1)
			AND kind IN (SELECT value FROM json_each(?7))
			ORDER BY priority, run_at, id LIMIT ?2 + 0)
		RETURNING ` + pendingColumns
	// sqlClaimMerged claims the first ?2 available jobs of queue ?1, with or
	// without a partition key: the merge of the first ?2 of jobs_fetch and
	// the first ?2 of jobs_fetch_keyed, each a range read of at most ?2 rows.
	sqlClaimMerged = `UPDATE jobs SET state = 'running', attempt = attempt + 1, attempted_at = max(?3, run_at, created_at),
			attempted_by = NULLIF(?4, ''), lease_until = ?5, claim_token = ?6, waits_for = NULL
		WHERE id IN (SELECT id FROM (
				SELECT * FROM (SELECT id, priority, run_at FROM jobs
					WHERE state = 'available' AND partition_key IS NULL AND queue = ?1
					ORDER BY priority, run_at, id LIMIT ?2 + 0)
				UNION ALL
				SELECT * FROM (SELECT id, priority, run_at FROM jobs
					WHERE state = 'available' AND partition_key IS NOT NULL AND queue = ?1
					ORDER BY priority, run_at, id LIMIT ?2 + 0))
			ORDER BY priority, run_at, id LIMIT ?2 + 0)
		RETURNING ` + pendingColumns
	sqlClaimMergedKinds = `UPDATE jobs SET state = 'running', attempt = attempt + 1, attempted_at = max(?3, run_at, created_at),
			attempted_by = NULLIF(?4, ''), lease_until = ?5, claim_token = ?6, waits_for = NULL
		WHERE id IN (SELECT id FROM (
				SELECT * FROM (SELECT id, priority, run_at FROM jobs
					WHERE state = 'available' AND partition_key IS NULL AND queue = ?1
						AND kind IN (SELECT value FROM json_each(?7))
					ORDER BY priority, run_at, id LIMIT ?2 + 0)
				UNION ALL
				SELECT * FROM (SELECT id, priority, run_at FROM jobs
					WHERE state = 'available' AND partition_key IS NOT NULL AND queue = ?1
						AND kind IN (SELECT value FROM json_each(?7))
					ORDER BY priority, run_at, id LIMIT ?2 + 0))
			ORDER BY priority, run_at, id LIMIT ?2 + 0)
		RETURNING ` + pendingColumns

	// sqlRunningOf reads the fencing facts of the running jobs among a list of IDs.
	sqlRunningOf = `SELECT id, queue, claim_token, attempt, max_attempts FROM jobs
		WHERE id IN (SELECT value FROM json_each(?1)) AND state = 'running'`

	// sqlCompleteMany moves running jobs to finished_jobs as completed.
	sqlCompleteMany = `INSERT INTO finished_jobs (` + jobColumns + `)
		SELECT id, kind, queue, args, 'completed', priority, attempt, max_attempts, run_at, created_at,
			attempted_at, attempted_by, ?2, NULL, claim_token, unique_key, errors, tags, meta, timeout,
			partition_key, result, progress, 0, workflow_id, depends_on, ignore_dep_failure,
			parent_id, spawn_step, cancel_with_parent, NULL
		FROM jobs WHERE id IN (SELECT value FROM json_each(?1))`
	sqlDeleteMany = `DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?1))`

	// sqlFinishOne moves one job to finished_jobs in state ?2 with
	// FinalizedAt ?3, appending the JSON error ?4 when not NULL.
	sqlFinishOne = `INSERT INTO finished_jobs (` + jobColumns + `)
		SELECT id, kind, queue, args, ?2, priority, attempt, max_attempts, run_at, created_at,
			attempted_at, attempted_by, ?3, NULL, claim_token, unique_key,
			CASE WHEN ?4 IS NULL THEN errors ELSE json_insert(coalesce(errors, '[]'), '$[#]', json(?4)) END,
			tags, meta, timeout, partition_key, result, progress, 0, workflow_id, depends_on, ignore_dep_failure,
			parent_id, spawn_step, cancel_with_parent, NULL
		FROM jobs WHERE id = ?1`
	sqlDeleteOne = `DELETE FROM jobs WHERE id = ?1`

	// sqlMoveOne changes a job to the pending state ?2 with RunAt ?3 (kept
	// when NULL), adds ?4 to Attempt, clears the lease and appends the JSON
	// error ?5 when not NULL.
	sqlMoveOne = `UPDATE jobs SET state = ?2, run_at = coalesce(?3, run_at), attempt = attempt + ?4,
			lease_until = NULL, cancel_requested = 0,
			errors = CASE WHEN ?5 IS NULL THEN errors ELSE json_insert(coalesce(errors, '[]'), '$[#]', json(?5)) END
		WHERE id = ?1`

	sqlLeaseExtend = `UPDATE jobs SET lease_until = ?3, progress = coalesce(?4, progress)
		WHERE id = ?1 AND claim_token = ?2 AND state = 'running' RETURNING cancel_requested`
	sqlSetResult     = `UPDATE jobs SET result = ?2 WHERE id = ?1`
	sqlCancelRequest = `UPDATE jobs SET cancel_requested = 1 WHERE id = ?1 AND state = 'running'`

	sqlExpired = `SELECT id, queue, attempt, max_attempts, cancel_requested FROM jobs
		WHERE state = 'running' AND lease_until < ?1 ORDER BY lease_until LIMIT ?2 + 0`

	// sqlActTargets reads what the operators' actions look at of the jobs
	// of the JSON array ?1, from either table (see actTargets).
	sqlActTargets = `SELECT id, state, queue, unique_key, depends_on, ignore_dep_failure FROM jobs
			WHERE id IN (SELECT value FROM json_each(?1))
		UNION ALL SELECT id, state, queue, unique_key, depends_on, ignore_dep_failure FROM finished_jobs
			WHERE id IN (SELECT value FROM json_each(?1))`
	// sqlDependedOn and sqlCancelledByAny read which jobs of the JSON array
	// ?1 have waiting dependents, and which cancelled dependents (see
	// standAlone).
	sqlDependedOn     = `SELECT DISTINCT dep_id FROM job_deps WHERE dep_id IN (SELECT value FROM json_each(?1))`
	sqlCancelledByAny = `SELECT DISTINCT cancelled_by FROM finished_jobs
		WHERE cancelled_by IN (SELECT value FROM json_each(?1))`

	sqlGetPending  = `SELECT ` + pendingColumns + ` FROM jobs WHERE id = ?1`
	sqlGetFinished = `SELECT ` + finishedColumns + ` FROM finished_jobs WHERE id = ?1`
	sqlGetAny      = `SELECT ` + pendingColumns + ` FROM jobs WHERE id = ?1
		UNION ALL SELECT ` + finishedColumns + ` FROM finished_jobs WHERE id = ?1`

	// sqlRetryPending and sqlRetryFinished make a job available or waiting
	// (?3) at ?2, with one more attempt when it used them all. Prepared
	// for a JSON array of IDs (forIDs), as are sqlDeleteFinished,
	// sqlCancelRequest and sqlFinishOne for the actions.
	sqlRetryPending = `UPDATE jobs SET state = ?3, run_at = ?2, finalized_at = NULL, waits_for = NULL,
			max_attempts = CASE WHEN attempt >= max_attempts THEN attempt + 1 ELSE max_attempts END
		WHERE id = ?1`
	sqlRetryFinished = `INSERT INTO jobs (` + jobColumns + `)
		SELECT id, kind, queue, args, ?3, priority, attempt,
			CASE WHEN attempt >= max_attempts THEN attempt + 1 ELSE max_attempts END,
			?2, created_at, attempted_at, attempted_by, NULL, NULL, claim_token, unique_key, errors, tags, meta, timeout,
			partition_key, result, progress, 0, workflow_id, depends_on, ignore_dep_failure,
			parent_id, spawn_step, cancel_with_parent, NULL
		FROM finished_jobs WHERE id = ?1`
	sqlDeleteFinished = `DELETE FROM finished_jobs WHERE id = ?1`

	sqlPruneCompleted = `DELETE FROM finished_jobs WHERE id IN (SELECT id FROM finished_jobs f
		WHERE state = 'completed' AND finalized_at < ?1 AND ` + parentGone + ` LIMIT ?2 + 0) RETURNING queue, id`
	sqlPruneCancelled = `DELETE FROM finished_jobs WHERE id IN (SELECT id FROM finished_jobs f
		WHERE state = 'cancelled' AND finalized_at < ?1 AND ` + parentGone + ` LIMIT ?2 + 0) RETURNING queue, id`
	sqlPruneDead = `DELETE FROM finished_jobs WHERE id IN (SELECT id FROM finished_jobs f
		WHERE state = 'dead' AND finalized_at < ?1 AND ` + parentGone + ` LIMIT ?2 + 0) RETURNING queue, id`

	// parentGone holds for a finished job (f) that is no spawned child, or
	// whose parent is no longer stored: a child of a stored parent is kept
	// for its parent's Await.
	parentGone = `(f.parent_id IS NULL OR (NOT EXISTS (SELECT 1 FROM jobs p WHERE p.id = f.parent_id)
		AND NOT EXISTS (SELECT 1 FROM finished_jobs p WHERE p.id = f.parent_id)))`

	sqlCounts      = `SELECT queue, state, n FROM job_counts WHERE n <> 0`
	sqlCountsQueue = `SELECT queue, state, n FROM job_counts WHERE queue = ?1 AND n <> 0`
	sqlNextRunAt   = `SELECT min(run_at) FROM jobs WHERE queue = ?1 AND state IN ('scheduled', 'retrying')`
)

// The SQL of the queue features. None of it runs for a queue without
// settings, except the dependents probe of JobFinish (one index probe per
// batch of completions).
const (
	// sqlClaimIDs claims the jobs whose IDs are the JSON array ?1.
	sqlClaimIDs = `UPDATE jobs SET state = 'running', attempt = attempt + 1, attempted_at = max(?2, run_at, created_at),
			attempted_by = NULLIF(?3, ''), lease_until = ?4, claim_token = ?5, waits_for = NULL
		WHERE id IN (SELECT value FROM json_each(?1)) AND state = 'available'
		RETURNING ` + pendingColumns

	// sqlCountOf reads one counter.
	sqlCountOf = `SELECT coalesce((SELECT n FROM job_counts WHERE queue = ?1 AND state = ?2), 0)`
	// sqlQueuedCount reads the queued (waiting, scheduled, available,
	// retrying) counters of a queue.
	sqlQueuedCount = `SELECT coalesce(sum(n), 0) FROM job_counts
		WHERE queue = ?1 AND state IN ('waiting', 'scheduled', 'available', 'retrying')`
	sqlOldestQueued = `SELECT id, state FROM jobs
		WHERE queue = ?1 AND state IN ('waiting', 'scheduled', 'available', 'retrying') ORDER BY id LIMIT ?2 + 0`

	// sqlRunningPartitions counts the running jobs of each partition of a queue.
	sqlRunningPartitions = `SELECT partition_key, count(*) FROM jobs
		WHERE state = 'running' AND queue = ?1 AND partition_key IS NOT NULL GROUP BY partition_key`
	// sqlAvailablePartitions lists the partitions of a queue that have
	// available jobs, one index seek per partition (a skip scan), however
	// long each partition's backlog.
	sqlAvailablePartitions = `WITH RECURSIVE p(k) AS (
			SELECT (SELECT min(partition_key) FROM jobs
				WHERE state = 'available' AND queue = ?1 AND partition_key IS NOT NULL)
			UNION ALL
			SELECT (SELECT min(partition_key) FROM jobs
				WHERE state = 'available' AND queue = ?1 AND partition_key IS NOT NULL AND partition_key > p.k)
			FROM p WHERE p.k IS NOT NULL)
		SELECT k FROM p WHERE k IS NOT NULL`
	// sqlPartitionHeads reads the first ?3 available jobs of partition ?2.
	sqlPartitionHeads = `SELECT id, priority, run_at FROM jobs
		WHERE state = 'available' AND queue = ?1 AND partition_key IS NOT NULL AND partition_key = ?2
		ORDER BY priority, run_at, id LIMIT ?3 + 0`
	sqlPartitionHeadsKinds = `SELECT id, priority, run_at FROM jobs
		WHERE state = 'available' AND queue = ?1 AND partition_key IS NOT NULL AND partition_key = ?2
			AND kind IN (SELECT value FROM json_each(?4))
		ORDER BY priority, run_at, id LIMIT ?3 + 0`
	// sqlUnpartitionedHeads reads the first ?2 available jobs without a
	// partition key.
	sqlUnpartitionedHeads = `SELECT id, priority, run_at FROM jobs
		WHERE state = 'available' AND queue = ?1 AND partition_key IS NULL
		ORDER BY priority, run_at, id LIMIT ?2 + 0`
	sqlUnpartitionedHeadsKinds = `SELECT id, priority, run_at FROM jobs
		WHERE state = 'available' AND queue = ?1 AND partition_key IS NULL
			AND kind IN (SELECT value FROM json_each(?3))
		ORDER BY priority, run_at, id LIMIT ?2 + 0`

	// Sliding windows: starts of queue ?1, partition ?2 ('' for the queue).
	// Starts after the window's end count too: another process may have
	// committed them with a later clock reading, and they are real starts.
	sqlRateCount = `SELECT count(*) FROM rate_starts WHERE queue = ?1 AND partition = ?2 AND at > ?3`
	sqlRatePrune = `DELETE FROM rate_starts WHERE queue = ?1 AND partition = ?2 AND at <= ?3`
	sqlRateAdd   = `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?4)
		INSERT INTO rate_starts (queue, partition, at) SELECT ?1, ?2, ?3 FROM c`
	// sqlRateGiveBack forgets one start of queue ?1, partition ?2 recorded
	// at or after ?3: the earliest, which is the start of the claim that
	// stamped a job AttemptedAt ?3 (recordStarts records a claim's starts
	// at its latest AttemptedAt), or one recorded later, which leaves the
	// window counting no fewer starts than the truth at any time.
	sqlRateGiveBack = `DELETE FROM rate_starts WHERE rowid = (
		SELECT rowid FROM rate_starts WHERE queue = ?1 AND partition = ?2 AND at >= ?3 ORDER BY at LIMIT 1)`
	// sqlStartOf returns a job's AttemptedAt and PartitionKey ('' for none).
	sqlStartOf = `SELECT attempted_at, coalesce(partition_key, '') FROM jobs WHERE id = ?1`
	// sqlRateStarts returns the starts in the window, oldest first, one row
	// per start.
	sqlRateStarts = `SELECT at, 1 FROM rate_starts WHERE queue = ?1 AND partition = ?2 AND at > ?3 ORDER BY at`
	// sqlHasAvailable reports whether a queue has available jobs or due
	// scheduled or retrying ones.
	sqlHasAvailable = `SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'available' AND partition_key IS NULL AND queue = ?1)
		OR EXISTS (SELECT 1 FROM jobs WHERE state = 'available' AND partition_key IS NOT NULL AND queue = ?1)
		OR EXISTS (SELECT 1 FROM jobs WHERE queue = ?1 AND state IN ('scheduled', 'retrying') AND run_at <= ?2)`

	// Dependencies.
	sqlJobState     = `SELECT state FROM jobs WHERE id = ?1 UNION ALL SELECT state FROM finished_jobs WHERE id = ?1`
	sqlDepAdd       = `INSERT OR IGNORE INTO job_deps (dep_id, job_id) VALUES (?1, ?2)`
	sqlDependentsOf = `SELECT d.dep_id, d.job_id, j.queue, j.ignore_dep_failure, j.attempt
		FROM job_deps d JOIN jobs j ON j.id = d.job_id
		WHERE d.dep_id IN (SELECT value FROM json_each(?1)) AND j.state = 'waiting'`
	sqlDepsDeleteDeps = `DELETE FROM job_deps WHERE dep_id IN (SELECT value FROM json_each(?1))`
	sqlDepsDeleteJob  = `DELETE FROM job_deps WHERE job_id = ?1`
	sqlDepsLeft       = `SELECT EXISTS (SELECT 1 FROM job_deps WHERE job_id = ?1)`
	sqlMakeReady      = `UPDATE jobs SET state = CASE WHEN run_at <= ?2 THEN 'available' ELSE 'scheduled' END
		WHERE id = ?1 AND state = 'waiting' RETURNING state`

	// Which dependency cancelled a job (see schemaV4), and the revival of
	// the jobs a retried job's ending cancelled.
	sqlMarkCancelledBy  = `UPDATE finished_jobs SET cancelled_by = ?2 WHERE id = ?1`
	sqlAnyCancelledBy   = `SELECT EXISTS (SELECT 1 FROM finished_jobs WHERE cancelled_by IS NOT NULL)`
	sqlCancelledBecause = `SELECT id, queue, unique_key, depends_on, ignore_dep_failure FROM finished_jobs
		WHERE cancelled_by = ?1 AND state = 'cancelled' ORDER BY id`
	sqlReviveFinished = `INSERT INTO jobs (` + jobColumns + `)
		SELECT id, kind, queue, args, 'waiting', priority, attempt, max_attempts, run_at, created_at,
			attempted_at, attempted_by, NULL, NULL, claim_token, unique_key, errors, tags, meta, timeout,
			partition_key, result, progress, 0, workflow_id, depends_on, ignore_dep_failure,
			parent_id, spawn_step, cancel_with_parent, NULL
		FROM finished_jobs WHERE id = ?1`

	// Queues and periodic schedules.
	sqlQueueColumns   = `name, paused, settings, dropped, updated_at`
	sqlQueuesAll      = `SELECT ` + sqlQueueColumns + ` FROM queues ORDER BY name`
	sqlQueueGet       = `SELECT ` + sqlQueueColumns + ` FROM queues WHERE name = ?1`
	sqlQueueSettings  = `SELECT settings FROM queues WHERE name = ?1`
	sqlQueueConfigure = `INSERT INTO queues (name, settings, updated_at) VALUES (?1, ?2, ?3)
		ON CONFLICT (name) DO UPDATE SET settings = excluded.settings, updated_at = excluded.updated_at`
	sqlQueuePause = `INSERT INTO queues (name, paused, updated_at) VALUES (?1, ?2, ?3)
		ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at`
	sqlQueueDropped = `INSERT INTO queues (name, dropped) VALUES (?1, ?2)
		ON CONFLICT (name) DO UPDATE SET dropped = dropped + excluded.dropped`
	sqlQueuesBump     = `UPDATE sortie_meta SET value = value + 1 WHERE key = 'queues_version'`
	sqlQueuesWithJobs = `SELECT DISTINCT queue FROM job_counts WHERE n <> 0`
	// QueueDelete: the queue's jobs in every state, then its rows. Its
	// job_counts rows, all zero, stay: this group's pending count changes
	// may still write to them, and QueueList skips zeros.
	sqlQueueJobs         = `SELECT coalesce(sum(n), 0) FROM job_counts WHERE queue = ?1`
	sqlQueueDelete       = `DELETE FROM queues WHERE name = ?1`
	sqlQueueDeleteStarts = `DELETE FROM rate_starts WHERE queue = ?1`
	sqlPeriodicGet       = `SELECT last FROM periodic WHERE name = ?1`
	sqlPeriodicSet       = `INSERT INTO periodic (name, last, updated_at) VALUES (?1, ?2, ?3)
		ON CONFLICT (name) DO UPDATE SET last = excluded.last, updated_at = excluded.updated_at`
	sqlPeriodicList = `SELECT name, last, updated_at FROM periodic ORDER BY name`
)

// insertColumns are the columns an enqueue binds, per row: insertRow's
// insertRowParams values. A batch that uses no queue feature at insert (no
// partition key, workflow, dependency or IgnoreDepFailure) binds only the
// first insertRowParamsPlain, with insertColumnsPlain and insertRowPlain:
// every value bound costs the driver a call, which was a tenth of the
// enqueue CPU, and the other columns default to NULL or 0.
const (
	insertColumnsPlain = `id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
	claim_token, unique_key, tags, meta, timeout`
	insertColumns        = insertColumnsPlain + `, partition_key, workflow_id, depends_on, ignore_dep_failure`
	insertRowPlain       = `(?, ?, ?, ?, ?, ?, 0, ?, ?, ?, 0, ?, ?, ?, ?`
	insertRow            = insertRowPlain + `, ?, ?, ?, ?)`
	insertRowParamsPlain = 13
	insertRowParams      = 17
	insertChunkLarge     = 128
	insertChunkSmall     = 16
)

// insertChunks are the row counts of the prepared multi-row inserts; a batch
// is cut into chunks of these sizes, largest first.
var insertChunks = [...]int{insertChunkLarge, insertChunkSmall, 1}

// insertSQL returns the INSERT for n rows, binding insertRowParams values
// per row, or insertRowParamsPlain when plain. It runs once per chunk size,
// when the writer prepares its statements, never per enqueue.
func insertSQL(n int, plain bool) string {
	var b strings.Builder
	if plain {
		b.WriteString(`INSERT INTO jobs (` + insertColumnsPlain + `) VALUES `)
	} else {
		b.WriteString(`INSERT INTO jobs (` + insertColumns + `) VALUES `)
	}
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		if plain {
			b.WriteString(insertRowPlain + `)`)
		} else {
			b.WriteString(insertRow)
		}
	}
	return b.String()
}

// The SQL of history and latency.
const (
	// sqlHistory reads the counts of minutes ?1 <= minute < ?2, of queue
	// ?3 (empty for every queue): a range of job_history's key.
	sqlHistory = `SELECT minute, queue, outcome, n FROM job_history
		WHERE minute >= ?1 AND minute < ?2 AND (?3 = '' OR queue = ?3) ORDER BY minute, queue`
	// sqlHistoryPrune deletes up to ?2 counts of minutes before ?1, oldest
	// first.
	sqlHistoryPrune = `DELETE FROM job_history WHERE (minute, queue, outcome) IN (
		SELECT minute, queue, outcome FROM job_history WHERE minute < ?1 ORDER BY minute LIMIT ?2 + 0)`
)

// sqlLatency reads, for queue ?1 (empty for every queue) when it has
// available, scheduled or retrying jobs, the earliest RunAt of its
// available jobs of each priority, without and with a partition key, and
// of its scheduled and retrying jobs: each a min() over an equality prefix
// of jobs_fetch, jobs_fetch_keyed or jobs_due, which SQLite answers with
// one seek. The queues come from job_counts.
var sqlLatency = func() string {
	var b strings.Builder
	b.WriteString(`SELECT c.queue`)
	for p := store.PriorityHighest; p <= store.PriorityLowest; p++ {
		for _, keyed := range []string{"IS NULL", "IS NOT NULL"} {
			fmt.Fprintf(&b, `,
		(SELECT min(run_at) FROM jobs WHERE state = 'available' AND partition_key %s AND queue = c.queue AND priority = %d)`, keyed, p)
		}
	}
	b.WriteString(`,
		(SELECT min(run_at) FROM jobs WHERE queue = c.queue AND state IN ('scheduled', 'retrying'))
	FROM (SELECT DISTINCT queue FROM job_counts
		WHERE state IN ('available', 'scheduled', 'retrying') AND n > 0 AND (?1 = '' OR queue = ?1)) c
	ORDER BY c.queue`)
	return b.String()
}()

// latencyColumns is the number of RunAt columns sqlLatency returns after
// the queue: the available heads, then the scheduled and retrying one.
const latencyColumns = 2*(store.PriorityLowest-store.PriorityHighest+1) + 1

// forIDs turns a statement on the job whose ID is ?1 ("WHERE id = ?1")
// into the same statement on the jobs whose IDs are the JSON array ?1, so
// that the actions move a batch of jobs with the one statement written for
// one job.
func forIDs(q string) string {
	const one = "WHERE id = ?1"
	if !strings.Contains(q, one) {
		panic("sqlitestore: forIDs: no " + one + " in " + q)
	}
	return strings.Replace(q, one, "WHERE id IN (SELECT value FROM json_each(?1))", 1)
}
