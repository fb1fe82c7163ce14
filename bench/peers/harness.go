package peers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
)

// jobArgs are the args of every benchmark job, with the JSON of sortie's.
type jobArgs struct {
	// Seq numbers the job within its run, from 0.
	Seq int64 `json:"s"`
	// At is when its enqueue began, in nanoseconds since the run's t0
	// (latency only).
	At int64 `json:"t,omitempty"`
}

// tally is what one run's handler observed: how many times each job ran,
// and for latency when each one started.
type tally struct {
	n int
	// t0 is the origin of jobArgs.At; time.Since(t0) reads the monotonic clock.
	t0   time.Time
	runs []atomic.Int32
	// stray counts handler calls with a Seq outside runs.
	stray atomic.Int64
	// ran counts handler calls of known jobs; allRan closes when it reaches n.
	ran    atomic.Int64
	allRan chan struct{}
	// startLat[seq] is job seq's enqueue → handler start in nanoseconds.
	startLat []atomic.Int64
}

func newTally(n int, latency bool) *tally {
	t := &tally{n: n, t0: time.Now(), runs: make([]atomic.Int32, n), allRan: make(chan struct{})}
	if latency {
		t.startLat = make([]atomic.Int64, n)
	}
	return t
}

// now returns the time since t0 in nanoseconds, for jobArgs.At.
func (t *tally) now() int64 { return int64(time.Since(t.t0)) }

// record notes that the handler started the job seq enqueued at at.
func (t *tally) record(seq, at int64) {
	if seq < 0 || seq >= int64(t.n) {
		t.stray.Add(1)
		return
	}
	if t.startLat != nil {
		t.startLat[seq].Store(t.now() - at)
	}
	t.runs[seq].Add(1)
	if t.ran.Add(1) == int64(t.n) {
		close(t.allRan)
	}
}

func (t *tally) latencies() []time.Duration {
	ds := make([]time.Duration, len(t.startLat))
	for i := range t.startLat {
		ds[i] = time.Duration(t.startLat[i].Load())
	}
	return ds
}

// check runs bench.Check on the tallies and the peer's counts.
func (t *tally) check(counts []store.QueueStateCount, problems []string) error {
	tl := bench.Tally{Runs: make([]int32, t.n), Stray: t.stray.Load(), Counts: counts, Problems: problems}
	for i := range t.runs {
		tl.Runs[i] = t.runs[i].Load()
	}
	return bench.Check(tl)
}

// peerState reads a peer's tables: how many of the run's jobs are
// finished, and the counts per state for the final check.
type peerState interface {
	finished(ctx context.Context) (int64, error)
	counts(ctx context.Context) ([]store.QueueStateCount, error)
}

// waitFinished waits until the peer counts every job finished and returns
// when it saw that. Unlike sortie bench, which reads the store every 20 ms
// while handlers run, it leaves the database alone until every handler
// has returned (a stall shows in the handler tally), and then polls it
// closely, as sortie does.
func (t *tally) waitFinished(ctx context.Context, st peerState, stall time.Duration) (time.Time, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastRan, lastAt := int64(-1), time.Now()
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-t.allRan:
			waiting = false
		case <-tick.C:
			if r := t.ran.Load(); r != lastRan {
				lastRan, lastAt = r, time.Now()
			} else if time.Since(lastAt) > stall {
				return time.Time{}, t.stalled(ctx, st, stall)
			}
		}
	}
	lastDone, lastAt := int64(-1), time.Now()
	for {
		done, err := st.finished(ctx)
		if err != nil {
			return time.Time{}, err
		}
		now := time.Now()
		if done >= int64(t.n) {
			return now, nil
		}
		if done != lastDone {
			lastDone, lastAt = done, now
		} else if now.Sub(lastAt) > stall {
			return time.Time{}, t.stalled(ctx, st, stall)
		}
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (t *tally) stalled(ctx context.Context, st peerState, stall time.Duration) error {
	done, err := st.finished(ctx)
	if err != nil {
		return err
	}
	counts, err := st.counts(ctx)
	if err != nil {
		return err
	}
	problem := fmt.Sprintf("no progress for %s: %d of %d jobs ran, the peer counts %d finished", stall, t.ran.Load(), t.n, done)
	return t.check(counts, []string{problem})
}

// firstError keeps the first error of several goroutines and cancels them.
type firstError struct {
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func (f *firstError) set(err error) {
	f.once.Do(func() {
		f.err = err
		f.cancel()
	})
}

// enqueueSingle runs producers goroutines that call enqueue once per job
// until n jobs are enqueued, and returns the time it took and each call's.
func enqueueSingle(ctx context.Context, n, producers int, enqueue func(ctx context.Context, seq int64) error) (time.Duration, []time.Duration, error) {
	lat := make([]time.Duration, n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := &firstError{cancel: cancel}
	var next atomic.Int64
	var wg sync.WaitGroup
	runtime.GC()
	start := time.Now()
	for range producers {
		wg.Go(func() {
			for ctx.Err() == nil {
				seq := next.Add(1) - 1
				if seq >= int64(n) {
					return
				}
				t := time.Now()
				if err := enqueue(ctx, seq); err != nil {
					fail.set(fmt.Errorf("enqueue job %d: %w", seq, err))
					return
				}
				lat[seq] = time.Since(t)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if fail.err != nil {
		return 0, nil, fail.err
	}
	return took, lat, ctx.Err()
}

// enqueueBatch runs producers goroutines that call enqueue with jobs
// [lo, hi) of at most size jobs until n jobs are enqueued, and returns the
// time it took and each call's.
func enqueueBatch(ctx context.Context, n, size, producers int, enqueue func(ctx context.Context, lo, hi int64) error) (time.Duration, []time.Duration, error) {
	calls := (n + size - 1) / size
	lat := make([]time.Duration, calls)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := &firstError{cancel: cancel}
	var next atomic.Int64
	var wg sync.WaitGroup
	runtime.GC()
	start := time.Now()
	for range producers {
		wg.Go(func() {
			for ctx.Err() == nil {
				call := next.Add(1) - 1
				if call >= int64(calls) {
					return
				}
				lo := call * int64(size)
				hi := min(lo+int64(size), int64(n))
				t := time.Now()
				if err := enqueue(ctx, lo, hi); err != nil {
					fail.set(fmt.Errorf("enqueue jobs %d to %d: %w", lo, hi-1, err))
					return
				}
				lat[call] = time.Since(t)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if fail.err != nil {
		return 0, nil, fail.err
	}
	return took, lat, ctx.Err()
}

// preload enqueues n jobs in batches of bench.DefaultBatchSize, untimed, as
// sortie bench's drain does.
func preload(ctx context.Context, n int, enqueue func(ctx context.Context, lo, hi int64) error) error {
	for lo := int64(0); lo < int64(n); lo += bench.DefaultBatchSize {
		hi := min(lo+bench.DefaultBatchSize, int64(n))
		if err := enqueue(ctx, lo, hi); err != nil {
			return fmt.Errorf("preload jobs %d to %d: %w", lo, hi-1, err)
		}
	}
	return nil
}

// openLoop enqueues n jobs at rate per second, job i due at start + i/rate
// whether or not earlier enqueues returned (each runs in its own
// goroutine), and returns how long the enqueues took.
func openLoop(ctx context.Context, n int, rate float64, enqueue func(ctx context.Context, seq int64) error) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := &firstError{cancel: cancel}
	tick := time.NewTicker(max(time.Duration(float64(time.Second)/rate), time.Millisecond))
	defer tick.Stop()
	var wg sync.WaitGroup
	start := time.Now()
	for sent := 0; sent < n; {
		due := min(n, int(time.Since(start).Seconds()*rate)+1)
		for ; sent < due; sent++ {
			seq := int64(sent)
			wg.Go(func() {
				if err := enqueue(ctx, seq); err != nil {
					fail.set(fmt.Errorf("enqueue job %d: %w", seq, err))
				}
			})
		}
		if sent == n {
			break
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	took := time.Since(start)
	if fail.err != nil {
		return 0, fail.err
	}
	return took, ctx.Err()
}

// idCheck notes enqueues that returned no ID or one another enqueue
// returned too.
func idCheck[T comparable](ids []T) []string {
	var zero T
	seen := make(map[T]struct{}, len(ids))
	missing, repeated := 0, 0
	for _, id := range ids {
		if id == zero {
			missing++
			continue
		}
		if _, ok := seen[id]; ok {
			repeated++
		}
		seen[id] = struct{}{}
	}
	var problems []string
	if missing > 0 {
		problems = append(problems, fmt.Sprintf("%d enqueues returned no job ID", missing))
	}
	if repeated > 0 {
		problems = append(problems, fmt.Sprintf("%d enqueues returned an ID another enqueue returned too", repeated))
	}
	return problems
}

// availableCheck notes a peer that does not hold exactly n jobs, all
// available, after the enqueues.
func availableCheck(counts []store.QueueStateCount, n int) []string {
	var available, other int64
	for _, c := range counts {
		if c.State == store.JobStateAvailable {
			available += c.Count
		} else {
			other += c.Count
		}
	}
	if available != int64(n) || other != 0 {
		return []string{fmt.Sprintf("after enqueueing %d jobs the peer counts %d available and %d in other states", n, available, other)}
	}
	return nil
}

// randomName returns prefix and 8 random hex digits: a schema or table name
// no other run uses.
func randomName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
