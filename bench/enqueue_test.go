package bench_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
)

// waitTimeout bounds how long a test's enqueue call waits for the others.
const waitTimeout = 10 * time.Second

var errBoom = errors.New("boom")

func TestEnqueueEach(t *testing.T) {
	t.Parallel()
	const n, producers = 200, 4
	calls := make([]atomic.Int32, n)
	inner := make([]time.Duration, n)
	var done atomic.Int64
	othersDone := make(chan struct{})
	took, lat, err := bench.EnqueueEach(context.Background(), n, producers, func(_ context.Context, seq int64) error {
		start := time.Now()
		calls[seq].Add(1)
		if seq == 0 {
			// Job 0's call returns only once every other job's did: the
			// producers run at once.
			select {
			case <-othersDone:
			case <-time.After(waitTimeout):
				return errors.New("the other calls did not all return while job 0's ran")
			}
		} else if done.Add(1) == n-1 {
			close(othersDone)
		}
		inner[seq] = time.Since(start)
		return nil
	})
	if err != nil {
		t.Fatalf("EnqueueEach = %v, want success", err)
	}
	if len(lat) != n {
		t.Fatalf("EnqueueEach returned %d latencies, want %d", len(lat), n)
	}
	for seq := range calls {
		if got := calls[seq].Load(); got != 1 {
			t.Errorf("job %d: %d calls, want 1", seq, got)
		}
		if lat[seq] < inner[seq] || lat[seq] > took {
			t.Errorf("job %d: latency %v, want between its call's %v and the total %v", seq, lat[seq], inner[seq], took)
		}
	}
}

func TestEnqueueBatches(t *testing.T) {
	t.Parallel()
	const n, size = 1050, 100
	var mu sync.Mutex
	var got [][2]int64
	took, lat, err := bench.EnqueueBatches(context.Background(), n, size, 3, func(_ context.Context, lo, hi int64) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, [2]int64{lo, hi})
		return nil
	})
	if err != nil {
		t.Fatalf("EnqueueBatches = %v, want success", err)
	}
	slices.SortFunc(got, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	var want [][2]int64
	for lo := int64(0); lo < n; lo += size {
		want = append(want, [2]int64{lo, min(lo+size, n)})
	}
	if !slices.Equal(got, want) {
		t.Errorf("EnqueueBatches called with %v, want %v", got, want)
	}
	if len(lat) != len(want) {
		t.Errorf("EnqueueBatches returned %d latencies, want one per call, %d", len(lat), len(want))
	}
	for i, d := range lat {
		if d > took {
			t.Errorf("call %d took %v, more than all of them, %v", i, d, took)
		}
	}
}

func TestEnqueueFails(t *testing.T) {
	t.Parallel()
	failAt := func(bad int64) func(context.Context, int64) error {
		return func(_ context.Context, seq int64) error {
			if seq == bad {
				return errBoom
			}
			return nil
		}
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name string
		run  func(ctx context.Context) error
		ctx  context.Context
		want string // the error message; empty means ctx's error
	}{
		{"each", func(ctx context.Context) error {
			_, _, err := bench.EnqueueEach(ctx, 100, 4, failAt(17))
			return err
		}, context.Background(), "enqueue job 17: boom"},
		{"batches", func(ctx context.Context) error {
			_, _, err := bench.EnqueueBatches(ctx, 1000, 100, 4, func(ctx context.Context, lo, _ int64) error {
				return failAt(300)(ctx, lo)
			})
			return err
		}, context.Background(), "enqueue jobs 300 to 399: boom"},
		{"open loop", func(ctx context.Context) error {
			_, err := bench.EnqueueOpenLoop(ctx, 10, 1000, failAt(3))
			return err
		}, context.Background(), "enqueue job 3: boom"},
		{"preload", func(ctx context.Context) error {
			return bench.Preload(ctx, 2500, func(ctx context.Context, lo, _ int64) error {
				return failAt(1000)(ctx, lo)
			})
		}, context.Background(), "enqueue jobs 1000 to 1999: boom"},
		{"each cancelled", func(ctx context.Context) error {
			_, _, err := bench.EnqueueEach(ctx, 100, 4, failAt(-1))
			return err
		}, cancelled, ""},
		{"open loop cancelled", func(ctx context.Context) error {
			_, err := bench.EnqueueOpenLoop(ctx, 100, 10, failAt(-1))
			return err
		}, cancelled, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.run(tt.ctx)
			if tt.want == "" {
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("got %v, want context.Canceled", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want || !errors.Is(err, errBoom) {
				t.Fatalf("got %v, want %q wrapping the enqueue's error", err, tt.want)
			}
		})
	}
}

func TestEnqueueOpenLoop(t *testing.T) {
	t.Parallel()
	const n, rate = 20, 200.0
	started := make([]time.Duration, n)
	calls := make([]atomic.Int32, n)
	fifthStarted := make(chan struct{})
	begin := time.Now()
	took, err := bench.EnqueueOpenLoop(context.Background(), n, rate, func(_ context.Context, seq int64) error {
		started[seq] = time.Since(begin)
		calls[seq].Add(1)
		switch seq {
		case 0:
			// Job 0's call is still running when job 5's starts: the loop
			// does not wait for earlier calls.
			select {
			case <-fifthStarted:
			case <-time.After(waitTimeout):
				return errors.New("job 5 was not sent while job 0's call ran")
			}
		case 5:
			close(fifthStarted)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("EnqueueOpenLoop = %v, want success", err)
	}
	for seq := range started {
		if got := calls[seq].Load(); got != 1 {
			t.Errorf("job %d: %d calls, want 1", seq, got)
		}
		if due := time.Duration(float64(seq) / rate * float64(time.Second)); started[seq] < due {
			t.Errorf("job %d sent %v after the start, before it was due at %v", seq, started[seq], due)
		}
	}
	if last := time.Duration(float64(n-1) / rate * float64(time.Second)); took < last {
		t.Errorf("EnqueueOpenLoop took %v, less than until its last job was due, %v", took, last)
	}
}

func TestPreload(t *testing.T) {
	t.Parallel()
	var got [][2]int64
	err := bench.Preload(context.Background(), 2500, func(_ context.Context, lo, hi int64) error {
		got = append(got, [2]int64{lo, hi}) // one call after another: no lock
		return nil
	})
	if err != nil {
		t.Fatalf("Preload = %v, want success", err)
	}
	if want := [][2]int64{{0, 1000}, {1000, 2000}, {2000, 2500}}; !slices.Equal(got, want) {
		t.Errorf("Preload called with %v, want %v in that order", got, want)
	}
}
