// Package pgstore is a store.Store on PostgreSQL (pgx v5), for running
// sortie with many worker processes on many machines.
//
// Open connects and checks the schema; Migrate (or `sortie migrate`, or
// Options.Migrate) creates it and brings it up to date. Tables live in one
// schema, "sortie" unless Options.Schema names another, so one database can
// hold several independent sortie installations.
//
// How it keeps the hot paths short:
//   - A fetch is one round trip: a statement making due jobs available and
//     one claiming the first jobs in (priority, run_at, id) order with
//     FOR UPDATE SKIP LOCKED, pipelined. A queue with limits (MaxRunning,
//     rate or partition limits) locks its row in the queues table instead,
//     so the limits hold across every process, and claims in one call of
//     claim_limited or claim_partitioned (3 statements, 4 when short,
//     however many partitions have work).
//   - A batch of outcomes is one UPDATE from arrays, fenced by claim token.
//     Outcomes, lease extensions and progress reach the database in job ID
//     order, the order every statement locks jobs in (dependents too), so
//     a heartbeat and a finish of the same jobs never deadlock. A deadlock
//     or serialization failure that happens anyway is retried inside the
//     store, a few times, and is not reported as an outage.
//   - An enqueue is one INSERT from arrays that also takes the IDs; a batch
//     of 64 jobs or more without unique keys goes through COPY instead.
//     Concurrent small enqueues share one statement (see combine.go).
//     Unique keys are a partial unique index.
//   - Partial indexes hold only the rows each query reads, so fetch, rescue
//     and counts stay fast with millions of finished jobs in the table.
//   - Job counts are kept by statement triggers appending deltas, folded
//     into counters by maintenance, so JobCounts reads no job rows.
//   - Dependencies: job_deps holds a row per dependency a waiting job waits
//     for, and has_dependents flags the jobs some job depends on, so only
//     their outcomes take the path that releases or cancels dependents. A
//     dependent cancelled by a dependency's ending records it in
//     cancelled_by (version 4), and JobRetry of that dependency finds the
//     jobs to revive through an index of only such jobs.
//   - An import (JobImport) is one transaction of a few round trips per
//     call, whatever its size: the jobs under its IDs and the holders of
//     its unique keys read in one query each, its rows written by one COPY.
//   - Wake-ups use LISTEN/NOTIFY: enqueues and retries NOTIFY the queue,
//     one listener connection per Store fans them out. Workers also keep a
//     poll as a fallback; while the listener is down they are signalled
//     every second until it reconnects.
//
// Store.Tx makes a store.Tx of the application's own pgx.Tx, so a job is
// enqueued (or completed) if and only if the application's transaction
// commits; the client's EnqueueTx, EnqueueManyTx and CompleteTx take it. A
// completion inside the application's transaction holds the job's row lock
// until it ends.
//
// Limits: behind a transaction-mode connection pooler (PgBouncer
// pool_mode=transaction) LISTEN does not work; set Options.DisableListen
// (workers then poll at Config.PollInterval) and add
// default_query_exec_mode=exec to the URL if the pooler does not support
// prepared statements. A fetch from a queue with partition limits reads
// the head jobs of each partition with work through an index, but finds
// the jobs without a partition key by walking the queue's available jobs
// past the keyed ones: its cost grows with the queue's available backlog
// (an index of only unkeyed jobs would bound it, at a cost to every enqueue
// and claim of other queues). Give a partitioned queue's jobs a key, or
// keep its backlog moderate. JobWait is woken at once by finishes in the same
// process and polls (10 ms growing to 500 ms) for finishes in others.
package pgstore
