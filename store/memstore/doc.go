// Package memstore is an in-memory [store.Store]: fast, safe for concurrent
// use, and gone when the process exits. It serves tests, ephemeral work and
// sortietest.
//
// Its limits:
//   - Nothing survives the process: "committed" means held in this process's
//     memory, so a crash or exit loses every job, queue setting and periodic
//     schedule.
//   - One process only: the store is shared by the goroutines that hold the
//     same *Store, never across processes, so queue limits (pause,
//     MaxRunning, rate limits) hold across the clients of one process.
//   - Everything lives in memory, finished jobs included until JobPrune
//     removes them. Jobs enqueued in one call are allocated in groups of up
//     to 11 (slabJobs), so a removed job's own 592 bytes are freed with the
//     last of its group (its args, errors and result at once).
//
// # Costs
//
// All operations run under one mutex and cost O(log n) or better per job,
// except JobList with filters, which walks jobs in ID order (skipping blocks
// of 1,024 IDs that hold no job in the wanted state).
//
// Queue features cost nothing per job when they are not used: a queue
// without settings fetches straight from its lanes. Otherwise:
//   - Pause, MaxRunning and RateLimit cap a fetch in O(1); the rate limit
//     keeps a log of the starts in its sliding window (at most RateLimit
//     entries), so a short JobFetch's NextAt can name the instant it allows
//     the next.
//   - Jobs with a PartitionKey live in their partition's own lanes. A fetch
//     from a queue with partitioned jobs looks at each partition that has
//     pending jobs (skipping one at its limit without reading its jobs) and
//     merges the rest through a heap: O(P + k log P) for P partitions and k
//     claimed jobs, however long a partition's backlog.
//   - Dependencies: a waiting job counts its unfinished dependencies, and
//     each dependency lists its waiting dependents, so an outcome touches
//     only its own dependents (and theirs, down a cancelled graph). A job
//     that ended dead or cancelled lists the dependents its ending
//     cancelled, so JobRetry revives them without looking at other jobs.
//   - MaxDepth is checked from the queue's counters; OverflowDropOldest
//     walks jobs in ID order from the lowest, skipping blocks of IDs with
//     no queued job.
//   - JobWait sleeps on a channel of the job's own, closed when it finishes
//     or is deleted.
package memstore
