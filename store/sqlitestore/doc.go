// Package sqlitestore is sortie's embedded default store: every job in one
// SQLite file, no server. It uses modernc.org/sqlite, a pure-Go SQLite, so
// programs build without cgo.
//
//	st, err := sqlitestore.Open("sortie.db", nil)
//	if err != nil {
//		return err
//	}
//	defer st.Close()
//
// # Writes: one writer, group commit
//
// SQLite lets one connection write at a time, so a Store has exactly one
// write connection and one goroutine that owns it. Every write (enqueue,
// fetch, finish, lease extension, rescue, retry, cancel, delete, prune) is a
// request queued to that goroutine. It takes everything queued, runs it in
// one BEGIN IMMEDIATE transaction (each request in its own savepoint, so a
// failing request rolls back only itself and gets its own error), commits
// once and then answers every caller. Many concurrent callers therefore
// share one disk sync. A call returns only after the commit that holds its
// change. A caller whose context ends before the writer took its request
// gets the context's error and the request never runs; once taken, the
// request's answer is the truth and the call waits for it.
//
// Reads (JobGet, JobList, JobCounts, a short JobFetch's NextAt, QueueGet,
// QueueList, PeriodicList, JobWait) use a small pool of
// read-only connections and never wait for the writer (WAL mode).
//
// # Durability
//
// The database runs in WAL mode. With the default SynchronousFull, every
// commit syncs the write-ahead log, so a job whose enqueue returned survives
// a power cut or an operating-system crash. SynchronousNormal (opt-in) does
// not sync at commit: committed jobs survive a crash of the process, but the
// last commits before a power cut may be lost; the file stays consistent.
//
// Options.RelaxedClaims is a middle way: transactions that hold only claims,
// outcomes, lease extensions, rescues and prunes commit without a sync, while
// any transaction holding an enqueue or an admin change still syncs before
// its callers return. Because SQLite replays the log in order, that sync also
// makes every earlier relaxed commit durable; a power cut can only lose
// relaxed commits made since the last synced one, and such a job simply runs
// again (delivery is at-least-once). It is off by default because the
// durable settings already meet sortie's throughput targets; it raises the
// drain rate further (about 59,000 to 84,000 jobs/s through the runtime on a
// 2-core machine) at the cost of that window.
//
// # The write-ahead log
//
// The write-ahead log (the -wal file) stays under Options.WALSizeLimit, 64
// MiB by default. Every quarter of the limit, a checkpointer goroutine
// copies the log into the database file on its own connection,
// concurrently with the writer, so commits do not stall for that copy. A
// copy alone never lets the log start again from its beginning while the
// writer keeps appending (under steady load it grew to gigabytes), so once
// the copy is done the writer, between two groups, checkpoints the little
// written since with RESTART: it waits up to 100 ms for the readers still on
// older snapshots (reads are single statements, they finish within
// milliseconds), and the next commit writes the log from its start again.
// Past half the limit the writer does not wait for the concurrent copy. The
// writes pause for a few milliseconds (up to 100 ms when readers are slow)
// per quarter of the limit written; under a
// sustained mix of single enqueues, claims, single finishes and readers the
// log peaked at 17 to 27 MiB over 3 minutes, where it had grown by about
// 20 MiB a second (3.4 GB after 3 minutes of API load).
//
// On a disk with less room than the limit, the limit shrinks to half of the
// free space plus what the log file already holds, read at each restart:
// otherwise the log would fill the disk before a checkpoint was due, and
// no checkpoint could then complete, since copying the log into the
// database needs room too. Once a write failed for lack of space, nothing
// more is appended until the log has restarted: each write first tries the
// restart (at once when the disk has more room than at the failure, else
// at most once a second) and fails with an error saying so until it
// completes.
//
// A read transaction held open for long (in this or another process) pins
// the log: no checkpoint can restart it until the reader is done, so the
// log grows past the limit meanwhile, as it does for one write larger than
// the limit; the file is cut back to the limit at the next restart
// (journal_size_limit). Close copies the log into the database and
// truncates it, and the last connection to the file removes it, so the
// next Open has nothing to replay. Open does the same with a log left by a
// process that did not close the store.
//
// A write that fails because the disk is full (or on an I/O error) gets an
// error saying so; the writer then tries a restart before the next group,
// backing off up to a second between tries, so that once space returns the
// log reuses its file instead of growing into the freed space, and the
// store works again without a reopen.
//
// # Wake-ups across processes
//
// QueueWatch signals a worker in this process after this Store's commits
// at once, and after another process's within a few milliseconds, so a
// job enqueued by `sortie serve` or a web application starts in a worker
// process without waiting for its poll interval (enqueue to start: 1.6 to
// 2.2 ms at the median across two processes on a 2-core machine, where it
// followed the 1 s poll interval before, 529 ms). Every transaction that
// signals watchers (an enqueue, a retry, a rescue, a resume, an outcome
// that leaves a job to run again) also increments a wake counter in
// sortie_meta and, once committed, touches the -wal file (sets its times,
// which SQLite never does). A Store whose watched queue waits for work (it
// has watchers, and no fetch of it is known yet or some worker's last
// fetch of it came back short) listens for that touch with inotify on
// Linux, then reads the
// counter on a read connection of its own; a value it did not write itself
// signals all its watched queues (spurious signals are allowed; a worker
// answers one by fetching). Costs: one read of a row per such transaction
// in any process while workers wait, and a touch per such commit; nothing
// while the workers are busy or nobody watches. Where inotify is not
// available (other systems), the Store polls the counter every 5 ms while
// its workers wait, which costs a few percent of a core.
//
// # Layout
//
// Pending jobs (waiting, scheduled, available, running, retrying) live in a small hot
// table; a job that finishes moves to a table of finished jobs in the same
// transaction, where it stays for inspection until pruned. Counts per queue
// and state are kept in a counter table updated with every change, so
// JobCounts reads a few rows whatever the number of jobs. Times are stored
// as integer microseconds since the Unix epoch (so they round-trip with
// microsecond precision), durations in nanoseconds, errors and tags as JSON
// text, and args and meta as the exact bytes given.
//
// # Queue features
//
// Queue settings and pauses live in a queues table. The writer caches them
// and re-reads the table only when sortie_meta's queues_version changed,
// which it reads with the ID sequences at the start of a group; a queue
// without settings therefore costs no statement more per job, and a change
// made by another process is seen by the next group. Limits are enforced in
// the writer's transaction, so they hold across every process using the
// file:
//
//   - Pause: a paused queue's fetch returns nothing.
//   - MaxRunning: the running counter (plus this group's changes) caps the
//     claim.
//   - RateLimit per RatePeriod: one rate_starts row per start; a fetch
//     deletes the rows that left the window (now - period, now] and counts
//     the rest, so the window is exact, not bucketed. A release of a job
//     whose handler never started deletes its row.
//   - PartitionMaxRunning and PartitionRateLimit: the fetch lists the
//     partitions that have available jobs with a skip scan (one index seek
//     per partition), counts running jobs per partition through an index of
//     running keyed jobs, and reads from each partition with room only its
//     first few jobs (as many as its room), plus the first jobs without a key;
//     it merges them in (priority, RunAt, ID) order and claims the first
//     ones. A saturated partition costs one seek however long its backlog
//     (about 0.1 ms for a fetch with 100,000 jobs of a saturated tenant
//     queued); the fetch cost grows with the number of partitions that have
//     available jobs.
//   - MaxDepth: the queued counters decide at enqueue; OverflowDropOldest
//     cancels the lowest IDs among the queue's queued jobs.
//
// Dependencies: a waiting job has one job_deps row per unfinished
// dependency. Finishing a job probes job_deps for its dependents in the
// same transaction (skipped while the table is empty), releases those with
// nothing left to wait for and cancels, down the graph, those whose
// dependency failed, recording in finished_jobs.cancelled_by which
// dependency cancelled each. JobRetry reads that column through an index
// of only such jobs, so it finds the jobs to revive without reading
// others; a job retried while a dependency is dead waits for it with a
// job_deps row like any other. JobWait is woken by this process's commits
// and also polls every second, for jobs finished by another process.
//
// JobActMany acts on its batch in one write request, so one transaction
// and one sync. The jobs of the batch that stand alone (listed once, no
// unique key, no dependencies, no dependents) cannot see or change one
// another, so runs of them are moved with one statement per table and
// kind of move, each statement the single action's own applied to a list
// of IDs; any other job is acted on by itself, read afresh after what
// came before it. Retrying a million dead jobs through Client.JobsBulk
// takes about 40 s (docs/operations.md).
//
// A sortie_meta table records the schema version. Open creates the schema
// in an empty file, migrates an older one, and refuses a file that holds
// other tables (store.ErrNotSortieDatabase) or comes from a newer sortie
// (store.ErrSchemaNewer). Version 2 (the queue features) adds columns to
// the job tables and the job_deps, queues, rate_starts and periodic
// tables; version 3 splits the available jobs between a fetch index of jobs
// without a partition key and indexes of keyed jobs, so a job without a key
// costs one fetch-index entry, as before the queue features (a fetch from a
// queue holding keyed jobs merges both); version 4 adds
// finished_jobs.cancelled_by, filled in for jobs already cancelled by a
// dependency's ending. Older files are migrated in place when opened.
//
// # Limits
//
//   - One writer at a time: writes are serialized through one transaction at
//     a time (group commit makes that cheap, but write throughput is bound by
//     one CPU core and the disk's sync rate).
//   - Several processes may open the same file; they share the write lock,
//     waiting up to Options.BusyTimeout for it. QueueWatch signals cross
//     processes (see Wake-ups across processes); JobWait is woken by the
//     process's own writes and polls every second for the others'.
//   - The file must be on a local disk: SQLite's WAL mode needs shared memory
//     and does not work over a network file system.
package sqlitestore
