package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sortiehq/sortie/store"
)

// SchemaVersion is the version of the database schema this package writes.
// Migrate brings older schemas up to it; Open refuses a newer one.
const SchemaVersion = 11

// migrations[v] brings a schema from version v to v+1. Every statement
// names its objects with the {s} placeholder, replaced by the quoted schema
// name, so one database can hold several independent sortie schemas.
var migrations = [][]string{
	0:  schemaV1,
	1:  schemaV2,
	2:  schemaV3,
	3:  schemaV4,
	4:  schemaV5,
	5:  schemaV6,
	6:  schemaHistory,
	7:  schemaV8,
	8:  schemaV9,
	9:  schemaSteps,
	10: schemaV11,
}

// planSettings restrict the planner to index scans and nested loops. A
// claim then reads the head of an index in order, and an update of named
// jobs finds each by primary key, whatever the statistics say. Left to the
// statistics, a plan made while the table was small (a sort of every
// available job; a scan of every running job per outcome) or with a
// generic LIMIT (a hash join over the whole table) is kept for the life of
// the connection, and each fetch or finish costs as much as the backlog or
// the running set: a drain of N jobs costs N². The hot-path functions
// carry them (planPins), and so does every transaction the store opens
// (pinnedTx in store.go).
//
// jit is off too: a plan that needs a node the settings disable (the sort
// of a rescue's few expired leases) is costed above jit_above_cost, and
// compiling it took 50-70 ms of a statement that otherwise takes 0.4 ms.
var planSettings = []string{"enable_seqscan = off", "enable_bitmapscan = off", "enable_sort = off",
	"enable_hashjoin = off", "enable_mergejoin = off", "jit = off"}

// planPins are the SET clauses of the hot-path functions: planSettings,
// planned once per connection.
var planPins = "SET plan_cache_mode = force_generic_plan SET " + strings.Join(planSettings, " SET ")

// claimJobsSQL creates claim_jobs, a fetch from a queue without limits in
// one statement: it makes the queue's due scheduled and retrying jobs
// available (up to 1,000 at a time), claims up to p_limit available jobs in
// claim order unless the queue is paused or limited, stamping each with
// p_now or its run_at or created_at when later (fetchplan.AttemptedAt), and
// notifies the queue when it made jobs available that it did not claim.
// Version 2 made it; version 9 stamps the later time; version 10 clears
// the job's WaitsFor.
var claimJobsSQL = `CREATE OR REPLACE FUNCTION {s}.claim_jobs(p_queue text, p_limit integer, p_now timestamptz, p_worker text,
		p_lease timestamptz, p_kinds text[], p_channel text)
	RETURNS SETOF {s}.jobs LANGUAGE plpgsql ` + planPins + ` AS $$
DECLARE
	promoted bigint;
	claimed bigint := 0;
BEGIN
	UPDATE {s}.jobs SET state = 'available' WHERE id = ANY(ARRAY(
		SELECT id FROM {s}.jobs WHERE queue = p_queue AND state IN ('scheduled', 'retrying') AND run_at <= p_now
		ORDER BY run_at LIMIT 1000 FOR UPDATE SKIP LOCKED));
	GET DIAGNOSTICS promoted = ROW_COUNT;
	IF NOT EXISTS (SELECT 1 FROM {s}.queues q WHERE q.name = p_queue AND (q.paused OR q.limited)) THEN
		RETURN QUERY UPDATE {s}.jobs j SET state = 'running', attempt = j.attempt + 1,
				attempted_at = greatest(p_now, j.run_at, j.created_at),
				attempted_by = p_worker, lease_until = p_lease, waits_for = NULL,
				claim_token = (SELECT nextval('{s}.claim_token_seq'))
			WHERE j.id = ANY(ARRAY(
				SELECT id FROM {s}.jobs
				WHERE state = 'available' AND queue = p_queue AND (p_kinds IS NULL OR kind = ANY(p_kinds))
				ORDER BY priority, run_at, id
				LIMIT p_limit
				FOR UPDATE SKIP LOCKED))
			RETURNING j.*;
		GET DIAGNOSTICS claimed = ROW_COUNT;
	END IF;
	IF promoted > claimed THEN
		PERFORM pg_notify(p_channel, p_queue);
	END IF;
END $$`

// schemaV2 adds the hot paths as functions with pinned plans (planPins).
//
// claim_jobs is the whole of a fetch from a queue without limits: it makes
// the queue's due scheduled and retrying jobs available, claims up to
// p_limit available jobs (of kinds p_kinds when not NULL) in claim order,
// skipping rows other fetchers hold, unless the queue is paused or has
// limits, and notifies the queue when it made jobs available that it did
// not claim.
//
// Inserts count themselves: each of the three insert paths (sqlEnqueueFast,
// sqlInsertCounted, enqueueCopy) appends its deltas in the same statement or
// transaction, so version 2 drops the insert trigger, whose call and
// transition table cost each single-job enqueue a fifth of its statement.
// Updates and deletes keep their triggers.
//
// finish_jobs applies a batch of outcomes (see sqlFinish), extend_leases
// extends leases and reports cancel requests, record_progress records
// progress; each touches only claims still held (id, token, running). The
// running state is a variable there, so the planner cannot prove a
// partial index on running jobs usable: with the pins, the jobs are found
// by primary key, never by a scan of the running set.
var schemaV2 = []string{
	`DROP TRIGGER IF EXISTS jobs_count_insert ON {s}.jobs`,
	`DROP FUNCTION IF EXISTS {s}.count_inserted()`,
	claimJobsSQL,
	finishJobsSQL(false, false),
	`CREATE FUNCTION {s}.extend_leases(p_ids bigint[], p_tokens bigint[], p_until timestamptz)
		RETURNS TABLE (id bigint, claim_token bigint, cancel_requested boolean)
		LANGUAGE plpgsql ` + planPins + ` AS $$
	#variable_conflict use_column
	DECLARE
		running CONSTANT text := 'running';
	BEGIN
		RETURN QUERY UPDATE {s}.jobs j SET lease_until = p_until
			FROM unnest(p_ids, p_tokens) AS l(id, token)
			WHERE j.id = l.id AND j.claim_token = l.token AND j.state = running
			RETURNING j.id, j.claim_token, j.cancel_requested;
	END $$`,
	`CREATE FUNCTION {s}.record_progress(p_ids bigint[], p_tokens bigint[], p_progress double precision[])
		RETURNS TABLE (id bigint, claim_token bigint)
		LANGUAGE plpgsql ` + planPins + ` AS $$
	#variable_conflict use_column
	DECLARE
		running CONSTANT text := 'running';
	BEGIN
		RETURN QUERY UPDATE {s}.jobs j SET progress = l.progress
			FROM unnest(p_ids, p_tokens, p_progress) AS l(id, token, progress)
			WHERE j.id = l.id AND j.claim_token = l.token AND j.state = running
			RETURNING j.id, j.claim_token;
	END $$`,
}

// schemaV3 keeps one index of running jobs instead of two. Every claim
// writes an entry into each index of running jobs (the update that makes a
// job running cannot be HOT), and with two of them the claim cost a fifth
// more: a 100,000-job drain ran at 56,600 jobs/s with both and 67,500 with
// one (medians of three interleaved runs). jobs_running (queue, lease_until)
// serves what both did: a queue's running jobs (MaxRunning, and partition
// limits, which read the partition from the row) and, across queues, the
// expired leases a rescue looks for, among no more rows than are running.
//
// It also turns JIT compilation off in the hot-path functions of version 2
// (see planSettings).
var schemaV3 = []string{
	`DROP INDEX {s}.jobs_lease`,
	`DROP INDEX {s}.jobs_running`,
	`CREATE INDEX jobs_running ON {s}.jobs (queue, lease_until) WHERE state = 'running'`,
	`ALTER FUNCTION {s}.claim_jobs SET jit = off`,
	`ALTER FUNCTION {s}.finish_jobs SET jit = off`,
	`ALTER FUNCTION {s}.extend_leases SET jit = off`,
	`ALTER FUNCTION {s}.record_progress SET jit = off`,
}

// schemaV4 adds jobs.cancelled_by: the dependency whose ending (dead or
// cancelled) cancelled the job, NULL for any other job and cleared when the
// job leaves the cancelled state, so that JobRetry of that dependency finds
// the jobs to revive in jobs_cancelled_by, an index that holds only those.
// Adding a nullable column rewrites nothing, and the hot paths never set
// it. Jobs an older version cancelled that way are found once, here, by
// their last error (the message the cascade wrote, naming one of the job's
// dependencies). Each statement can run again on a schema that has it.
var schemaV4 = []string{
	`ALTER TABLE {s}.jobs ADD COLUMN IF NOT EXISTS cancelled_by bigint`,
	`UPDATE {s}.jobs j SET cancelled_by = c.dep FROM (
			SELECT id, substring(errors->-1->>'message' from '^dependency job ([0-9]+) ended')::bigint AS dep
			FROM {s}.jobs
			WHERE state = 'cancelled' AND cancelled_by IS NULL
				AND errors->-1->>'message' ~ '^dependency job [0-9]+ ended (dead|cancelled)$'
		) c
		WHERE j.id = c.id AND j.depends_on @> jsonb_build_array(c.dep)`,
	`CREATE INDEX IF NOT EXISTS jobs_cancelled_by ON {s}.jobs (cancelled_by) WHERE cancelled_by IS NOT NULL`,
}

// schemaV1 creates version 1.
//
// One jobs table holds every job; its partial indexes hold only the rows
// each query needs, so the hot paths stay fast however many finished jobs
// the table keeps: jobs_fetch holds the available jobs in claim order,
// jobs_due the scheduled and retrying ones by due time, jobs_running the
// running ones per queue and partition, jobs_lease their lease ends
// (version 3 merges these two), and jobs_unique is exactly the uniqueness rule (a key held by a pending job).
// Finished jobs are in jobs_prune (retention) and, apart from completed
// ones, in jobs_state (listing dead letters among millions of completed
// jobs); the primary key serves listing completed ones.
//
// job_counts holds the number of jobs per queue and state. Statement
// triggers append each statement's changes to job_count_deltas, so writers
// never contend on a counter row; JobCounts adds the deltas to the counts
// and folds them in from time to time.
//
// has_dependents marks a job that some waiting job depends on: finishing
// it takes the careful path that releases or cancels its dependents.
// Enqueuing a dependent sets it with an UPDATE, which locks the row, so a
// concurrent finish either sees the flag or finishes first and is seen.
var schemaV1 = []string{
	`CREATE TABLE {s}.sortie_meta (
		key   text PRIMARY KEY,
		value bigint NOT NULL
	)`,
	`CREATE SEQUENCE {s}.job_id_seq`,
	`CREATE SEQUENCE {s}.claim_token_seq`,
	`CREATE TABLE {s}.jobs (
		id                 bigint PRIMARY KEY,
		kind               text NOT NULL,
		queue              text NOT NULL,
		args               bytea,
		state              text NOT NULL CHECK (state IN ('waiting', 'scheduled', 'available', 'running', 'retrying', 'completed', 'cancelled', 'dead')),
		priority           smallint NOT NULL,
		attempt            integer NOT NULL DEFAULT 0,
		max_attempts       integer NOT NULL,
		run_at             timestamptz NOT NULL,
		created_at         timestamptz NOT NULL,
		attempted_at       timestamptz,
		attempted_by       text,
		finalized_at       timestamptz,
		lease_until        timestamptz,
		claim_token        bigint NOT NULL DEFAULT 0,
		unique_key         text,
		errors             jsonb,
		tags               jsonb,
		meta               bytea,
		timeout            bigint NOT NULL DEFAULT 0,
		partition_key      text,
		result             bytea,
		progress           double precision NOT NULL DEFAULT 0,
		cancel_requested   boolean NOT NULL DEFAULT false,
		workflow_id        bigint,
		depends_on         jsonb,
		ignore_dep_failure boolean NOT NULL DEFAULT false,
		has_dependents     boolean NOT NULL DEFAULT false
	)`,
	`ALTER SEQUENCE {s}.job_id_seq OWNED BY {s}.jobs.id`,
	`CREATE INDEX jobs_fetch ON {s}.jobs (queue, priority, run_at, id) WHERE state = 'available'`,
	`CREATE INDEX jobs_fetch_partition ON {s}.jobs (queue, partition_key, priority, run_at, id)
		WHERE state = 'available' AND partition_key IS NOT NULL`,
	`CREATE INDEX jobs_due ON {s}.jobs (queue, run_at) WHERE state IN ('scheduled', 'retrying')`,
	`CREATE INDEX jobs_running ON {s}.jobs (queue, partition_key) WHERE state = 'running'`,
	`CREATE INDEX jobs_lease ON {s}.jobs (lease_until) WHERE state = 'running'`,
	`CREATE UNIQUE INDEX jobs_unique ON {s}.jobs (unique_key)
		WHERE unique_key IS NOT NULL AND state IN ('waiting', 'scheduled', 'available', 'running', 'retrying')`,
	`CREATE INDEX jobs_prune ON {s}.jobs (state, finalized_at) WHERE state IN ('completed', 'cancelled', 'dead')`,
	`CREATE INDEX jobs_state ON {s}.jobs (state, id) WHERE state IN ('waiting', 'scheduled', 'retrying', 'cancelled', 'dead')`,
	`CREATE INDEX jobs_workflow ON {s}.jobs (workflow_id) WHERE workflow_id IS NOT NULL`,
	`CREATE TABLE {s}.job_deps (
		dep_id bigint NOT NULL,
		job_id bigint NOT NULL,
		PRIMARY KEY (dep_id, job_id)
	)`,
	`CREATE INDEX job_deps_job ON {s}.job_deps (job_id)`,
	`CREATE TABLE {s}.job_counts (
		queue text NOT NULL,
		state text NOT NULL,
		n     bigint NOT NULL,
		PRIMARY KEY (queue, state)
	)`,
	`CREATE TABLE {s}.job_count_deltas (
		queue text NOT NULL,
		state text NOT NULL,
		n     bigint NOT NULL
	)`,
	`CREATE FUNCTION {s}.count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO {s}.job_count_deltas (queue, state, n)
			SELECT queue, state, count(*) FROM new_rows GROUP BY queue, state;
		RETURN NULL;
	END $$`,
	`CREATE FUNCTION {s}.count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO {s}.job_count_deltas (queue, state, n)
			SELECT queue, state, -count(*) FROM old_rows GROUP BY queue, state;
		RETURN NULL;
	END $$`,
	`CREATE FUNCTION {s}.count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO {s}.job_count_deltas (queue, state, n)
			SELECT queue, state, sum(d) FROM (
				SELECT o.queue, o.state, -1 AS d FROM old_rows o
				UNION ALL
				SELECT n.queue, n.state, 1 FROM new_rows n
			) c GROUP BY queue, state HAVING sum(d) <> 0;
		RETURN NULL;
	END $$`,
	`CREATE TRIGGER jobs_count_insert AFTER INSERT ON {s}.jobs
		REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_inserted()`,
	`CREATE TRIGGER jobs_count_delete AFTER DELETE ON {s}.jobs
		REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_deleted()`,
	`CREATE TRIGGER jobs_count_update AFTER UPDATE ON {s}.jobs
		REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_updated()`,
	`CREATE TABLE {s}.queues (
		name       text PRIMARY KEY,
		paused     boolean NOT NULL DEFAULT false,
		settings   jsonb,
		limited    boolean NOT NULL DEFAULT false,
		max_depth  integer NOT NULL DEFAULT 0,
		dropped    bigint NOT NULL DEFAULT 0,
		updated_at timestamptz
	)`,
	`CREATE TABLE {s}.rate_starts (
		queue     text NOT NULL,
		partition text NOT NULL,
		at        timestamptz NOT NULL,
		n         integer NOT NULL
	)`,
	`CREATE INDEX rate_starts_window ON {s}.rate_starts (queue, partition, at)`,
	`CREATE TABLE {s}.periodic (
		name       text PRIMARY KEY,
		last       timestamptz,
		updated_at timestamptz
	)`,
}

// sortieTables are the tables a sortie schema holds; a schema with other
// tables and no sortie_meta belongs to someone else.
var sortieTables = map[string]bool{
	"sortie_meta": true, "jobs": true, "job_deps": true, "job_counts": true, "job_count_deltas": true,
	"queues": true, "rate_starts": true, "periodic": true, "processes": true,
	"job_history": true, "job_history_deltas": true, "job_steps": true,
}

// MigrateResult says what Migrate did.
type MigrateResult struct {
	// From and To are the schema versions before and after.
	From, To int
}

// migrateLockKey is the advisory lock that serializes migrations of one
// schema across processes (combined with the schema name's hash).
const migrateLockKey = 0x736f72746965 // "sortie"

// migrate brings the schema up to SchemaVersion in one transaction, under
// an advisory lock so processes starting together do not race.
func migrate(ctx context.Context, conn *pgx.Conn, schema string) (MigrateResult, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return MigrateResult{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(migrateLockKey&0x7fffffff), schema); err != nil {
		return MigrateResult{}, fmt.Errorf("take migration lock: %w", err)
	}
	version, err := schemaVersion(ctx, tx, schema)
	if err != nil {
		return MigrateResult{}, err
	}
	res := MigrateResult{From: version, To: version}
	if version > SchemaVersion {
		return res, fmt.Errorf("%w: schema %q has version %d, this sortie knows up to %d; upgrade sortie",
			store.ErrSchemaNewer, schema, version, SchemaVersion)
	}
	if version == SchemaVersion {
		return res, nil
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+quoteIdent(schema)); err != nil {
		return res, fmt.Errorf("create schema %q: %w", schema, describe(err))
	}
	for v := version; v < SchemaVersion; v++ {
		for _, q := range migrations[v] {
			q = strings.ReplaceAll(q, "{channel}", quoteLiteral(notifyChannel(schema)))
			if _, err := tx.Exec(ctx, withSchema(q, schema)); err != nil {
				return res, fmt.Errorf("migrate schema %q to version %d: %w", schema, v+1, describe(err))
			}
		}
	}
	if _, err := tx.Exec(ctx, withSchema(`INSERT INTO {s}.sortie_meta (key, value) VALUES ('schema_version', $1)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, schema), SchemaVersion); err != nil {
		return res, fmt.Errorf("record schema version: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, err
	}
	res.To = SchemaVersion
	return res, nil
}

// schemaVersion returns the version of schema: 0 when it does not exist or
// is empty, or an error wrapping store.ErrNotSortieDatabase when it holds
// other tables. It lists the tables from pg_class, which shows a role every
// table (information_schema shows only those it has a privilege on), so a
// role that may not read sortie's tables is told so rather than that the
// schema is empty.
func schemaVersion(ctx context.Context, q querier, schema string) (int, error) {
	var role string
	var names []string
	err := q.QueryRow(ctx, `SELECT current_user, ARRAY(SELECT c.relname FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f'))`, schema).Scan(&role, &names)
	if err != nil {
		return 0, fmt.Errorf("read tables of schema %q: %w", schema, describe(err))
	}
	if len(names) == 0 {
		return 0, nil
	}
	hasMeta := false
	var foreign []string
	for _, n := range names {
		if n == "sortie_meta" {
			hasMeta = true
		}
		if !sortieTables[n] {
			foreign = append(foreign, n)
		}
	}
	if !hasMeta {
		return 0, fmt.Errorf("%w: schema %q has tables %q but no sortie_meta table; choose another schema (Options.Schema)",
			store.ErrNotSortieDatabase, schema, foreign)
	}
	var version int
	err = q.QueryRow(ctx, withSchema(`SELECT value FROM {s}.sortie_meta WHERE key = 'schema_version'`, schema)).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: schema %q: sortie_meta has no schema_version", store.ErrNotSortieDatabase, schema)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return 0, fmt.Errorf("schema %q holds sortie's tables, but permission denied to role %q: %s", schema, role, privilegeHint)
	}
	if err != nil {
		return 0, fmt.Errorf("read schema version of %q: %w", schema, describe(err))
	}
	return version, nil
}

// querier is what schemaVersion reads with: a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// withSchema replaces {s} in q with the quoted schema name.
func withSchema(q, schema string) string {
	return strings.ReplaceAll(q, "{s}", quoteIdent(schema))
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string {
	return pgx.Identifier{s}.Sanitize()
}

// quoteLiteral quotes a PostgreSQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// describe adds PostgreSQL's detail and hint to an error, when it has
// them, and makes a full disk (disk_full) a store.ErrStoreFull.
func describe(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "53100" { // disk_full
		return store.FullError("the PostgreSQL server's disk is full (delete or prune finished jobs, or free disk space)", err)
	}
	if errors.As(err, &pe) && (pe.Detail != "" || pe.Hint != "") {
		extra := strings.TrimSpace(pe.Detail + " " + pe.Hint)
		return fmt.Errorf("%w (%s)", err, extra)
	}
	return err
}

// schemaV5 makes a heartbeat one statement: extend_leases records the
// progress of the leases that carry some (p_progress, NULL for the others)
// in the same update that extends them, so record_progress goes.
//
// It also makes a fetch from a queue with queue-wide limits (MaxRunning,
// RateLimit; no partition limits) one statement, claim_limited, instead of
// a transaction of 7 to 9, and its next due time one more, queue_next_at,
// instead of 3 to 6 (see claimLimitedSQL); and a fetch from a queue with
// partition limits one statement too, claim_partitioned (which picks its
// jobs with partition_heads), instead of a transaction of 8 and up to 3
// more per partition with available jobs (see claimPartitionedSQL); both
// take the queue's room from queue_room. Each statement can run again on
// a schema that has it.
var schemaV5 = []string{
	`DROP FUNCTION IF EXISTS {s}.record_progress(bigint[], bigint[], double precision[])`,
	`DROP FUNCTION IF EXISTS {s}.extend_leases(bigint[], bigint[], timestamptz)`,
	`CREATE OR REPLACE FUNCTION {s}.extend_leases(p_ids bigint[], p_tokens bigint[], p_progress double precision[],
			p_until timestamptz)
		RETURNS TABLE (id bigint, claim_token bigint, cancel_requested boolean)
		LANGUAGE plpgsql ` + planPins + ` AS $$
	#variable_conflict use_column
	DECLARE
		running CONSTANT text := 'running';
	BEGIN
		RETURN QUERY UPDATE {s}.jobs j SET lease_until = p_until, progress = coalesce(l.progress, j.progress)
			FROM unnest(p_ids, p_tokens, p_progress) AS l(id, token, progress)
			WHERE j.id = l.id AND j.claim_token = l.token AND j.state = running
			RETURNING j.id, j.claim_token, j.cancel_requested;
	END $$`,
	queueRoomSQL,
	claimLimitedSQL,
	claimPartitionedSQL,
	partitionHeadsSQL,
	queueNextAtSQL,
}

// schemaV6 brings version 5 to version 6: processes, the registry of
// client processes (store.ProcessRow): data holds what the process sends
// (registry.Encode), last_beat its last beat, quiet and stop the
// commands requested for it. A few rows, read whole.
var schemaV6 = []string{
	`CREATE TABLE IF NOT EXISTS {s}.processes (
		id        text PRIMARY KEY,
		data      jsonb NOT NULL,
		last_beat timestamptz NOT NULL,
		quiet     boolean NOT NULL DEFAULT false,
		stop      boolean NOT NULL DEFAULT false
	)`,
}

// finishJobsSQL returns the statement that creates finish_jobs, which
// applies a batch of outcomes (see sqlFinish), as version 2 made it, or
// with history as version 7 replaces it: in the same statement it appends
// the history counts of the applied outcomes (finishOutcomes) to
// job_history_deltas, one row per queue and outcome the batch touched.
// With children, as version 9 replaces it, the same statement also counts
// the spawned children it finishes in their spawn steps, one update per
// step (not one per child, as the row trigger child_moved would, which
// costs quadratic time in the children of one step a transaction
// finishes), makes available a parent that waits at a step left with none
// pending, and notifies its queue; child_moved leaves the statement's
// rows to it (sortie.finishing). That statement reads the parent as of
// its start, but the step's count as of the step's lock: an Await that
// held the lock and suspended the parent after that start commits before
// the count comes back, and the statement, which read the parent running,
// leaves it waiting. So when the statement left a step with none pending
// (sortie.emptied), a second statement, which reads anew, makes available
// the parents of the batch's children still waiting at such a step
// (version 11; version 9's left them waiting for ever).
func finishJobsSQL(history, children bool) string {
	create, returning, counted := "CREATE FUNCTION", "", ""
	if history {
		create, returning = "CREATE OR REPLACE FUNCTION", ", o.kind"
		counted = `, h AS (
			INSERT INTO {s}.job_history_deltas (minute, queue, outcome, n)
			SELECT {s}.history_minute(p_now), x.queue, x.outcome, count(*) FROM (
				SELECT u.queue, ` + finishOutcomes() + ` AS outcome FROM u
			) x WHERE x.outcome IS NOT NULL GROUP BY x.queue, x.outcome
		)`
	}
	before, after, woke, declare := "", "", "(SELECT count(*) FROM w)", ""
	if children {
		returning += ", j.parent_id, j.spawn_step"
		before = "\n\t\tPERFORM set_config('sortie.finishing', 'on', true);"
		after = "\n\t\tPERFORM set_config('sortie.finishing', '', true);"
		woke = "(SELECT count(*) FROM w) + (SELECT count(*) FROM rw)"
		counted += `, ch AS (
			SELECT u.parent_id, u.spawn_step, count(*)::integer AS n FROM u
			WHERE u.parent_id IS NOT NULL AND u.state IN ('completed', 'cancelled', 'dead')
			GROUP BY u.parent_id, u.spawn_step
		), st AS (
			UPDATE {s}.job_steps s SET pending = s.pending - ch.n FROM ch
			WHERE s.job_id = ch.parent_id AND s.name = ch.spawn_step
			RETURNING s.job_id, s.name, s.pending,
				CASE WHEN s.pending = 0 THEN set_config('sortie.emptied', 'on', true) END AS emptied
		), rel AS (
			UPDATE {s}.jobs p SET state = 'available', waits_for = NULL FROM st
			WHERE st.pending = 0 AND p.id = st.job_id AND p.state = 'waiting' AND p.waits_for = st.name
			RETURNING p.queue
		), rw AS (
			SELECT pg_notify(p_channel, x.q) FROM (SELECT DISTINCT rel.queue AS q FROM rel) x
		)`
		after += `
		IF current_setting('sortie.emptied', true) = 'on' THEN
			PERFORM set_config('sortie.emptied', '', true);
			WITH rel AS (
				UPDATE {s}.jobs p SET state = 'available', waits_for = NULL
				FROM {s}.jobs c JOIN {s}.job_steps s ON s.job_id = c.parent_id AND s.name = c.spawn_step
				WHERE c.id = ANY(p_ids) AND s.pending = 0
					AND p.id = s.job_id AND p.state = 'waiting' AND p.waits_for = s.name
				RETURNING p.queue
			) SELECT count(pg_notify(p_channel, x.q)) INTO emptied_woke FROM (SELECT DISTINCT rel.queue AS q FROM rel) x;
		END IF;`
		declare = "\n\t\temptied_woke bigint;"
	}
	return create + ` {s}.finish_jobs(p_ids bigint[], p_tokens bigint[], p_kinds smallint[], p_run_ats timestamptz[],
			p_errs text[], p_results bytea[], p_now timestamptz, p_with_dependents boolean, p_channel text)
		RETURNS TABLE (id bigint, claim_token bigint, state text, has_dependents boolean, woke bigint)
		LANGUAGE plpgsql ` + planPins + ` AS $$
	#variable_conflict use_column
	DECLARE
		running CONSTANT text := 'running';` + declare + `
	BEGIN` + before + `
		RETURN QUERY WITH o AS (
			SELECT * FROM unnest(p_ids, p_tokens, p_kinds, p_run_ats, p_errs, p_results)
				AS o(id, token, kind, run_at, err, result)
		), u AS (
			UPDATE {s}.jobs j SET
` + finishSet() + `,
				lease_until = NULL,
				cancel_requested = false,
				errors = CASE WHEN o.err IS NULL THEN j.errors
					ELSE COALESCE(j.errors, '[]'::jsonb) || jsonb_build_array(
						CASE WHEN (o.err::jsonb->>'attempt')::integer = 0
							THEN jsonb_set(o.err::jsonb, '{attempt}', to_jsonb(j.attempt))
							ELSE o.err::jsonb END) END
			FROM o
			WHERE j.id = o.id AND j.claim_token = o.token AND j.state = running
				AND (p_with_dependents OR NOT j.has_dependents)
			RETURNING j.id, j.claim_token, j.state, j.queue, j.has_dependents` + returning + `
		), w AS (
			SELECT pg_notify(p_channel, x.q) FROM (
				SELECT DISTINCT u.queue AS q FROM u
				WHERE u.state IN ('available', 'scheduled', 'retrying')
					OR EXISTS (SELECT 1 FROM {s}.queues qq WHERE qq.name = u.queue AND qq.limited)
			) x
		)` + counted + `
		SELECT u.id, u.claim_token, u.state, u.has_dependents, ` + woke + ` FROM u;` + after + `
	END $$`
}

// schemaV8 brings version 7 to version 8: queue_next_at, what a short fetch
// from a limited queue reads after its claim, takes its queue's first due
// time from the head of jobs_due (sqlFirstDue) instead of aggregating every
// scheduled and retrying job of the queue. It can run again.
var schemaV8 = []string{queueNextAtSQL}

// schemaV9 makes every claim stamp AttemptedAt no earlier than the job's
// RunAt and CreatedAt (fetchplan.AttemptedAt: a fetch whose Now was read before
// an enqueue it claims recorded a start before the job existed), and
// records rate-window starts at that time.
var schemaV9 = []string{claimJobsSQL, claimLimitedSQL, claimPartitionedSQL}

// schemaV11 brings version 10 to version 11: a fetch from a rate-limited
// queue forgets only the starts recorded two periods and
// store.MaxStartAhead before its Now (ratelimit.Window.ForgetBefore), not
// two periods: a worker's fetch reserves its start up to MaxStartAhead
// ahead, and one that reserved more forgot starts that another's window
// still held, which let two starts closer than the limit through, and a
// start given back after its row was forgotten took one of another
// start's away. And finish_jobs makes available a parent whose Await
// committed while the finish of its last child waited for the spawn
// step's lock (see finishJobsSQL). It can run again.
var schemaV11 = []string{queueRoomSQL, partitionHeadsSQL, finishJobsSQL(true, true)}

// schemaHistory brings version 6 to version 7: the history counts
// (store.Store.JobHistory). As with the job counts, writers append to
// job_history_deltas (no key, so concurrent finishes never wait on one
// counter row) and readers fold the deltas into job_history, keyed by
// (minute, queue, outcome): the dashboard reads the last hour of every
// queue and pruning deletes the oldest minutes, each a range of the key.
// finish_jobs appends the counts of its batch in the same statement; the
// other ways jobs end (cancels, cascades, drops, rescues) append theirs in
// their own transaction. history_minute is store.HistoryMinute, whatever
// the session's time zone (TestHistoryMinuteSQL holds it to the Go rule).
// Latency needs no index of its own: it reads the heads of jobs_fetch and
// jobs_due. Each statement can run again on a schema that has it.
var schemaHistory = []string{
	`CREATE OR REPLACE FUNCTION {s}.history_minute(t timestamptz) RETURNS timestamptz
		LANGUAGE sql IMMUTABLE PARALLEL SAFE
		AS $$ SELECT date_trunc('minute', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' $$`,
	`CREATE TABLE IF NOT EXISTS {s}.job_history (
		minute  timestamptz NOT NULL,
		queue   text NOT NULL,
		outcome text NOT NULL,
		n       bigint NOT NULL,
		PRIMARY KEY (minute, queue, outcome)
	)`,
	`CREATE TABLE IF NOT EXISTS {s}.job_history_deltas (
		minute  timestamptz NOT NULL,
		queue   text NOT NULL,
		outcome text NOT NULL,
		n       bigint NOT NULL
	)`,
	finishJobsSQL(true, false),
}
