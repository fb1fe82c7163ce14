package combine

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
)

// Callers arriving while a batch is under way share the next one, and each
// gets its own result.
func TestBatchesWhileBusy(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var mu sync.Mutex
	var sizes []int
	c := &Combiner[int, int]{Flush: func(_ context.Context, reqs []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			entered <- struct{}{}
			<-release
		}
		out := make([]int, len(reqs))
		for i, r := range reqs {
			out[i] = r * 10
		}
		return out, nil
	}}
	var wg sync.WaitGroup
	got := make([]int, 6)
	wg.Go(func() { got[0], _ = c.Do(t.Context(), 0) })
	<-entered
	for i := 1; i < 6; i++ {
		wg.Go(func() { got[i], _ = c.Do(t.Context(), i) })
	}
	// The five wait behind the first batch; let it go once they all queued.
	for {
		c.mu.Lock()
		n := len(c.waiting)
		c.mu.Unlock()
		if n == 5 {
			break
		}
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	for i, v := range got {
		if v != i*10 {
			t.Errorf("result %d = %d, want %d", i, v, i*10)
		}
	}
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != 5 {
		t.Errorf("batch sizes = %v, want [1 5]", sizes)
	}
}

// A failed call fails every request of its batch; a short reply fails the
// requests it did not answer.
func TestErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	c := &Combiner[int, int]{Flush: func(context.Context, []int) ([]int, error) { return nil, boom }}
	if _, err := c.Do(t.Context(), 1); !errors.Is(err, boom) {
		t.Errorf("Do error = %v, want boom", err)
	}
	c = &Combiner[int, int]{Flush: func(context.Context, []int) ([]int, error) { return nil, nil }}
	if _, err := c.Do(t.Context(), 1); !errors.Is(err, errShortReply) {
		t.Errorf("Do with a short reply: error = %v, want errShortReply", err)
	}
}
