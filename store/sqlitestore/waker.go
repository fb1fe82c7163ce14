package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/internal/notify"
	"github.com/sortiehq/sortie/store"
)

// wakePoll is how often a waker without file events (see wakeSource)
// reads the wake counter while a watched queue waits for work. Polling
// costs CPU even when nothing happens (on Linux, 8% of a core at 2 ms,
// 12% at 1 ms, of which 4% for the timer alone), so it is the fallback,
// not the rule; listening for file events costs 0.01%.
const wakePoll = 5 * time.Millisecond

// maxOwnWakes bounds the wake counter values the waker remembers as this
// store's own. One it forgot costs a spurious wake-up, never a lost one.
const maxOwnWakes = 1024

// waker carries QueueWatch signals across processes. Every transaction that
// signals watchers (an enqueue, a retry, a rescue, a resume, an outcome
// that leaves a job to run again) also increments the wake counter, a row
// of sortie_meta; after its commit the writer touches the -wal file (sets
// its modification time), which SQLite itself never does. While a queue
// this store watches waits for work, the waker listens for that touch (on
// Linux with inotify; elsewhere, or when inotify is unavailable, it polls
// every wakePoll) and then reads the counter on a connection of its own: a
// value this store did not write means another process committed something
// to run, and every watched queue is signalled. Signals may be spurious
// (the other process's jobs may be of other queues), never lost to a race:
// the touch comes after the commit is visible, and a waker that starts
// listening reads the counter once at once.
//
// A queue waits for work when it has watchers and either no fetch of it
// through this store is known yet, or some worker's last fetch of it came
// back short: that worker waits for a signal. A worker whose last fetch
// filled all it asked for needs none: it fetches again as soon as it has
// room. With no queue waiting, the waker does not listen at all.
type waker struct {
	hub  *notify.Hub
	conn *sql.Conn
	read *sql.Stmt
	// wal is the path of the -wal file the writer touches.
	wal string
	src wakeSource

	// listening is whether some watched queue waits for work.
	listening atomic.Bool
	// last is the counter's value as last read (loop goroutine only).
	last int64

	// mu guards the fields below.
	mu sync.Mutex
	// watches counts the open watches of each queue.
	watches map[string]int
	// fetches holds, for each watched queue, whether the last fetch of
	// each worker came back short; short counts the true entries.
	fetches map[string]map[string]bool
	short   map[string]int
	// waiting counts the watched queues that wait for work.
	waiting int
	// own are the counter values this store is committing or committed,
	// that the loop has not read yet.
	own []int64

	// noticed, when set (by tests, before any watch), receives the
	// counter's value each time another process's commit is noticed.
	noticed chan<- int64

	kick   chan struct{}
	stop   chan struct{}
	exited chan struct{}
}

// wakeSource tells the waker when to read the wake counter: after a
// touch of the -wal file, or every wakePoll.
type wakeSource interface {
	// arm starts listening, disarm stops; only the loop calls them.
	arm() error
	disarm()
	// ready receives a value when the counter may have changed.
	ready() <-chan struct{}
	// close releases the source; the loop must have stopped.
	close() error
}

// newWaker reads the wake counter's current value on conn, so that only
// later changes wake anyone. With poll, or when file events are not
// available, it polls.
func newWaker(ctx context.Context, hub *notify.Hub, conn *sql.Conn, wal string, poll bool) (*waker, error) {
	read, err := conn.PrepareContext(ctx, sqlWakeRead)
	if err != nil {
		return nil, err
	}
	k := &waker{
		hub:     hub,
		conn:    conn,
		read:    read,
		wal:     wal,
		watches: make(map[string]int),
		fetches: make(map[string]map[string]bool),
		short:   make(map[string]int),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		exited:  make(chan struct{}),
	}
	if k.last, err = k.counter(ctx); err != nil {
		_ = read.Close()
		return nil, err
	}
	if !poll {
		k.src = newFileEvents(wal)
	}
	if k.src == nil {
		k.src = newTicks(wakePoll)
	}
	return k, nil
}

// counter reads the wake counter; 0 before any transaction incremented it.
func (k *waker) counter(ctx context.Context) (int64, error) {
	var v int64
	err := k.read.QueryRowContext(ctx).Scan(&v)
	if errNoRows(err) {
		return 0, nil
	}
	return v, err
}

// loop listens while a watched queue waits for work, until stopLoop.
func (k *waker) loop(ctx context.Context) {
	defer close(k.exited)
	armed := false
	for {
		if want := k.listening.Load(); want != armed {
			armed = want
			if !armed {
				k.src.disarm()
			} else {
				if err := k.src.arm(); err != nil {
					// No file events here after all: poll instead.
					_ = k.src.close()
					k.src = newTicks(wakePoll)
					_ = k.src.arm()
				}
				// What committed before the source listened.
				k.check(ctx)
			}
		}
		select {
		case <-k.stop:
			if armed {
				k.src.disarm()
			}
			return
		case <-k.kick:
		case <-k.src.ready():
			if armed {
				k.check(ctx)
			}
		}
	}
}

// check reads the counter and signals the watchers if another process
// raised it. A failed read (the disk, a closing store) is left to the next
// signal, and to the workers' poll interval.
func (k *waker) check(ctx context.Context) {
	v, err := k.counter(ctx)
	if err != nil || v <= k.last {
		return
	}
	if k.foreign(v) {
		k.notify(v)
	}
	k.last = v
}

// foreign says whether some of the increments up to v came from another
// process, and forgets this store's own values up to v.
func (k *waker) foreign(v int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	mine := int64(0)
	kept := k.own[:0]
	for _, o := range k.own {
		switch {
		case o > v:
			kept = append(kept, o)
		case o > k.last:
			mine++
		}
	}
	k.own = kept
	return v-k.last > mine
}

// notify signals the watchers of every watched queue that another
// process's commit raised the counter to v.
func (k *waker) notify(v int64) {
	k.mu.Lock()
	queues := make([]string, 0, len(k.watches))
	for q := range k.watches {
		queues = append(queues, q)
	}
	k.mu.Unlock()
	for _, q := range queues {
		k.hub.Notify(q)
	}
	if k.noticed != nil {
		k.noticed <- v
	}
}

// writing records a counter value this store's writer is about to
// commit. It is recorded before the commit, so that the loop never reads
// it unrecorded and takes it for another process's.
func (k *waker) writing(v int64) {
	k.mu.Lock()
	if len(k.own) >= maxOwnWakes {
		k.own = append(k.own[:0], k.own[maxOwnWakes/2:]...)
	}
	k.own = append(k.own, v)
	k.mu.Unlock()
}

// forget drops v, recorded by writing, after its commit failed: another
// process may commit the same value next. 0 is never recorded.
func (k *waker) forget(v int64) {
	if v == 0 {
		return
	}
	k.mu.Lock()
	k.own = slices.DeleteFunc(k.own, func(o int64) bool { return o == v })
	k.mu.Unlock()
}

// watch registers a watch of queue; the returned function unregisters it.
func (k *waker) watch(queue string) (unwatch func()) {
	k.mu.Lock()
	if k.watches[queue]++; k.watches[queue] == 1 {
		k.setWaiting(+1) // no fetch of it known yet: hungry
	}
	k.mu.Unlock()
	return func() {
		k.mu.Lock()
		if k.watches[queue]--; k.watches[queue] == 0 {
			if k.hungry(queue) {
				k.setWaiting(-1)
			}
			delete(k.watches, queue)
			delete(k.fetches, queue)
			delete(k.short, queue)
		}
		k.mu.Unlock()
	}
}

// fetched records that worker's fetch of queue came back short (fewer jobs
// than asked for) or full.
func (k *waker) fetched(queue, worker string, short bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.watches[queue] == 0 {
		return
	}
	before := k.hungry(queue)
	byWorker := k.fetches[queue]
	if byWorker == nil {
		byWorker = make(map[string]bool)
		k.fetches[queue] = byWorker
	}
	if was, ok := byWorker[worker]; ok && was {
		k.short[queue]--
	}
	byWorker[worker] = short
	if short {
		k.short[queue]++
	}
	if after := k.hungry(queue); after != before {
		if after {
			k.setWaiting(+1)
		} else {
			k.setWaiting(-1)
		}
	}
}

// hungry says whether watched queue waits for work. The caller holds mu.
func (k *waker) hungry(queue string) bool {
	return k.short[queue] > 0 || len(k.fetches[queue]) == 0
}

// setWaiting adds d to the count of waiting queues and starts or stops
// the listening. The caller holds mu.
func (k *waker) setWaiting(d int) {
	k.waiting += d
	on := k.waiting > 0
	if !k.listening.Swap(on) && on {
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
}

// stopLoop stops the loop and waits for it.
func (k *waker) stopLoop() {
	close(k.stop)
	<-k.exited
}

// close releases the source, the statement and the connection; the loop
// must not run.
func (k *waker) close() error {
	return errors.Join(k.src.close(), k.read.Close(), k.conn.Close())
}

// ticks is the wakeSource that polls: ready every interval while armed.
type ticks struct {
	interval time.Duration
	out      chan struct{}

	// mu guards armed and timer, against a tick that fires while the
	// source is disarmed.
	mu    sync.Mutex
	armed bool
	timer *time.Timer
}

func newTicks(interval time.Duration) *ticks {
	return &ticks{interval: interval, out: make(chan struct{}, 1)}
}

func (t *ticks) arm() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armed = true
	if t.timer == nil {
		t.timer = time.AfterFunc(t.interval, t.fire)
	} else {
		t.timer.Reset(t.interval)
	}
	return nil
}

// fire signals ready and schedules the next tick, if still armed.
func (t *ticks) fire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.armed {
		return
	}
	select {
	case t.out <- struct{}{}:
	default:
	}
	t.timer.Reset(t.interval)
}

func (t *ticks) disarm() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armed = false
	if t.timer != nil {
		t.timer.Stop()
	}
}

func (t *ticks) ready() <-chan struct{} { return t.out }

func (t *ticks) close() error {
	t.disarm()
	return nil
}

// saveWake increments the wake counter when a request of the transaction
// that succeeded signals watchers, so that other processes' wakers see it,
// and tells this store's waker the value is its own.
func (t *txn) saveWake(taken []*request) error {
	for _, r := range taken {
		if r.err == nil && len(r.notify) > 0 {
			if err := t.w.stmts.wakeBump.QueryRowContext(t.ctx).Scan(&t.wakeSeq); err != nil {
				return fmt.Errorf("update wake counter: %w", err)
			}
			t.w.waker.writing(t.wakeSeq)
			return nil
		}
	}
	return nil
}

// QueueWatch returns a Watch signalled after commits that make jobs of
// p.Queue available or scheduled, or resume it: this Store's own at once,
// and another process's within a few milliseconds (see the package
// documentation).
func (s *Store) QueueWatch(ctx context.Context, p *store.QueueWatchParams) (*store.Watch, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	w := s.hub.Watch(p.Queue)
	unwatch := s.waker.watch(p.Queue)
	return store.NewWatch(w.C, func() {
		w.Close()
		unwatch()
	}), nil
}
