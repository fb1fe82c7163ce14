package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sortiehq/sortie/store"
)

// SchemaVersion is the version of the database schema this package writes.
// Open migrates older files up to it and refuses files from a newer version.
const SchemaVersion = 7

// jobColumns are the columns of jobs and finished_jobs, in scan order.
const jobColumns = `id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
	attempted_at, attempted_by, finalized_at, lease_until, claim_token, unique_key, errors, tags, meta, timeout,
	partition_key, result, progress, cancel_requested, workflow_id, depends_on, ignore_dep_failure,
	parent_id, spawn_step, cancel_with_parent, waits_for`

// The columns a read of a job returns, in scanJob's order: jobColumns and
// the cause of a cancellation, which only finished_jobs has (see schemaV4).
const (
	pendingColumns  = jobColumns + `, NULL`
	finishedColumns = jobColumns + `, cancelled_by`
)

// jobTableColumns is the column list of jobs and finished_jobs in version 1
// (version 2 adds columns: see jobColumnsV2). Times are
// integer microseconds since the Unix epoch (NULL for a zero time), timeout is
// in nanoseconds, errors and tags are JSON text, args and meta are the bytes
// as given (NULL for nil, empty text for empty).
const jobTableColumns = `(
	id           INTEGER PRIMARY KEY,
	kind         TEXT    NOT NULL,
	queue        TEXT    NOT NULL,
	args         BLOB,
	state        TEXT    NOT NULL,
	priority     INTEGER NOT NULL,
	attempt      INTEGER NOT NULL,
	max_attempts INTEGER NOT NULL,
	run_at       INTEGER NOT NULL,
	created_at   INTEGER NOT NULL,
	attempted_at INTEGER,
	attempted_by TEXT,
	finalized_at INTEGER,
	lease_until  INTEGER,
	claim_token  INTEGER NOT NULL,
	unique_key   TEXT,
	errors       TEXT,
	tags         TEXT,
	meta         BLOB,
	timeout      INTEGER NOT NULL
)`

// schemaV1 creates version 1.
//
// jobs holds pending jobs only (scheduled, available, running, retrying):
// it stays small and hot, and its unique index on unique_key is exactly the
// uniqueness rule of the contract. A job that finishes moves to finished_jobs
// in the same transaction (deleting from the hot table was measured faster
// than updating rows in place). job_counts keeps the number of jobs per queue
// and state, updated in the transaction of every transition, so JobCounts
// never reads job rows. sortie_meta holds the schema version and the ID and
// claim-token sequences (explicit sequences, so an ID is never reused after
// the job with the highest ID moved out of jobs or was deleted).
//
// Partial indexes name their states literally: SQLite uses a partial index
// only when the query's WHERE clause names the same literal, never for a
// bound parameter.
var schemaV1 = []string{
	`CREATE TABLE sortie_meta (
		key   TEXT PRIMARY KEY,
		value INTEGER NOT NULL
	) WITHOUT ROWID`,
	`CREATE TABLE jobs ` + jobTableColumns,
	`CREATE TABLE finished_jobs ` + jobTableColumns,
	`CREATE TABLE job_counts (
		queue TEXT    NOT NULL,
		state TEXT    NOT NULL,
		n     INTEGER NOT NULL,
		PRIMARY KEY (queue, state)
	) WITHOUT ROWID`,
	// The claim order of JobFetch.
	`CREATE INDEX jobs_fetch ON jobs (queue, priority, run_at, id) WHERE state = 'available'`,
	// Due scheduled and retrying jobs (promotion at fetch, a short fetch's NextAt).
	`CREATE INDEX jobs_due ON jobs (queue, run_at) WHERE state IN ('scheduled', 'retrying')`,
	// Expired leases (JobRescue).
	`CREATE INDEX jobs_lease ON jobs (lease_until) WHERE state = 'running'`,
	// Uniqueness among pending jobs.
	`CREATE UNIQUE INDEX jobs_unique_key ON jobs (unique_key) WHERE unique_key IS NOT NULL`,
	// Retention (JobPrune).
	`CREATE INDEX finished_jobs_prune ON finished_jobs (state, finalized_at)`,
	// Listing finished jobs of one state in ID order (dead letters among
	// millions of completed jobs).
	`CREATE INDEX finished_jobs_list ON finished_jobs (state, id)`,
	`INSERT INTO sortie_meta (key, value) VALUES ('schema_version', 1), ('next_job_id', 1), ('next_claim_token', 1)`,
}

// jobColumnsV2 are the columns version 2 adds to jobs and finished_jobs.
// partition_key, workflow_id, depends_on (a JSON array of IDs) and result
// are NULL when unset, so jobs that use none of the queue features store
// nothing more than in version 1.
var jobColumnsV2 = []string{
	`partition_key TEXT`,
	`result BLOB`,
	`progress REAL NOT NULL DEFAULT 0`,
	`cancel_requested INTEGER NOT NULL DEFAULT 0`,
	`workflow_id INTEGER`,
	`depends_on TEXT`,
	`ignore_dep_failure INTEGER NOT NULL DEFAULT 0`,
}

// schemaV2 brings version 1 to version 2: the queue features.
//
// job_deps holds one row per unfinished dependency of a waiting job; it is
// read by dep_id when a job finishes (to release or cancel its dependents)
// and by job_id to see whether a dependent still waits for anything.
// queues holds the shared state of queues that were configured or paused;
// its version (sortie_meta queues_version, read with the sequences once per
// group) tells a writer when to reload its cached copy. rate_starts holds one
// row per start of a rate-limited queue (partition "") or partition, for
// exact sliding windows; rows older than the window are deleted as fetches
// pass. periodic holds the last slot of each periodic schedule.
//
// The running-partition and workflow indexes hold only jobs that have a
// partition key or a workflow. jobs_fetch_partition as created here holds
// every available job; version 3 narrows it to keyed jobs.
var schemaV2 = func() []string {
	var s []string
	for _, table := range []string{"jobs", "finished_jobs"} {
		for _, c := range jobColumnsV2 {
			s = append(s, `ALTER TABLE `+table+` ADD COLUMN `+c)
		}
	}
	return append(s,
		`CREATE TABLE job_deps (
			dep_id INTEGER NOT NULL,
			job_id INTEGER NOT NULL,
			PRIMARY KEY (dep_id, job_id)
		) WITHOUT ROWID`,
		`CREATE INDEX job_deps_job ON job_deps (job_id)`,
		`CREATE TABLE queues (
			name       TEXT PRIMARY KEY,
			paused     INTEGER NOT NULL DEFAULT 0,
			settings   TEXT,
			dropped    INTEGER NOT NULL DEFAULT 0,
			updated_at INTEGER
		) WITHOUT ROWID`,
		`CREATE TABLE rate_starts (
			queue     TEXT    NOT NULL,
			partition TEXT    NOT NULL,
			at        INTEGER NOT NULL
		)`,
		`CREATE INDEX rate_starts_window ON rate_starts (queue, partition, at)`,
		`CREATE TABLE periodic (
			name       TEXT PRIMARY KEY,
			last       INTEGER,
			updated_at INTEGER
		) WITHOUT ROWID`,
		// Each partition's claim order, and the partitions with available
		// jobs. It holds jobs without a key too (partition_key NULL sorts
		// first), so the unpartitioned jobs of a queue with partition limits
		// are found without reading the keyed backlog ahead of them.
		`CREATE INDEX jobs_fetch_partition ON jobs (queue, partition_key, priority, run_at, id)
			WHERE state = 'available'`,
		// Running jobs per partition (PartitionMaxRunning).
		`CREATE INDEX jobs_running_partition ON jobs (queue, partition_key)
			WHERE state = 'running' AND partition_key IS NOT NULL`,
		// Listing a workflow's jobs.
		`CREATE INDEX jobs_workflow ON jobs (workflow_id) WHERE workflow_id IS NOT NULL`,
		`CREATE INDEX finished_jobs_workflow ON finished_jobs (workflow_id) WHERE workflow_id IS NOT NULL`,
		`INSERT INTO sortie_meta (key, value) VALUES ('queues_version', 1)`,
	)
}()

// schemaV3 brings version 2 to version 3: a job without a partition key
// has one fetch-index entry again, as in version 1 (version 2 indexed every
// available job twice: an index entry more per enqueue and claim). jobs_fetch
// holds the available jobs without a key, in claim order, so a partitioned
// fetch finds them without reading the keyed backlog; jobs_fetch_keyed
// holds the keyed ones in claim order and jobs_fetch_partition the keyed
// ones per partition. A fetch from a queue without partition limits merges
// the heads of jobs_fetch and jobs_fetch_keyed (see sqlClaim and
// sqlClaimMerged).
var schemaV3 = []string{
	`DROP INDEX jobs_fetch`,
	`DROP INDEX jobs_fetch_partition`,
	`CREATE INDEX jobs_fetch ON jobs (queue, priority, run_at, id)
		WHERE state = 'available' AND partition_key IS NULL`,
	`CREATE INDEX jobs_fetch_keyed ON jobs (queue, priority, run_at, id)
		WHERE state = 'available' AND partition_key IS NOT NULL`,
	`CREATE INDEX jobs_fetch_partition ON jobs (queue, partition_key, priority, run_at, id)
		WHERE state = 'available' AND partition_key IS NOT NULL`,
}

// schemaV4 brings version 3 to version 4: finished_jobs.cancelled_by names
// the dependency whose ending (dead or cancelled) cancelled a job, NULL for
// any other job, so that JobRetry of that dependency finds the jobs to
// revive in finished_jobs_cancelled_by, an index that holds only those.
// The jobs table has no such column: a job leaving the finished table
// leaves it behind. Jobs an older version cancelled that way are found
// once, here, by their last error (the message the cascade wrote, naming
// one of the job's dependencies).
var schemaV4 = []string{
	`ALTER TABLE finished_jobs ADD COLUMN cancelled_by INTEGER`,
	`UPDATE finished_jobs SET cancelled_by = CAST(substr(json_extract(errors, '$[#-1].message'), 16) AS INTEGER)
		WHERE state = 'cancelled'
			AND (json_extract(errors, '$[#-1].message') GLOB 'dependency job [0-9]* ended dead'
				OR json_extract(errors, '$[#-1].message') GLOB 'dependency job [0-9]* ended cancelled')
			AND CAST(substr(json_extract(errors, '$[#-1].message'), 16) AS INTEGER) IN (SELECT value FROM json_each(depends_on))`,
	`CREATE INDEX finished_jobs_cancelled_by ON finished_jobs (cancelled_by) WHERE cancelled_by IS NOT NULL`,
}

// schemaV5 brings version 4 to version 5: processes, the registry of
// client processes (store.ProcessRow): data holds what the process sends
// (registry.Encode), last_beat its last beat in microseconds, quiet
// and stop the commands requested for it. A few rows, read whole.
var schemaV5 = []string{
	`CREATE TABLE processes (
		id        TEXT PRIMARY KEY,
		data      TEXT NOT NULL,
		last_beat INTEGER NOT NULL,
		quiet     INTEGER NOT NULL DEFAULT 0,
		stop      INTEGER NOT NULL DEFAULT 0
	) WITHOUT ROWID`,
}

// migrations[v] brings a database from version v to v+1.
var migrations = [][]string{
	0: schemaV1,
	1: schemaV2,
	2: schemaV3,
	3: schemaV4,
	4: schemaV5,
	5: schemaHistory,
	6: schemaSteps,
}

// schemaHistory brings version 5 to version 6: job_history holds the
// history counts (store.Store.JobHistory), one row per minute (its start,
// in microseconds), queue and outcome. The writer adds each group
// transaction's counts with one upsert per minute, queue and outcome it
// touched. The key leads with the minute: the dashboard reads the last
// hour of every queue, and pruning deletes the oldest minutes, each a
// range of the key. Latency needs no index of its own: it reads the heads
// of jobs_fetch, jobs_fetch_keyed and jobs_due. The statement can run
// again on a file that has the table.
var schemaHistory = []string{
	`CREATE TABLE IF NOT EXISTS job_history (
		minute  INTEGER NOT NULL,
		queue   TEXT    NOT NULL,
		outcome TEXT    NOT NULL,
		n       INTEGER NOT NULL,
		PRIMARY KEY (minute, queue, outcome)
	) WITHOUT ROWID`,
}

// schemaSteps brings version 6 to version 7: durable steps. A spawned
// child names its parent and spawn step (parent_id, spawn_step, indexed
// for JobList by ParentID and for cancelling children), and a job waiting
// at a Sleep or Await names the step (waits_for). job_steps holds each
// job's steps, keyed by job and name, seq giving their order; a spawn
// step's pending counts its children in the jobs table, which holds
// exactly the pending jobs: the two triggers keep it, whatever moves a
// child in (an enqueue, a retry, a revival, an import) or out (an
// outcome, a rescue, a cancel, a drop, a delete). The trigger that sees
// the count reach zero under a parent waiting at that step queues the
// parent in step_wakes; the writer releases it in the same request
// (releaseAwaits). sortie_meta's spawned is set by the first spawn, so a
// file that never spawned skips that read.
var schemaSteps = func() []string {
	var s []string
	for _, table := range []string{"jobs", "finished_jobs"} {
		for _, c := range []string{`parent_id INTEGER`, `spawn_step TEXT`, `cancel_with_parent INTEGER NOT NULL DEFAULT 0`, `waits_for TEXT`} {
			s = append(s, `ALTER TABLE `+table+` ADD COLUMN `+c)
		}
		s = append(s, `CREATE INDEX `+table+`_parent ON `+table+` (parent_id) WHERE parent_id IS NOT NULL`)
	}
	return append(s,
		`CREATE TABLE job_steps (
			job_id      INTEGER NOT NULL,
			name        TEXT    NOT NULL,
			seq         INTEGER NOT NULL,
			kind        TEXT    NOT NULL,
			attempt     INTEGER NOT NULL,
			recorded_at INTEGER NOT NULL,
			result      BLOB,
			until       INTEGER,
			children    TEXT,
			child_count INTEGER NOT NULL DEFAULT 0,
			pending     INTEGER NOT NULL DEFAULT 0,
			PRIMARY KEY (job_id, name)
		) WITHOUT ROWID`,
		`CREATE TABLE step_wakes (job_id INTEGER NOT NULL)`,
		`CREATE TRIGGER jobs_child_in AFTER INSERT ON jobs WHEN NEW.parent_id IS NOT NULL BEGIN
			UPDATE job_steps SET pending = pending + 1 WHERE job_id = NEW.parent_id AND name = NEW.spawn_step;
		END`,
		`CREATE TRIGGER jobs_child_out AFTER DELETE ON jobs WHEN OLD.parent_id IS NOT NULL BEGIN
			UPDATE job_steps SET pending = pending - 1 WHERE job_id = OLD.parent_id AND name = OLD.spawn_step;
			INSERT INTO step_wakes (job_id) SELECT s.job_id FROM job_steps s
				WHERE s.job_id = OLD.parent_id AND s.name = OLD.spawn_step AND s.pending = 0
					AND EXISTS (SELECT 1 FROM jobs p WHERE p.id = OLD.parent_id AND p.state = 'waiting' AND p.waits_for = OLD.spawn_step);
		END`,
		`INSERT INTO sortie_meta (key, value) VALUES ('spawned', 0)`,
	)
}()

// sortieTables are the tables this package creates; any other table in a
// file without sortie_meta means the file belongs to someone else.
var sortieTables = map[string]bool{
	"sortie_meta": true, "jobs": true, "finished_jobs": true, "job_counts": true,
	"job_deps": true, "queues": true, "rate_starts": true, "periodic": true,
	"processes": true, "job_history": true, "job_steps": true, "step_wakes": true,
}

// migrate checks the schema of the database on conn and brings it up to
// SchemaVersion, inside one write transaction so concurrent openers of the
// same file do not race. A schema already at SchemaVersion is read, not
// locked: a process opening the file while others write it does not wait
// for the write lock, which busy writers of other processes leave free
// only for moments that SQLite's busy handler, sleeping up to 100 ms
// between tries, can miss for longer than its timeout.
func migrate(ctx context.Context, conn *sql.Conn, path string) (err error) {
	if v, err := schemaVersion(ctx, conn, path); err == nil && v == SchemaVersion {
		return nil
	}
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(ctx, `ROLLBACK`)
		}
	}()
	version, err := schemaVersion(ctx, conn, path)
	if err != nil {
		return err
	}
	if version > SchemaVersion {
		return fmt.Errorf("sqlitestore: open %s: %w: the file has schema version %d, this sortie knows up to %d",
			path, store.ErrSchemaNewer, version, SchemaVersion)
	}
	for v := version; v < SchemaVersion; v++ {
		for _, q := range migrations[v] {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("migrate schema to version %d: %w", v+1, err)
			}
		}
		if _, err := conn.ExecContext(ctx, `UPDATE sortie_meta SET value = ? WHERE key = 'schema_version'`, v+1); err != nil {
			return fmt.Errorf("migrate schema to version %d: %w", v+1, err)
		}
	}
	_, err = conn.ExecContext(ctx, `COMMIT`)
	return err
}

// schemaVersion returns the schema version of the database: 0 for an empty
// one, or an error wrapping store.ErrNotSortieDatabase for a database that
// holds other tables.
func schemaVersion(ctx context.Context, conn *sql.Conn, path string) (int, error) {
	rows, err := conn.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`)
	if err != nil {
		return 0, err
	}
	var foreign []string
	hasMeta, hasTables := false, false
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return 0, err
		}
		hasTables = true
		if name == "sortie_meta" {
			hasMeta = true
		}
		if !sortieTables[name] {
			foreign = append(foreign, name)
		}
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if !hasTables {
		return 0, nil
	}
	if !hasMeta {
		return 0, fmt.Errorf("sqlitestore: open %s: %w: it has tables %q but no sortie_meta table", path, store.ErrNotSortieDatabase, foreign)
	}
	var version int
	err = conn.QueryRowContext(ctx, `SELECT value FROM sortie_meta WHERE key = 'schema_version'`).Scan(&version)
	if err == sql.ErrNoRows {
		return 0, fmt.Errorf("sqlitestore: open %s: %w: sortie_meta has no schema_version", path, store.ErrNotSortieDatabase)
	}
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: open %s: %w: reading sortie_meta: %w", path, store.ErrNotSortieDatabase, err)
	}
	return version, nil
}
