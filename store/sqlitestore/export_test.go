package sqlitestore

import (
	"context"
	"errors"

	"github.com/sortiehq/sortie/store"
)

// PauseWriter blocks the writer goroutine inside a request until the
// returned resume is called, so a test can queue requests that will all
// run in the next group. It returns once the writer is blocked.
func PauseWriter(s *Store) (resume func()) {
	blocked, release := make(chan struct{}), make(chan struct{})
	r := &request{op: func(t *txn, r *request) error {
		close(blocked)
		<-release
		return nil
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.do(context.Background(), r)
	}()
	<-blocked
	return func() {
		close(release)
		<-done
	}
}

// WatchQueue returns a channel receiving the writer's queue length after
// each request is queued. Call it before queueing anything.
func WatchQueue(s *Store) <-chan int {
	c := make(chan int, 64)
	s.w.queuedHook = func(n int) { c <- n }
	return c
}

// WatchBusy returns a channel receiving a value each time the writer finds
// another connection holding the write lock. Call it before any write.
func WatchBusy(s *Store) <-chan struct{} {
	c := make(chan struct{}, 1)
	s.w.busyHook = func() {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	return c
}

// Groups returns the number of group transactions the writer committed.
func Groups(s *Store) int64 { return s.w.groups.Load() }

// ErrInjected is the error of EnqueueThenFail.
var ErrInjected = errors.New("injected failure")

// EnqueueThenFail enqueues p's jobs inside the writer and then fails, so the
// savepoint must undo the inserts and the counter changes.
func EnqueueThenFail(ctx context.Context, s *Store, p *store.JobEnqueueManyParams) error {
	var results []store.EnqueueResult
	r := &request{durable: true}
	r.op = func(t *txn, r *request) error {
		res, args, width, err := encodeJobs(p)
		if err != nil {
			return err
		}
		results = res
		if err := enqueue(t, r, p, args, width, results); err != nil {
			return err
		}
		return ErrInjected
	}
	return s.do(ctx, r)
}

// WriterSynchronous returns the write connection's PRAGMA synchronous as
// the next group sees it before running (1 NORMAL, 2 FULL), read inside a
// request of the given durability.
func WriterSynchronous(ctx context.Context, s *Store, durable bool) (int, error) {
	var v int
	r := &request{durable: durable}
	r.op = func(t *txn, r *request) error {
		return t.w.conn.QueryRowContext(t.ctx, `PRAGMA synchronous`).Scan(&v)
	}
	err := s.do(ctx, r)
	return v, err
}

// PanicRequest runs a write request whose op panics.
func PanicRequest(ctx context.Context, s *Store) error {
	r := &request{op: func(t *txn, r *request) error { panic("boom") }}
	return s.do(ctx, r)
}

// SetCheckpointPages makes the store checkpoint every n pages of log. Call
// it before any write.
func SetCheckpointPages(s *Store, n int) { s.w.ckpt.every, s.w.ckpt.nextPassive = n, n }

// Checkpoints returns how many passive checkpoints the store ran.
func Checkpoints(s *Store) int64 { return s.w.ckpt.runs.Load() }

// Restarts returns how many times the store restarted the write-ahead log.
func Restarts(s *Store) int64 { return s.w.ckpt.restarts.Load() }

// Migration returns the statements that bring version v to v+1.
func Migration(v int) []string { return migrations[v] }

// WakeNotices returns a channel receiving the wake counter's value each
// time the store notices another process's commit and signals its
// watchers. Call it before opening any watch.
func WakeNotices(s *Store) <-chan int64 {
	c := make(chan int64, 64)
	s.waker.noticed = c
	return c
}

// WakerListening reports whether the store listens (or polls) for other
// processes' commits.
func WakerListening(s *Store) bool { return s.waker.listening.Load() }

// OpenPollingWakes opens a store that polls for other processes' commits,
// as it does where file events are not available.
func OpenPollingWakes(path string, opts *Options) (*Store, error) { return open(path, opts, true) }

// The statements of JobCounts, for TestCountsMillionRows's plans.
const (
	SQLCounts      = sqlCounts
	SQLCountsQueue = sqlCountsQueue
)
