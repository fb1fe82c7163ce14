package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sortiehq/sortie/internal/notify"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/jobhistory"
	"github.com/sortiehq/sortie/store/internal/transition"
)

// maxGroup is the most requests one group transaction takes. It bounds how
// long the write lock is held; the rest wait for the next group.
const maxGroup = 512

// The life of a request: queued until the writer takes it, or abandoned by a
// caller whose context ended first (then it never runs).
const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

// request is one caller's write. The writer runs op inside the group
// transaction (within a savepoint when the group has other requests), then
// answers through done after the commit. op reports its results through
// variables it captured; they are read only when err is nil.
type request struct {
	op func(t *txn, r *request) error
	// durable marks a request whose changes must be synced before its caller
	// returns (enqueues and admin changes), even with relaxed claims.
	durable bool

	state atomic.Int32
	done  chan struct{}
	err   error

	// counts and notify are what op did: counter deltas, added to the
	// group's when op succeeds, and queues whose watchers are told after
	// the commit.
	counts []countDelta
	notify []string
	// ended are jobs that finished or were deleted: their JobWait callers
	// are woken after the commit.
	ended []int64
	// history are op's history counts, added to the group's with counts.
	history jobhistory.Tally
}

// counted records in the history a job of queue entering state next at
// now, after a failed attempt when failed (see transition.OutcomeOf).
func (r *request) counted(queue string, now time.Time, next store.JobState, failed bool) {
	if o, ok := transition.OutcomeOf(next, failed); ok {
		r.history.Add(queue, now, o, 1)
	}
}

// countDelta is a change of the number of jobs of one queue in one state.
type countDelta struct {
	queue string
	state store.JobState
	n     int64
}

// count records that n jobs of queue entered (n > 0) or left (n < 0) state.
func (r *request) count(queue string, state store.JobState, n int64) {
	for i := range r.counts {
		if c := &r.counts[i]; c.queue == queue && c.state == state {
			c.n += n
			return
		}
	}
	r.counts = append(r.counts, countDelta{queue: queue, state: state, n: n})
}

// wake records that queue's watchers should be signalled after the commit.
func (r *request) wake(queue string) {
	for _, q := range r.notify {
		if q == queue {
			return
		}
	}
	r.notify = append(r.notify, queue)
}

// writer owns the one write connection. Callers queue requests; its
// goroutine takes everything queued, runs it in one transaction, commits
// once and answers every caller (group commit).
type writer struct {
	conn  *sql.Conn
	ckpt  *checkpointer
	waker *waker
	stmts *writeStmts
	// busyTimeout is the longest a group waits for another process's
	// write transaction (Options.BusyTimeout); see begin.
	busyTimeout time.Duration
	hub         *notify.Hub
	jobs        *jobHub
	path        string

	// queues caches the settings and pause state of the configured queues,
	// as of sortie_meta's queues_version queuesVersion (read with the
	// sequences at the start of every group that needs them, so a change
	// by another process is seen by the next group). -1 means not loaded.
	queues        map[string]*queueState
	queuesVersion int64

	// fullSync: the store's standard is synchronous=FULL. relaxed: groups
	// with no durable request commit with NORMAL (see Options.RelaxedClaims).
	fullSync bool
	relaxed  bool
	// syncFull is the connection's current synchronous setting.
	syncFull bool

	wake   chan struct{}
	exited chan struct{}
	// groups counts committed group transactions (for tests and metrics).
	groups atomic.Int64

	// queuedHook, when set (by tests, before any request), is called with
	// the queue length after each request is queued; busyHook, after each
	// try of begin that found another connection writing.
	queuedHook func(n int)
	busyHook   func()

	// mu guards queue and closed.
	mu     sync.Mutex
	queue  []*request
	spare  []*request
	closed bool
}

// do queues r and waits for its answer. A caller whose ctx ends before the
// writer took r gets ctx.Err() and r never runs; once taken, r's answer is
// authoritative and do waits for it (a commit is a few milliseconds at most).
func (w *writer) do(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.done = make(chan struct{})
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return store.ErrClosed
	}
	w.queue = append(w.queue, r)
	n := len(w.queue)
	w.mu.Unlock()
	if w.queuedHook != nil {
		w.queuedHook(n)
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return ctx.Err()
		}
		<-r.done
		return r.err
	}
}

// close stops taking requests, lets the writer finish those already queued
// and waits for it to exit.
func (w *writer) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	<-w.exited
}

// loop is the writer goroutine. ctx is not any caller's: a group runs to its
// end whatever happens to the callers in it.
func (w *writer) loop(ctx context.Context) {
	defer close(w.exited)
	for {
		w.mu.Lock()
		for len(w.queue) == 0 {
			if w.closed {
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
			<-w.wake
			w.mu.Lock()
		}
		group := w.queue
		if len(group) > maxGroup {
			w.queue = append(w.spare[:0], group[maxGroup:]...)
			group = group[:maxGroup]
		} else {
			w.queue = w.spare[:0]
		}
		w.mu.Unlock()

		w.runGroup(ctx, group)

		clear(group)
		w.mu.Lock()
		w.spare = group[:0]
		w.mu.Unlock()
	}
}

// runGroup runs the requests of one group in one transaction.
func (w *writer) runGroup(ctx context.Context, group []*request) {
	taken := group[:0]
	durable := false
	for _, r := range group {
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			taken = append(taken, r)
			durable = durable || r.durable
		}
	}
	if len(taken) == 0 {
		return
	}
	err := w.ckpt.beforeGroup(ctx)
	if err != nil {
		err = w.wrap(err)
	} else {
		err = w.runTxn(ctx, taken, durable)
	}
	failed := diskTrouble(err)
	for _, r := range taken {
		if err != nil && r.err == nil {
			r.err = err
		}
		if r.err == nil {
			for _, q := range r.notify {
				w.hub.Notify(q)
			}
			w.jobs.notify(r.ended)
		}
		failed = failed || diskTrouble(r.err)
		close(r.done)
	}
	w.ckpt.afterGroup(ctx, pagesWritten(w.conn), failed)
}

// runTxn runs taken in one transaction. A request whose op fails gets its
// own error and its changes are rolled back to its savepoint; the returned
// error, when not nil, failed the whole group (nothing was committed).
func (w *writer) runTxn(ctx context.Context, taken []*request, durable bool) error {
	wantFull := w.fullSync && (durable || !w.relaxed)
	if wantFull != w.syncFull {
		// Not a prepared statement: SQLite applies this pragma when it
		// compiles it, so re-running a prepared one changes nothing.
		q := sqlSyncNormal
		if wantFull {
			q = sqlSyncFull
		}
		if _, err := w.conn.ExecContext(ctx, q); err != nil {
			return w.wrap(err)
		}
		w.syncFull = wantFull
	}
	if err := w.begin(ctx); err != nil {
		return w.wrap(err)
	}
	t := &txn{ctx: ctx, w: w}
	savepoints := len(taken) > 1
	for _, r := range taken {
		if savepoints {
			if _, err := w.stmts.savepoint.ExecContext(ctx); err != nil {
				return w.abort(ctx, err)
			}
		}
		t.cancelledBy = cbUnknown
		err := runOp(t, r)
		if err == nil && len(r.ended) > 0 {
			err = releaseAwaits(t, r)
		}
		if err != nil {
			r.err = w.wrap(err)
			if !savepoints {
				return w.abort(ctx, nil)
			}
			if _, rerr := w.stmts.rollbackTo.ExecContext(ctx); rerr != nil {
				// SQLite rolled the whole transaction back (it may on
				// SQLITE_FULL or I/O errors): every request fails.
				return w.abort(ctx, fmt.Errorf("transaction rolled back: %w", err))
			}
		} else {
			t.addCounts(r)
		}
		if savepoints {
			if _, err := w.stmts.release.ExecContext(ctx); err != nil {
				return w.abort(ctx, err)
			}
		}
	}
	// Counters, history, sequences and the wake counter are written once
	// for the whole group; if that fails, the group fails as a whole.
	if err := t.saveCounts(); err != nil {
		return w.abort(ctx, err)
	}
	if err := t.saveHistory(); err != nil {
		return w.abort(ctx, err)
	}
	if err := t.saveSequences(); err != nil {
		return w.abort(ctx, err)
	}
	if err := t.saveWake(taken); err != nil {
		return w.abort(ctx, err)
	}
	if _, err := w.stmts.commit.ExecContext(ctx); err != nil {
		w.waker.forget(t.wakeSeq)
		return w.abort(ctx, err)
	}
	if t.wakeSeq != 0 {
		w.waker.touch()
	}
	w.groups.Add(1)
	return nil
}

// The pauses between two tries of begin, doubling from the first to the
// last and jittered.
const (
	minBusyPause = 50 * time.Microsecond
	maxBusyPause = time.Millisecond
)

// begin starts the group's write transaction, waiting at most
// w.busyTimeout for another process that holds SQLite's one write lock.
//
// The writer's connection has no busy timeout of its own: SQLite's busy
// handler sleeps up to 100 ms between tries, and a process whose writer
// commits group after group leaves the lock free only for the moments
// between two of them, which a waiter asleep that long keeps missing. With
// three worker processes on one file under load, a process waited over
// 10 s that way, long enough for its leases to expire while it lived.
// Trying again within a millisecond finds those moments.
func (w *writer) begin(ctx context.Context) error {
	deadline := time.Now().Add(w.busyTimeout)
	for pause := minBusyPause; ; pause = min(2*pause, maxBusyPause) {
		_, err := w.stmts.begin.ExecContext(ctx)
		if sqliteCode(err) != sqlite3.SQLITE_BUSY || !time.Now().Before(deadline) {
			return err
		}
		if w.busyHook != nil {
			w.busyHook()
		}
		// Jittered, so that waiting processes do not try in step.
		time.Sleep(pause/2 + rand.N(pause))
	}
}

// runOp runs r's op, turning a panic into an error so that a bug in one
// request cannot stop the writer and leave every caller waiting.
func runOp(t *txn, r *request) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("internal error in write request: %v", p)
		}
	}()
	return r.op(t, r)
}

// abort rolls the transaction back and returns err wrapped (nil stays nil).
func (w *writer) abort(ctx context.Context, err error) error {
	_, _ = w.conn.ExecContext(ctx, `ROLLBACK`)
	w.queuesVersion = -1 // the cache may hold a rolled-back change
	if err == nil {
		return nil
	}
	return w.wrap(err)
}

// wrap adds the database path and a plain explanation to SQLite errors.
func (w *writer) wrap(err error) error {
	return wrapRunErr(w.path, err)
}

// txn is the state of one group transaction, shared by its requests.
type txn struct {
	ctx context.Context
	w   *writer

	// The sequences, read once per transaction under the write lock (another
	// process may have advanced them) and written back before the commit.
	seqLoaded         bool
	nextID, nextToken int64
	idDirty, tokDirty bool
	idsBuf            []byte

	// hasDeps: job_deps had rows when the sequences were read, or this
	// group added some. Without it, finishing jobs skips the dependents
	// probe.
	hasDeps bool
	// spawned: a job was ever spawned (sortie_meta's spawned), so jobs
	// leaving the pending states may release a parent (releaseAwaits).
	spawned bool
	// cancelledBy says whether a finished job has a cancelled_by (the
	// dependency whose ending cancelled it), as far as the running request
	// knows: cbUnknown until anyCancelledBy reads it, cbSome once the
	// request marked one. Without one, a retry skips the revival probe.
	cancelledBy int8

	// counts are the counter deltas of the requests that succeeded so far,
	// history their history counts.
	counts  []countDelta
	history jobhistory.Tally
	// wakeSeq is the wake counter's value this transaction wrote (see
	// waker), 0 if it wrote none.
	wakeSeq int64
}

// loadSequences reads the ID and claim-token sequences.
func (t *txn) loadSequences() error {
	if t.seqLoaded {
		return nil
	}
	var qv int64
	if err := t.w.stmts.sequences.QueryRowContext(t.ctx).Scan(&t.nextID, &t.nextToken, &qv, &t.hasDeps, &t.spawned); err != nil {
		return fmt.Errorf("read sequences: %w", err)
	}
	if qv != t.w.queuesVersion {
		if err := t.reloadQueues(qv); err != nil {
			return err
		}
	}
	t.seqLoaded = true
	return nil
}

// queue returns the shared state of a queue, nil for a queue with no
// settings and no pause. It reads the database at most once per group.
func (t *txn) queue(name string) (*queueState, error) {
	if err := t.loadSequences(); err != nil {
		return nil, err
	}
	return t.w.queues[name], nil
}

// allocIDs reserves n job IDs and returns the first. IDs of a request that
// is rolled back are not reused; gaps are harmless.
func (t *txn) allocIDs(n int) (int64, error) {
	if err := t.loadSequences(); err != nil {
		return 0, err
	}
	first := t.nextID
	t.nextID += int64(n)
	t.idDirty = true
	return first, nil
}

// peekToken returns the next claim token without taking it, so a fetch
// that claims nothing writes nothing.
func (t *txn) peekToken() (int64, error) {
	if err := t.loadSequences(); err != nil {
		return 0, err
	}
	return t.nextToken, nil
}

// takeToken takes the token peekToken returned.
func (t *txn) takeToken() {
	t.nextToken++
	t.tokDirty = true
}

// saveSequences writes back the sequences this transaction advanced.
func (t *txn) saveSequences() error {
	if t.idDirty {
		if _, err := t.w.stmts.setSequence.ExecContext(t.ctx, "next_job_id", t.nextID); err != nil {
			return err
		}
	}
	if t.tokDirty {
		if _, err := t.w.stmts.setSequence.ExecContext(t.ctx, "next_claim_token", t.nextToken); err != nil {
			return err
		}
	}
	return nil
}

// addCounts adds the counter deltas and history counts of r, which
// succeeded, to the group's.
func (t *txn) addCounts(r *request) {
	for _, c := range r.counts {
		t.count(c)
	}
	if r.history.Len() > 0 {
		t.history.Merge(&r.history)
	}
}

// count adds one delta to the group's.
func (t *txn) count(d countDelta) {
	for i := range t.counts {
		if c := &t.counts[i]; c.queue == d.queue && c.state == d.state {
			c.n += d.n
			return
		}
	}
	t.counts = append(t.counts, d)
}

// saveCounts writes the group's counter deltas, one statement per queue
// and state changed.
func (t *txn) saveCounts() error {
	for _, c := range t.counts {
		if c.n == 0 {
			continue
		}
		if _, err := t.w.stmts.countAdd.ExecContext(t.ctx, c.queue, string(c.state), c.n); err != nil {
			return fmt.Errorf("update counts: %w", err)
		}
	}
	return nil
}

// saveHistory writes the group's history counts, one upsert per minute,
// queue and outcome touched.
func (t *txn) saveHistory() error {
	for _, h := range t.history.Rows() {
		if _, err := t.w.stmts.historyAdd.ExecContext(t.ctx, micros(h.At), h.Queue, string(h.Outcome), h.Count); err != nil {
			return fmt.Errorf("update history: %w", err)
		}
	}
	return nil
}

// idList returns ids as a JSON array for json_each, in a buffer reused
// within the transaction.
func (t *txn) idList(ids []int64) string {
	t.idsBuf = appendIDs(t.idsBuf[:0], ids)
	return string(t.idsBuf)
}

// writeStmts are the statements of the write connection, prepared once.
type writeStmts struct {
	// all holds every statement, for close: database/sql does not close the
	// statements of a sql.Conn, and SQLite keeps a connection with
	// statements left open alive after Close, holding the -wal file.
	all []*sql.Stmt

	begin, commit                       *sql.Stmt
	savepoint, release, rollbackTo      *sql.Stmt
	sequences, setSequence, countAdd    *sql.Stmt
	uniqueHolder                        *sql.Stmt
	insert, insertPlain                 [len(insertChunks)]*sql.Stmt
	dueCount, promoteDue                *sql.Stmt
	claim, claimKinds                   *sql.Stmt
	claimMerged, claimMergedKinds       *sql.Stmt
	runningOf, completeMany, deleteMany *sql.Stmt
	finishOne, deleteOne, moveOne       *sql.Stmt
	leaseExtend, expired                *sql.Stmt
	getPending, getFinished             *sql.Stmt
	actTargets, dependedOn              *sql.Stmt
	cancelledByAny, finishMany          *sql.Stmt
	deleteFinishedMany                  *sql.Stmt
	retryPending, retryFinished         *sql.Stmt
	deleteFinished                      *sql.Stmt
	prune                               [3]*sql.Stmt

	setResult, cancelRequest                           *sql.Stmt
	claimIDs, countOf, queuedCount, oldestQueued       *sql.Stmt
	runningPartitions, availablePartitions             *sql.Stmt
	partitionHeads, partitionHeadsKinds                *sql.Stmt
	unpartitionedHeads, unpartitionedHeadsKinds        *sql.Stmt
	rateCount, ratePrune, rateAdd                      *sql.Stmt
	rateGiveBack, startOf                              *sql.Stmt
	jobState, depAdd, dependentsOf                     *sql.Stmt
	depsDeleteDeps, depsDeleteJob, depsLeft, makeReady *sql.Stmt
	markCancelledBy, cancelledBecause, reviveFinished  *sql.Stmt
	anyCancelledBy                                     *sql.Stmt
	queuesAll, queueGet, queueConfigure, queuePause    *sql.Stmt
	queueDropped, queuesBump, periodicGet, periodicSet *sql.Stmt
	wakeBump                                           *sql.Stmt
	historyAdd, historyPrune                           *sql.Stmt
	steps                                              stepStmts
}

// prepareWrite prepares the write statements on conn.
func prepareWrite(ctx context.Context, conn *sql.Conn) (*writeStmts, error) {
	p := &preparer{ctx: ctx, conn: conn, s: &writeStmts{}}
	p.transactionsAndEnqueue()
	p.claimsAndOutcomes()
	p.admin()
	p.limitsDepsAndQueues()
	p.steps()
	return p.s, p.err
}

// preparer prepares the writer's statements, keeping the first error.
type preparer struct {
	ctx  context.Context
	conn *sql.Conn
	s    *writeStmts
	err  error
}

// prep prepares q, or does nothing after an error.
func (p *preparer) prep(q string) *sql.Stmt {
	if p.err != nil {
		return nil
	}
	st, err := p.conn.PrepareContext(p.ctx, q)
	if err != nil {
		p.err = fmt.Errorf("prepare %q: %w", q, err)
		return nil
	}
	p.s.all = append(p.s.all, st)
	return st
}

// transactionsAndEnqueue prepares transaction control, sequences, counts
// and inserts.
func (p *preparer) transactionsAndEnqueue() {
	p.s.begin = p.prep(`BEGIN IMMEDIATE`)
	p.s.commit = p.prep(`COMMIT`)
	p.s.savepoint = p.prep(sqlSavepoint)
	p.s.release = p.prep(sqlRelease)
	p.s.rollbackTo = p.prep(sqlRollbackTo)
	p.s.sequences = p.prep(sqlSequences)
	p.s.setSequence = p.prep(sqlSetSequence)
	p.s.countAdd = p.prep(sqlCountAdd)
	p.s.uniqueHolder = p.prep(sqlUniqueHolder)
	for i, n := range insertChunks {
		p.s.insert[i] = p.prep(insertSQL(n, false))
		p.s.insertPlain[i] = p.prep(insertSQL(n, true))
	}
}

// claimsAndOutcomes prepares the claim, finish and lease statements.
func (p *preparer) claimsAndOutcomes() {
	p.s.dueCount = p.prep(sqlDueCount)
	p.s.promoteDue = p.prep(sqlPromoteDue)
	p.s.claim = p.prep(sqlClaim)
	p.s.claimKinds = p.prep(sqlClaimKinds)
	p.s.claimMerged = p.prep(sqlClaimMerged)
	p.s.claimMergedKinds = p.prep(sqlClaimMergedKinds)
	p.s.runningOf = p.prep(sqlRunningOf)
	p.s.completeMany = p.prep(sqlCompleteMany)
	p.s.deleteMany = p.prep(sqlDeleteMany)
	p.s.finishOne = p.prep(sqlFinishOne)
	p.s.deleteOne = p.prep(sqlDeleteOne)
	p.s.moveOne = p.prep(sqlMoveOne)
	p.s.leaseExtend = p.prep(sqlLeaseExtend)
	p.s.expired = p.prep(sqlExpired)
}

// admin prepares get, retry, delete, prune, results and counts.
func (p *preparer) admin() {
	p.s.getPending = p.prep(sqlGetPending)
	p.s.getFinished = p.prep(sqlGetFinished)
	p.s.actTargets = p.prep(sqlActTargets)
	p.s.dependedOn = p.prep(sqlDependedOn)
	p.s.cancelledByAny = p.prep(sqlCancelledByAny)
	p.s.retryPending = p.prep(forIDs(sqlRetryPending))
	p.s.retryFinished = p.prep(forIDs(sqlRetryFinished))
	p.s.deleteFinished = p.prep(sqlDeleteFinished)
	p.s.deleteFinishedMany = p.prep(forIDs(sqlDeleteFinished))
	p.s.finishMany = p.prep(forIDs(sqlFinishOne))
	p.s.prune[0] = p.prep(sqlPruneCompleted)
	p.s.prune[1] = p.prep(sqlPruneCancelled)
	p.s.prune[2] = p.prep(sqlPruneDead)
	p.s.setResult = p.prep(sqlSetResult)
	p.s.cancelRequest = p.prep(forIDs(sqlCancelRequest))
	p.s.claimIDs = p.prep(sqlClaimIDs)
	p.s.countOf = p.prep(sqlCountOf)
	p.s.queuedCount = p.prep(sqlQueuedCount)
	p.s.oldestQueued = p.prep(sqlOldestQueued)
}

// limitsDepsAndQueues prepares the partition and rate limits, the
// dependencies, the queue rows, periodic slots and the wake-up counter.
func (p *preparer) limitsDepsAndQueues() {
	p.s.runningPartitions = p.prep(sqlRunningPartitions)
	p.s.availablePartitions = p.prep(sqlAvailablePartitions)
	p.s.partitionHeads = p.prep(sqlPartitionHeads)
	p.s.partitionHeadsKinds = p.prep(sqlPartitionHeadsKinds)
	p.s.unpartitionedHeads = p.prep(sqlUnpartitionedHeads)
	p.s.unpartitionedHeadsKinds = p.prep(sqlUnpartitionedHeadsKinds)
	p.s.rateCount = p.prep(sqlRateCount)
	p.s.ratePrune = p.prep(sqlRatePrune)
	p.s.rateAdd = p.prep(sqlRateAdd)
	p.s.rateGiveBack = p.prep(sqlRateGiveBack)
	p.s.startOf = p.prep(sqlStartOf)
	p.s.jobState = p.prep(sqlJobState)
	p.s.depAdd = p.prep(sqlDepAdd)
	p.s.dependentsOf = p.prep(sqlDependentsOf)
	p.s.depsDeleteDeps = p.prep(sqlDepsDeleteDeps)
	p.s.depsDeleteJob = p.prep(sqlDepsDeleteJob)
	p.s.depsLeft = p.prep(sqlDepsLeft)
	p.s.makeReady = p.prep(sqlMakeReady)
	p.s.markCancelledBy = p.prep(sqlMarkCancelledBy)
	p.s.anyCancelledBy = p.prep(sqlAnyCancelledBy)
	p.s.cancelledBecause = p.prep(sqlCancelledBecause)
	p.s.reviveFinished = p.prep(sqlReviveFinished)
	p.s.queuesAll = p.prep(sqlQueuesAll)
	p.s.queueGet = p.prep(sqlQueueGet)
	p.s.queueConfigure = p.prep(sqlQueueConfigure)
	p.s.queuePause = p.prep(sqlQueuePause)
	p.s.queueDropped = p.prep(sqlQueueDropped)
	p.s.queuesBump = p.prep(sqlQueuesBump)
	p.s.periodicGet = p.prep(sqlPeriodicGet)
	p.s.periodicSet = p.prep(sqlPeriodicSet)
	p.s.wakeBump = p.prep(sqlWakeBump)
	p.s.historyAdd = p.prep(sqlHistoryAdd)
	p.s.historyPrune = p.prep(sqlHistoryPrune)
}

// close closes the statements.
func (s *writeStmts) close() error {
	var errs []error
	for _, st := range s.all {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// errNoRows reports whether err is sql.ErrNoRows.
func errNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
