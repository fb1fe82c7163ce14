package sqlitestore

import (
	"context"
	"database/sql"
	"sync/atomic"

	"modernc.org/sqlite"
)

// checkpointPages is how many pages the writer appends to the write-ahead
// log before it asks the checkpointer to copy them into the database file.
// SQLite's own automatic checkpoint (every 1,000 pages, inside the commit
// that crosses the mark) stalled the writer for the copy and a sync of the
// database file; the drain benchmark ran 23k jobs/s with it and well above
// 50k with checkpoints on their own connection every 4,000 pages (fewer,
// larger checkpoints also copy a hot page once instead of several times).
const checkpointPages = 4000

// checkpointer copies the write-ahead log into the database file on its own
// connection (PRAGMA wal_checkpoint(PASSIVE)), concurrently with the writer,
// which then never stalls for a checkpoint.
type checkpointer struct {
	conn *sql.Conn
	// every is how many pages of log trigger a checkpoint (checkpointPages;
	// tests lower it).
	every int
	// runs counts the checkpoints run.
	runs   atomic.Int64
	kick   chan struct{}
	stop   chan struct{}
	exited chan struct{}
}

func newCheckpointer(conn *sql.Conn) *checkpointer {
	return &checkpointer{
		conn:   conn,
		every:  checkpointPages,
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		exited: make(chan struct{}),
	}
}

// loop runs checkpoints when kicked, until close. A failed checkpoint is
// harmless (the log just grows until the next one), so errors are dropped.
func (c *checkpointer) loop(ctx context.Context) {
	defer close(c.exited)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		_, _ = c.conn.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`)
		c.runs.Add(1)
	}
}

// request asks for a checkpoint without waiting.
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
