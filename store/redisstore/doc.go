// Package redisstore is a sortie store on Redis 7 or later, standalone or
// Redis Cluster, through go-redis v9. It keeps every guarantee of package
// store (README.md, Guarantees; docs/ARCHITECTURE.md says where each is
// enforced) and passes the whole conformance suite (store/storetest) on
// one server and on a 3-primary cluster.
//
//	st, err := redisstore.Open(ctx, "redis://127.0.0.1:6379/0", nil)
//
// # One script call per state change
//
// Every change of a job is one call (FCALL) of one function of a Functions
// library, sortie.lua, which Open loads and versions: enqueue a batch
// (a plain batch, with no unique key or dependency, by sortie_add, which
// writes a job with one HSET; on one server the plain batches of
// concurrent callers share a call), claim up to N jobs (the server issues
// the fencing tokens, and returns the jobs when it claimed at most 4),
// finish a batch of outcomes (each checked against its token on the
// server: a stale worker's outcome is refused; completions by
// sortie_complete, which writes only what changes), extend leases, rescue
// expired leases,
// cancel, retry or delete one job or a batch of them (JobActMany: one
// call per key group), prune, configure, pause, import, advance a periodic
// schedule. Redis runs a function atomically, so a batch enqueue is
// atomic, and an outcome, its job's unique key, its dependents and the
// queue's counts change in one step. The library's header lists every key
// and each function documents its keys, arguments and replies. Every loop
// in it is bounded. The times a job carries (RunAt, lease expiries,
// CreatedAt, FinalizedAt) and what is due come from the callers' params,
// never from the server's clock or one worker's against another's. The
// library reads the server's clock (TIME) for two things only: the floor
// of new job IDs and claim tokens (see Durability), and the expiry of
// waiting claims (see Wake-ups). Open refuses a server holding a newer
// version of the library (ErrLibraryNewer), and replaces an older one.
//
// # Data layout
//
// A queue belongs to a key group (Options.Group; by default its name up to
// the first ':', so "mail:high" and "mail:low" share one). Every key of the
// queue carries the group's hash tag, and so does every key of its jobs on
// Redis Cluster, where a queue and its jobs live on one slot (on one
// server a job's hash is PREFIX:j:ID). Job IDs and claim tokens never
// repeat, even after Redis lost its last writes (see Durability). Per
// queue:
//
//   - available jobs in lanes, one per priority, kind and partition key,
//     ordered by (priority, RunAt, ID): a list of the jobs that arrived in
//     that order (most) and a sorted set of those that did not, with a set
//     of the lanes' heads: a claim reads the heads in order, skips lanes of
//     kinds it does not work and partitions at their limit, and takes a
//     run of jobs from a lane's fronts, so one tenant's backlog never
//     makes a fetch read it;
//   - scheduled and retrying jobs in a set by RunAt (a fetch moves those
//     due to their lanes);
//   - running jobs in a set by lease expiry: rescue reads only the expired
//     range (O(log N + k)) and finishing a job is O(log N), never a scan;
//   - one index of IDs per state, in buckets of up to 32 IDs (small
//     sorted sets, a listpack each), which lists jobs in ID order, with
//     the states' counts beside it, both written in the same function
//     call as each change;
//   - finished jobs, per state, in a list in the order they finished (a
//     sorted set by FinalizedAt for those that finished out of order),
//     which pruning reads oldest first;
//   - the queue's settings and pause, its recent starts (sliding-window
//     rate limits, queue-wide and per partition) and running jobs per
//     partition, shared by every process.
//
// A unique key maps to the ID of its pending holder until the job leaves
// the pending states, whatever the job's run time (no TTL).
//
// An imported job (Store.JobImport) keeps the ID another store gave it,
// and lives in its queue's group like any other. When that ID gives
// another group, the hash P:fid maps the ID to the job's group, and reads
// that start from an ID look there when the job is not where its ID says
// (one more read). P:fid holds one entry per such job until the job is
// deleted or pruned.
//
// # Wake-ups
//
// A worker pool of one queue that finds it empty waits on the server
// (JobFetchWait, store.FetchWaiter): sortie_claim_wait registers it as a
// waiter of the queue, and it blocks on a list of its own (BLPOP). The
// call that makes a job available claims it for the waiter in its own
// step and pushes it to that list, or wakes the waiter to fetch again
// when it may not take the job. At most half the connection pool blocks
// so at once; other pools, pools of several queues, and every pool of a
// server that refuses BLPOP wait on the queue's shard channel instead:
// the library publishes there (SPUBLISH) when jobs become available or a
// running slot frees up in a limited queue, and a worker subscribed to it
// fetches. A worker sets a timer for the next RunAt a fetch returns
// (store.JobFetchResult.NextAt). Finished jobs are announced on their
// group's channel, which JobWait listens to. A subscription lost to a
// disconnection is made again, and the reconnection wakes every watcher,
// since messages sent meanwhile are lost. Workers also fetch at
// Config.PollInterval regardless.
//
// # Durability
//
// An enqueue returns once Redis acknowledged it. What that survives is
// Redis's persistence setting, which sortie does not change:
//
//   - appendonly yes, appendfsync always: Redis writes and fsyncs the
//     append-only file before it replies, so an acknowledged enqueue
//     survives a crash of the server or the machine. Tested: kill -9 of
//     the server under load loses none (TestCrashLosesNoAcknowledged...).
//   - appendonly yes, appendfsync everysec (Redis's default when AOF is
//     on): Redis writes the file before it replies and fsyncs once a
//     second, so killing the server process loses nothing (measured: 0 of
//     about 2,000 acknowledged enqueues in TestCrashLossWindow...), but a
//     machine crash or power loss can lose about the last second of
//     acknowledged writes (two when the disk stalls).
//   - without AOF (RDB snapshots only, or nothing): a crash loses
//     everything since the last snapshot. Do not run jobs you must not
//     lose this way.
//
// A crash that loses acknowledged writes rolls jobs back whole: enqueued
// jobs vanish and finished ones may run again (at-least-once holds). It
// never makes an ID or a claim token be handed out twice: each is at least
// the last plus one and at least the server's clock in microseconds, and
// one from a counter that the library's state may not have written last
// (after the state starts, on a replica promoted, after a failover back
// to a server, which its counters or its replication ID show) at least
// the clock plus 10 s (sortie.lua's new_values states the rule and its
// bounds). So fencing holds across the rollback:
// TestPowerCutRepeatsNoIDOrToken simulates power cuts with an LD_PRELOAD
// shim that keeps the append-only file's writes in memory until Redis
// fsyncs them, and TestFailoverBackRepeatsNoIDOrToken fails over to a
// replica and back.
//
// Open checks that the server's maxmemory-policy is noeviction and refuses
// any other: every other policy lets Redis delete keys when memory runs
// short, and a deleted key is a lost job. ServerCheck reads the policy and
// the persistence settings again (CONFIG GET, or INFO where CONFIG is
// denied), and a started client calls it on every maintenance round, so a
// setting changed at run time is logged and shown. With noeviction a full
// server refuses writes, and enqueues fail with its error instead; the
// functions that only delete or shrink (cancel, delete, prune, release)
// still run, so sortie can empty it.
//
// # Redis Cluster
//
// Open with a URL naming more nodes (redis://h1:p1?addr=h2:p2&addr=h3:p3)
// opens a cluster. Every function call touches one slot: a queue's
// operations always do. What spans queues has a rule, enforced:
//
//   - a batch, a workflow or chain, and a dependency must stay within one
//     key group; otherwise the enqueue fails with ErrCrossGroup and
//     nothing is enqueued (name related queues "app:a", "app:b", or set
//     Options.Group);
//   - a durable step's spawn (store.Store.StepSpawn) enqueues children in
//     its parent's key group only, so that each child's outcome updates
//     the parent's step, and releases an awaiting parent, in the same
//     call; a spawn into another group fails with ErrCrossGroup and
//     enqueues nothing;
//   - a unique key is unique within its key group (on one server, within
//     the whole store);
//   - a periodic schedule keeps its state in its jobs' group;
//   - an import writes each group's jobs in calls of their own, each all
//     or nothing, after checking every job first (see Store.JobImport);
//     a job linked to a job of another group is refused with
//     ErrCrossGroup, and nothing is written;
//   - job IDs come from one counter (a call of sortie_ids before the
//     enqueue call), and listings and counts read every queue's keys; a
//     job's group is found from what the store saw (enqueued, claimed,
//     listed) or, for others, in its queues' groups.
//
// # Not supported
//
// Enqueueing or finishing inside the application's own transaction
// (store.Tx) needs a database the application writes to; redisstore makes
// no store.Tx.
package redisstore
