package pgstore

import (
	"fmt"

	"github.com/sortiehq/sortie/store"
)

// startAheadSQL is store.MaxStartAhead as an SQL interval: a fetch forgets
// the starts recorded two periods and this before its Now
// (ratelimit.Window.ForgetBefore).
var startAheadSQL = fmt.Sprintf("interval '%d microseconds'", store.MaxStartAhead.Microseconds())

// queueRoomSQL creates queue_room, the first steps of every fetch from a
// queue with limits, run under the queue's row lock its caller holds: it
// makes the queue's due scheduled and retrying jobs available (up to 1,000
// at a time, as claim_jobs does) and returns how many jobs the fetch may
// claim, p_limit less what the queue-wide limits hold back: MaxRunning
// less the running jobs, and RateLimit less the starts in the rate window,
// after deleting the starts the window lets go.
//
// It is the SQL form of fetchplan.QueueRoom and of
// ratelimit.Window's From (now - period) and ForgetBefore (now - 2
// periods - store.MaxStartAhead); TestLimitedSQLFollowsRules holds it to
// them at their edges.
// Settings are read as stored by encodeSettings (durations in ns).
var queueRoomSQL = `CREATE OR REPLACE FUNCTION {s}.queue_room(p_queue text, p_settings jsonb, p_limit bigint, p_now timestamptz)
	RETURNS bigint LANGUAGE plpgsql ` + planPins + ` AS $$
DECLARE
	max_running bigint := coalesce((p_settings->>'max_running')::bigint, 0);
	rate_limit bigint := coalesce((p_settings->>'rate_limit')::bigint, 0);
	period interval := make_interval(secs => coalesce((p_settings->>'rate_period')::bigint, 0) / 1e9);
	room bigint := p_limit;
	n bigint;
BEGIN
	UPDATE {s}.jobs SET state = 'available' WHERE id = ANY(ARRAY(
		SELECT id FROM {s}.jobs WHERE queue = p_queue AND state IN ('scheduled', 'retrying') AND run_at <= p_now
		ORDER BY run_at LIMIT 1000 FOR UPDATE SKIP LOCKED));
	IF max_running > 0 THEN
		SELECT count(*) INTO n FROM {s}.jobs WHERE queue = p_queue AND state = 'running';
		room := least(room, max_running - n);
	END IF;
	IF rate_limit > 0 AND room > 0 THEN
		DELETE FROM {s}.rate_starts WHERE queue = p_queue AND partition = '' AND at <= p_now - 2 * period - ` + startAheadSQL + `;
		SELECT coalesce(sum(r.n), 0) INTO n FROM {s}.rate_starts r
			WHERE r.queue = p_queue AND r.partition = '' AND r.at > p_now - period;
		room := least(room, rate_limit - n);
	END IF;
	RETURN room;
END $$`

// claimLimitedSQL creates claim_limited, the whole of a fetch from a queue
// whose limits are queue-wide (MaxRunning, RateLimit): under the queue's
// row lock, so the limits hold across processes, it takes the queue's
// room from queue_room (queueRoomSQL, shared with claim_partitioned),
// claims up to that many jobs in claim order, and records the starts (at
// the latest AttemptedAt: fetchplan.AttemptedAt). A
// paused queue gives nothing; one that has gained partition limits since
// the caller read its settings is claimed by claim_partitioned. The
// conformance suite's Limits cases hold the whole fetch.
var claimLimitedSQL = `CREATE OR REPLACE FUNCTION {s}.claim_limited(p_queue text, p_limit integer, p_now timestamptz,
		p_worker text, p_lease timestamptz, p_kinds text[])
	RETURNS SETOF {s}.jobs LANGUAGE plpgsql ` + planPins + ` AS $$
DECLARE
	q record;
	rate_limit bigint;
	room bigint;
BEGIN
	SELECT qq.paused, coalesce(qq.settings, '{}'::jsonb) AS settings INTO q
		FROM {s}.queues qq WHERE qq.name = p_queue FOR UPDATE;
	IF NOT FOUND OR q.paused THEN
		RETURN;
	END IF;
	IF q.settings ? 'partition_max_running' OR q.settings ? 'partition_rate_limit' THEN
		RETURN QUERY SELECT * FROM {s}.claim_partitioned(p_queue, p_limit, p_now, p_worker, p_lease, p_kinds);
		RETURN;
	END IF;
	room := {s}.queue_room(p_queue, q.settings, p_limit, p_now);
	rate_limit := coalesce((q.settings->>'rate_limit')::bigint, 0);
	IF room <= 0 THEN
		RETURN;
	END IF;
	RETURN QUERY WITH c AS (
		UPDATE {s}.jobs j SET state = 'running', attempt = j.attempt + 1,
				attempted_at = greatest(p_now, j.run_at, j.created_at),
				attempted_by = p_worker, lease_until = p_lease, waits_for = NULL,
				claim_token = (SELECT nextval('{s}.claim_token_seq'))
			WHERE j.id = ANY(ARRAY(
				SELECT id FROM {s}.jobs
				WHERE state = 'available' AND queue = p_queue AND (p_kinds IS NULL OR kind = ANY(p_kinds))
				ORDER BY priority, run_at, id
				LIMIT room
				FOR UPDATE SKIP LOCKED))
			RETURNING j.*
	), started AS (
		INSERT INTO {s}.rate_starts (queue, partition, at, n)
		SELECT p_queue, '', max(c.attempted_at), count(*) FROM c HAVING rate_limit > 0 AND count(*) > 0
	)
	SELECT * FROM c;
END $$`

// queueNextAtSQL creates queue_next_at, the next due time of a fetch that
// claimed less than its limit (see store.Store.JobFetch): the earliest
// RunAt of the queue's scheduled and retrying jobs or, when its RateLimit
// holds back due jobs at p_now, the time the window next allows a start if
// earlier. That time is ratelimit.Window.FreeAt in SQL: a period after the
// start that brings the count in the window below the limit.
var queueNextAtSQL = `CREATE OR REPLACE FUNCTION {s}.queue_next_at(p_queue text, p_now timestamptz)
	RETURNS timestamptz LANGUAGE plpgsql ` + planPins + ` AS $$
DECLARE
	due timestamptz;
	free timestamptz;
	rate_limit bigint;
	period interval;
	need bigint;
BEGIN
	due := (` + sqlFirstDue + `); -- $1 is p_queue
	SELECT coalesce((settings->>'rate_limit')::bigint, 0),
			make_interval(secs => coalesce((settings->>'rate_period')::bigint, 0) / 1e9)
		INTO rate_limit, period FROM {s}.queues WHERE name = p_queue;
	IF coalesce(rate_limit, 0) <= 0 THEN
		RETURN due;
	END IF;
	SELECT coalesce(sum(r.n), 0) - rate_limit + 1 INTO need FROM {s}.rate_starts r
		WHERE r.queue = p_queue AND r.partition = '' AND r.at > p_now - period;
	IF need <= 0 OR NOT EXISTS (SELECT 1 FROM {s}.jobs WHERE queue = p_queue AND
			(state = 'available' OR (state IN ('scheduled', 'retrying') AND run_at <= p_now))) THEN
		RETURN due;
	END IF;
	SELECT x.at + period INTO free FROM (
		SELECT r.at, sum(r.n) OVER (ORDER BY r.at) AS cum FROM {s}.rate_starts r
		WHERE r.queue = p_queue AND r.partition = '' AND r.at > p_now - period
	) x WHERE x.cum >= need ORDER BY x.at LIMIT 1;
	IF free IS NOT NULL AND (due IS NULL OR free < due) THEN
		RETURN free;
	END IF;
	RETURN due;
END $$`

// claimPartitionedSQL creates claim_partitioned, the whole of a fetch from
// a queue with partition limits (PartitionMaxRunning, PartitionRateLimit;
// queue-wide ones too): under the queue's row lock, so the limits hold
// across processes, it takes the queue's room from queue_room, picks the
// jobs with partition_heads, claims them and records the starts. A paused
// queue gives nothing; one that has lost its partition limits since the
// caller read its settings is claimed by claim_limited.
var claimPartitionedSQL = `CREATE OR REPLACE FUNCTION {s}.claim_partitioned(p_queue text, p_limit integer, p_now timestamptz,
		p_worker text, p_lease timestamptz, p_kinds text[])
	RETURNS SETOF {s}.jobs LANGUAGE plpgsql ` + planPins + ` AS $$
DECLARE
	q record;
	rate_limit bigint;
	part_rate bigint;
	room bigint;
	ids bigint[];
BEGIN
	SELECT qq.paused, coalesce(qq.settings, '{}'::jsonb) AS settings INTO q
		FROM {s}.queues qq WHERE qq.name = p_queue FOR UPDATE;
	IF NOT FOUND OR q.paused THEN
		RETURN;
	END IF;
	IF NOT (q.settings ? 'partition_max_running' OR q.settings ? 'partition_rate_limit') THEN
		RETURN QUERY SELECT * FROM {s}.claim_limited(p_queue, p_limit, p_now, p_worker, p_lease, p_kinds);
		RETURN;
	END IF;
	room := {s}.queue_room(p_queue, q.settings, p_limit, p_now);
	rate_limit := coalesce((q.settings->>'rate_limit')::bigint, 0);
	part_rate := coalesce((q.settings->>'partition_rate_limit')::bigint, 0);
	IF room <= 0 THEN
		RETURN;
	END IF;
	ids := {s}.partition_heads(p_queue, q.settings, room, p_now, p_kinds);
	IF coalesce(cardinality(ids), 0) = 0 THEN
		RETURN;
	END IF;
	RETURN QUERY WITH c AS (
		UPDATE {s}.jobs j SET state = 'running', attempt = j.attempt + 1,
				attempted_at = greatest(p_now, j.run_at, j.created_at),
				attempted_by = p_worker, lease_until = p_lease, waits_for = NULL,
				claim_token = (SELECT nextval('{s}.claim_token_seq'))
			WHERE j.id = ANY(ARRAY(
				SELECT x.id FROM unnest(ids) AS u(id)
				CROSS JOIN LATERAL (SELECT jj.id FROM {s}.jobs jj
					WHERE jj.id = u.id AND jj.state = 'available' AND jj.queue = p_queue
					FOR UPDATE SKIP LOCKED) x))
			RETURNING j.*
	), started AS (
		INSERT INTO {s}.rate_starts (queue, partition, at, n)
		SELECT p_queue, '', max(c.attempted_at), count(*) FROM c HAVING rate_limit > 0 AND count(*) > 0
		UNION ALL
		SELECT p_queue, c.partition_key, max(c.attempted_at), count(*) FROM c
			WHERE part_rate > 0 AND c.partition_key IS NOT NULL GROUP BY c.partition_key
	)
	SELECT * FROM c;
END $$`

// partitionHeadsSQL creates partition_heads, the IDs of up to p_room
// available jobs of a queue with partition limits (settings p_settings),
// in claim order, for claim_partitioned to claim. It reads the room of
// every partition at once: its running jobs and the starts in its rate
// window (after deleting those the window lets go). From each partition
// with available jobs (found by a skip scan, one index seek each) it reads
// at most its room of head jobs, however long its backlog, and the head
// jobs without a partition key up to p_room, and returns the first p_room
// of them in claim order: a partition at its limit holds back none of the
// others.
//
// It is the SQL form of fetchplan.PartitionRoom and
// fetchplan.MergeHeads; TestLimitedSQLFollowsRules holds it to them.
var partitionHeadsSQL = `CREATE OR REPLACE FUNCTION {s}.partition_heads(p_queue text, p_settings jsonb, p_room bigint,
		p_now timestamptz, p_kinds text[])
	RETURNS bigint[] LANGUAGE plpgsql ` + planPins + ` AS $$
DECLARE
	part_max bigint := coalesce((p_settings->>'partition_max_running')::bigint, 0);
	part_rate bigint := coalesce((p_settings->>'partition_rate_limit')::bigint, 0);
	part_period interval := make_interval(secs => coalesce((p_settings->>'partition_rate_period')::bigint, 0) / 1e9);
	run_counts jsonb := '{}';
	start_counts jsonb := '{}';
	ids bigint[];
BEGIN
	IF part_max > 0 THEN
		SELECT coalesce(jsonb_object_agg(r.partition_key, r.c), '{}') INTO run_counts FROM (
			SELECT partition_key, count(*) AS c FROM {s}.jobs
			WHERE queue = p_queue AND state = 'running' AND partition_key IS NOT NULL GROUP BY partition_key) r;
	END IF;
	IF part_rate > 0 THEN
		DELETE FROM {s}.rate_starts WHERE queue = p_queue AND partition <> '' AND at <= p_now - 2 * part_period - ` + startAheadSQL + `;
		SELECT coalesce(jsonb_object_agg(r.partition, r.c), '{}') INTO start_counts FROM (
			SELECT rs.partition, sum(rs.n) AS c FROM {s}.rate_starts rs
			WHERE rs.queue = p_queue AND rs.partition <> '' AND rs.at > p_now - part_period GROUP BY rs.partition) r;
	END IF;
	WITH RECURSIVE pk(k) AS (
		(SELECT partition_key FROM {s}.jobs WHERE queue = p_queue AND state = 'available' AND partition_key IS NOT NULL
			ORDER BY partition_key LIMIT 1)
		UNION ALL
		SELECT (SELECT partition_key FROM {s}.jobs WHERE queue = p_queue AND state = 'available' AND partition_key > pk.k
			ORDER BY partition_key LIMIT 1)
		FROM pk WHERE pk.k IS NOT NULL
	)
	SELECT array_agg(h.id ORDER BY h.priority, h.run_at, h.id) INTO ids FROM (
		SELECT hh.id, hh.priority, hh.run_at FROM pk
		CROSS JOIN LATERAL (SELECT greatest(least(p_room,
				CASE WHEN part_max > 0 THEN part_max - coalesce((run_counts->>pk.k)::bigint, 0) ELSE p_room END,
				CASE WHEN part_rate > 0 THEN part_rate - coalesce((start_counts->>pk.k)::bigint, 0) ELSE p_room END), 0) AS r) pr
		CROSS JOIN LATERAL (SELECT id, priority, run_at FROM {s}.jobs
			WHERE queue = p_queue AND state = 'available' AND partition_key = pk.k AND (p_kinds IS NULL OR kind = ANY(p_kinds))
			ORDER BY priority, run_at, id LIMIT pr.r) hh
		WHERE pk.k IS NOT NULL
		UNION ALL
		(SELECT id, priority, run_at FROM {s}.jobs
			WHERE queue = p_queue AND state = 'available' AND partition_key IS NULL AND (p_kinds IS NULL OR kind = ANY(p_kinds))
			ORDER BY priority, run_at, id LIMIT p_room)
	) h;
	RETURN ids[1:p_room];
END $$`
