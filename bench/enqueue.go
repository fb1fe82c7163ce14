package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The enqueue loops of the workloads, shared with peerbench (module
// bench/peers) so that a peer's enqueues are timed exactly as sortie's are.
// Each calls enqueue from several goroutines, stops at the first error and
// returns it, and returns ctx's error when ctx ends first. None of them
// collects garbage first: the caller does, before it calls them.

// EnqueueEach enqueues jobs 0 to n-1 with one call of enqueue each, from
// producers goroutines at once, each taking the next job as soon as its
// previous call returned. It returns how long all the calls took, and
// lat[seq], how long the call of job seq took. An error of job seq is
// returned as "enqueue job seq: err".
func EnqueueEach(ctx context.Context, n, producers int, enqueue func(ctx context.Context, seq int64) error) (took time.Duration, lat []time.Duration, err error) {
	return calls(ctx, n, producers, func(ctx context.Context, seq int64) error {
		if err := enqueue(ctx, seq); err != nil {
			return fmt.Errorf("enqueue job %d: %w", seq, err)
		}
		return nil
	})
}

// EnqueueBatches enqueues jobs 0 to n-1 with calls of enqueue of size jobs
// each, jobs lo to hi-1 (the last call may have fewer), from producers
// goroutines at once, each taking the next batch as soon as its previous
// call returned. It returns how long all the calls took, and lat[i], how
// long the call of jobs i×size and up took. An error is returned as
// "enqueue jobs lo to hi-1: err".
func EnqueueBatches(ctx context.Context, n, size, producers int, enqueue func(ctx context.Context, lo, hi int64) error) (took time.Duration, lat []time.Duration, err error) {
	return calls(ctx, (n+size-1)/size, producers, func(ctx context.Context, call int64) error {
		lo := call * int64(size)
		hi := min(lo+int64(size), int64(n))
		return enqueueRange(ctx, lo, hi, enqueue)
	})
}

// calls makes calls i = 0 to n-1 of call from producers goroutines and
// times each.
func calls(ctx context.Context, n, producers int, call func(ctx context.Context, i int64) error) (time.Duration, []time.Duration, error) {
	lat := make([]time.Duration, n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := &firstError{cancel: cancel}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range producers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t := time.Now()
				if err := call(ctx, i); err != nil {
					fail.set(err)
					return
				}
				lat[i] = time.Since(t)
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

// Preload enqueues jobs 0 to n-1, untimed, with one call of enqueue per
// DefaultBatchSize jobs (lo to hi-1), one call after another: the jobs
// drain works and interval's queue. An error is returned as "enqueue jobs
// lo to hi-1: err".
func Preload(ctx context.Context, n int, enqueue func(ctx context.Context, lo, hi int64) error) error {
	for lo := int64(0); lo < int64(n); lo += DefaultBatchSize {
		if err := enqueueRange(ctx, lo, min(lo+DefaultBatchSize, int64(n)), enqueue); err != nil {
			return err
		}
	}
	return nil
}

func enqueueRange(ctx context.Context, lo, hi int64, enqueue func(ctx context.Context, lo, hi int64) error) error {
	if err := enqueue(ctx, lo, hi); err != nil {
		return fmt.Errorf("enqueue jobs %d to %d: %w", lo, hi-1, err)
	}
	return nil
}

// EnqueueOpenLoop enqueues jobs 0 to n-1 at rate jobs per second, each with
// one call of enqueue in a goroutine of its own. The loop is open: job seq
// is due at the start plus seq/rate whether or not earlier calls returned,
// so a slow enqueue cannot hide behind a late send. It returns how long it
// took until every call returned. An error of job seq is returned as
// "enqueue job seq: err".
func EnqueueOpenLoop(ctx context.Context, n int, rate float64, enqueue func(ctx context.Context, seq int64) error) (time.Duration, error) {
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
