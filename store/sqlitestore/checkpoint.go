package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sortiehq/sortie/store"
)

// DefaultWALSizeLimit is the default of Options.WALSizeLimit: 64 MiB.
const DefaultWALSizeLimit = 64 << 20

// minWALSizeLimit is the smallest Options.WALSizeLimit accepted: 1 MiB.
const minWALSizeLimit = 1 << 20

// walFrameSize is the size of one frame of the write-ahead log: a 4096-byte
// page and its 24-byte header.
const walFrameSize = 4096 + 24

// restartWait is the longest a restart waits for the readers still on an
// older snapshot (and for another process's write transaction) before it
// gives up until later. Readers are single statements, so they finish
// within milliseconds.
const restartWait = 100 * time.Millisecond

// The pauses between the tries of one restart, doubling from the first to
// the last. The checkpointer's connection has no busy timeout: SQLite's
// busy handler sleeps 1, 2, 5, 10, 15, 20, 25 ms and so on between tries,
// so a restart could go on waiting for most of a sleep after the last
// reader in its way finished; these pauses follow the readers closely.
const (
	minRestartPause = 100 * time.Microsecond
	maxRestartPause = time.Millisecond
)

// The pause between a failed restart and the next try, doubling from the
// first to the last: a disk that is full, or a long read transaction in
// another process, is not retried after every group, and a disk that has
// room again is noticed within a second.
const (
	minRestartBackoff = 50 * time.Millisecond
	maxRestartBackoff = time.Second
)

// checkpointer keeps the write-ahead log under Options.WALSizeLimit.
//
// A checkpoint copies the log into the database file, but only a log that
// was copied whole and that no reader still reads can start again from its
// beginning; until then every commit appends to it. So two kinds run:
//
//   - passive: every quarter of the limit, the checkpointer goroutine copies
//     the log on its own connection (PRAGMA wal_checkpoint(PASSIVE)),
//     concurrently with the writer, which never stalls for that copy.
//     Alone, it never lets the log restart while the writer keeps
//     appending: the log grew to gigabytes under steady load.
//   - restart: once the passive copy is done, the writer goroutine, between
//     two groups, checkpoints the little written since with RESTART: it
//     waits (at most restartWait) for the readers on older snapshots, and
//     the next commit starts the log again from its beginning. Past half
//     the limit the writer does not wait for the passive copy any more.
//
// journal_size_limit cuts a file that grew past the limit (a long read
// transaction pinned the log) back to it at the next restart, and Close
// truncates the log to nothing. A write that fails for lack of space makes
// the writer try a restart before the next group, with backoff, so the
// space the log holds is reused once the disk has room again.
type checkpointer struct {
	// mu serializes the use of conn between the goroutines.
	mu   sync.Mutex
	conn *sql.Conn

	// every is how many pages of log start a passive checkpoint, and
	// limit the most the log should hold, in pages: maxLimit (from
	// Options.WALSizeLimit), or less on a disk with less room (fit).
	every, limit, maxLimit int
	// path is the database file's.
	path string

	// The writer goroutine's state, read and written by it only.
	//
	// frames counts the pages appended since the log last restarted;
	// nextPassive is the count at which the next passive checkpoint
	// starts, and awaited the number of passive runs after which it is
	// done. failed: a write failed for lack of space (or an I/O error)
	// since the last restart. No restart is tried before retryAt; backoff
	// is the pause after the last failed one.
	frames, nextPassive int
	awaited             int64
	failed              bool
	backoff             time.Duration
	retryAt             time.Time
	// lastErr is why the last restart failed, and freeAtFail the disk's
	// free space then (-1 unknown).
	lastErr    error
	freeAtFail int64

	// runs counts the passive checkpoints run, restarts the restarts that
	// completed.
	runs, restarts atomic.Int64
	kick           chan struct{}
	stop           chan struct{}
	exited         chan struct{}
}

func newCheckpointer(conn *sql.Conn, path string, limitBytes int64) *checkpointer {
	limit := int(limitBytes / walFrameSize)
	c := &checkpointer{
		conn:     conn,
		path:     path,
		maxLimit: limit,
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		exited:   make(chan struct{}),
	}
	c.fit()
	c.nextPassive = c.every
	return c
}

// minFitFrames is the least limit fit sets: 1 MiB of log.
const minFitFrames = 256

// fit sets the log's limit from the room it has: the free space of the
// disk plus what the log file already holds (a restarted log writes over
// it), halved to leave the database file room to grow when the log is
// copied into it. On a disk smaller than Options.WALSizeLimit the log
// would otherwise fill it before a checkpoint is even due, and then no
// checkpoint could complete: copying the log needs room too.
func (c *checkpointer) fit() {
	c.limit = c.maxLimit
	if free := freeBytes(c.path); free >= 0 {
		var held int64
		if fi, err := os.Stat(c.path + "-wal"); err == nil {
			held = fi.Size()
		}
		room := int((free + held) / walFrameSize / 2)
		c.limit = min(c.maxLimit, max(room, minFitFrames))
	}
	c.every = c.limit / 4
}

// loop runs passive checkpoints when kicked, until close. A failed one is
// harmless (the restart copies what it left), so errors are dropped.
func (c *checkpointer) loop(ctx context.Context) {
	defer close(c.exited)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		c.mu.Lock()
		_, _ = c.checkpoint(ctx, "PASSIVE")
		c.mu.Unlock()
		c.runs.Add(1)
	}
}

// afterGroup is called by the writer goroutine after each group, with no
// transaction open: pages is how many pages the group appended to the log,
// and failed says whether a write failed for lack of space or an I/O error.
// It starts a passive checkpoint every c.every pages and restarts the log
// once it is done (see checkpointer).
func (c *checkpointer) afterGroup(ctx context.Context, pages int, failed bool) {
	c.frames += pages
	c.failed = c.failed || failed
	if c.frames >= c.nextPassive {
		c.nextPassive = c.frames + c.every
		c.awaited = c.runs.Load() + 1
		c.request()
	}
	if c.frames < c.every && !c.failed {
		return
	}
	if c.runs.Load() < c.awaited && c.frames < c.limit/2 {
		return // the passive checkpoint is still copying
	}
	// Between half the limit and the limit, a failed restart is tried
	// again after the next group; before, it waits for its backoff, and
	// past the limit too: then something holds the log for long, and a
	// wait after every group would only slow the writes down.
	if (c.frames < c.limit/2 || c.frames >= c.limit) && time.Now().Before(c.retryAt) {
		return
	}
	c.restart(ctx)
}

// restart checkpoints the whole log and waits for the readers of older
// snapshots, so the next commit writes the log from its beginning.
func (c *checkpointer) restart(ctx context.Context) {
	c.mu.Lock()
	done, err := c.checkpointAll(ctx, "RESTART")
	c.mu.Unlock()
	if err == nil && done {
		c.fit()
		c.frames, c.nextPassive = 0, c.every
		c.failed, c.backoff, c.retryAt = false, 0, time.Time{}
		c.restarts.Add(1)
		return
	}
	c.lastErr, c.freeAtFail = err, freeBytes(c.path)
	if err == nil {
		c.lastErr = errors.New("readers of older snapshots kept the log from restarting")
	}
	c.backoff = min(max(2*c.backoff, minRestartBackoff), maxRestartBackoff)
	c.retryAt = time.Now().Add(c.backoff)
}

// beforeGroup is called by the writer goroutine before each group. Once a
// write failed for lack of space, the log must restart before anything is
// appended to it: the restart copies the log into the database file, which
// needs the room that further appends would take, and with the disk full
// again every later restart would fail too. So until a restart completes,
// a group first tries one (at once when the disk has more room than at the
// last failure, else at most once per backoff) and is refused, with an
// error saying why, while the log cannot restart.
func (c *checkpointer) beforeGroup(ctx context.Context) error {
	if !c.failed {
		return nil
	}
	if !time.Now().Before(c.retryAt) || freeBytes(c.path) > c.freeAtFail {
		c.restart(ctx)
		if !c.failed {
			return nil
		}
	}
	return store.FullError("the disk is full: writes wait until the write-ahead log can be copied into the database file (free some space)", c.lastErr)
}

// checkpointAll runs a checkpoint of mode RESTART or TRUNCATE, trying
// again while a reader of an older snapshot or another process's writer
// is in the way, for at most restartWait. It says whether the checkpoint
// completed. The caller holds c.mu.
func (c *checkpointer) checkpointAll(ctx context.Context, mode string) (done bool, err error) {
	deadline := time.Now().Add(restartWait)
	for pause := minRestartPause; ; pause = min(2*pause, maxRestartPause) {
		busy, err := c.checkpoint(ctx, mode)
		if err != nil || !busy {
			return err == nil, err
		}
		if time.Now().Add(pause).After(deadline) {
			return false, nil
		}
		time.Sleep(pause)
	}
}

// checkpoint runs a checkpoint of the given mode once and says whether it
// was cut short by a reader or writer in the way. The caller holds c.mu.
func (c *checkpointer) checkpoint(ctx context.Context, mode string) (busy bool, err error) {
	var b, logged, copied int
	err = c.conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(`+mode+`)`).Scan(&b, &logged, &copied)
	if sqliteCode(err) == sqlite3.SQLITE_BUSY {
		return true, nil
	}
	return b != 0, err
}

// truncate copies the whole log into the database file and truncates the
// log to nothing, unless other connections keep reading or writing it for
// longer than restartWait. Open and Close call it, while the loop does not
// run.
func (c *checkpointer) truncate(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = c.checkpointAll(ctx, "TRUNCATE")
}

// request asks for a passive checkpoint without waiting.
func (c *checkpointer) request() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// close stops the loop and waits for it.
func (c *checkpointer) close() {
	close(c.stop)
	<-c.exited
}

// diskTrouble reports whether err is a write that failed for lack of space
// or an I/O error: then the log may be what fills the disk.
func diskTrouble(err error) bool {
	code := sqliteCode(err)
	return code == sqlite3.SQLITE_FULL || code == sqlite3.SQLITE_IOERR
}

// pagesWritten returns how many pages conn wrote to the log since the last
// call (SQLITE_DBSTATUS_CACHE_WRITE counts WAL frames in WAL mode).
func pagesWritten(conn *sql.Conn) int {
	var n int
	_ = conn.Raw(func(dc any) error {
		st, ok := dc.(sqlite.DBStatus)
		if !ok {
			return nil
		}
		n, _, _ = st.Status(sqlite.DBStatusCacheWrite, true)
		return nil
	})
	return n
}
