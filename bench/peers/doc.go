// Package peers runs the workloads of `sortie bench` (package
// github.com/sortiehq/sortie/bench) against other job queues, so that
// sortie's figures can be read next to theirs on the same machine:
//
//   - River (github.com/riverqueue/river) with its pgx v5 driver, on
//     PostgreSQL, under three configurations (see RiverConfig);
//   - raw PostgreSQL baselines: a FOR UPDATE SKIP LOCKED delete loop and
//     one-row INSERTs, the ceiling any PostgreSQL queue works under;
//   - backlite (github.com/mikestefanello/backlite) on SQLite;
//   - asynq (github.com/hibiken/asynq) on Redis, under two configurations
//     (see AsynqConfig);
//   - BullMQ (Node.js) on Redis, run by node from bullmq/peerbench.js,
//     whose JSON result the Go side checks (see BullMQ).
//
// The Redis peers also run the memory workload (Memory): Redis's
// used_memory growth per enqueued job.
//
// It is a module of its own so that sortie's main module never depends on
// any peer. The workloads keep sortie's sizes and meanings (bench.Options'
// defaults) and sortie's exactly-once check: every job must run once, and
// the peer's tables must hold every job finished and none pending, or the
// run fails with a *bench.CheckError. Each run starts from an empty state: a
// new PostgreSQL schema migrated by rivermigrate for River, new tables for
// the raw baselines, a new SQLite file (or an empty one) for backlite, a new
// queue whose keys are deleted after the run for asynq and BullMQ.
//
// cmd/peerbench is the command; Main is all of it.
package peers
