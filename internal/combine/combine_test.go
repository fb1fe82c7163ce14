package combine

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// gatherBound is the bound of the test that waits it out.
const gatherBound = DefaultGather

// A flusher whose last calls served several callers waits for as
// many before it sends the next call, and no longer once they are
// there.
func TestGatherWaitsForRecentCallers(t *testing.T) {
	// A long bound, so a slow machine cannot make the arrivals late.
	c := &Combiner[int]{Config: Config{Gather: time.Minute}}
	c.callers[0] = 3
	c.waiting = []*waiter[int]{{}}
	go func() {
		for range 2 {
			time.Sleep(time.Millisecond)
			c.mu.Lock()
			c.waiting = append(c.waiting, &waiter[int]{})
			c.mu.Unlock()
		}
	}()
	c.mu.Lock()
	start := time.Now()
	c.gather()
	took, n := time.Since(start), len(c.waiting)
	c.mu.Unlock()
	if n != 3 {
		t.Fatalf("gather returned with %d callers waiting, want the 3 recent calls served", n)
	}
	if took > 30*time.Second {
		t.Fatalf("gather took %v, want it to return once the callers were in", took)
	}
}

// A lone caller, whose recent calls served one caller each, never
// waits; nor does a flusher that already has the callers it expects.
func TestGatherDoesNotDelayALoneCaller(t *testing.T) {
	for _, tc := range []struct {
		name    string
		recent  int
		waiting int
	}{
		{"lone caller", 1, 1},
		{"first call", 0, 1},
		{"all callers there", 4, 4},
		{"more than expected", 2, 5},
	} {
		c := &Combiner[int]{Config: Config{Gather: time.Second}}
		c.callers[3] = tc.recent
		for range tc.waiting {
			c.waiting = append(c.waiting, &waiter[int]{})
		}
		c.mu.Lock()
		start := time.Now()
		c.gather()
		took := time.Since(start)
		c.mu.Unlock()
		if took >= c.Config.Gather {
			t.Errorf("%s: gather took %v, want no wait", tc.name, took)
		}
	}
}

// A flusher that expects callers who do not come sends after at most
// gatherBound (plus scheduling), not later.
func TestGatherGivesUpAfterItsBound(t *testing.T) {
	c := &Combiner[int]{}
	c.callers[0] = 8
	c.waiting = []*waiter[int]{{}}
	c.mu.Lock()
	start := time.Now()
	c.gather()
	took := time.Since(start)
	c.mu.Unlock()
	if took < gatherBound {
		t.Errorf("gather returned after %v with 1 of 8 callers, want it to wait up to %v for the others", took, gatherBound)
	}
	if took > gatherBound+time.Second {
		t.Errorf("gather took %v, want about %v", took, gatherBound)
	}
}

// The expected number of callers follows the recent calls: the most
// any of the last Recall served.
func TestExpectedCallersFollowRecentStatements(t *testing.T) {
	c := &Combiner[int]{}
	record := func(n int) {
		c.callers[c.next] = n
		c.next = (c.next + 1) % Recall
	}
	record(8)
	if got := c.expected(); got != 8 {
		t.Fatalf("expected after a call of 8 = %d, want 8", got)
	}
	for range Recall - 1 {
		record(2)
	}
	if got := c.expected(); got != 8 {
		t.Fatalf("expected while the 8 is recent = %d, want 8", got)
	}
	record(2)
	if got := c.expected(); got != 2 {
		t.Fatalf("expected after %d calls of 2 = %d, want 2", Recall, got)
	}
}

// Two flushers gathering at once: the one that sends takes every caller,
// and the other sends no call at all (not an empty one) and lets its own
// caller, already served, return.
func TestFlushersGatheringAtOnceSendNoEmptyCall(t *testing.T) {
	c := &Combiner[int]{Config: Config{MaxJobs: 10, Flushers: 2, Gather: time.Second}}
	c.callers[0] = 8 // neither gets the 8 callers recent calls served
	var mu sync.Mutex
	var calls [][]int
	send := func(_ context.Context, reqs []int) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, slices.Clone(reqs))
	}
	var wg sync.WaitGroup
	do := func(i int) {
		wg.Go(func() {
			if !c.Do(context.Background(), i, 1, send) {
				t.Errorf("Do of caller %d returned false", i)
			}
		})
	}
	// The second caller comes while the first one, a flusher, gathers.
	do(0)
	for {
		c.mu.Lock()
		gathering := c.flushing == 1
		c.mu.Unlock()
		if gathering {
			break
		}
		runtime.Gosched()
	}
	do(1)
	wg.Wait()
	var sent []int
	for _, call := range calls {
		if len(call) == 0 {
			t.Errorf("a flusher sent an empty call (calls %v)", calls)
		}
		sent = append(sent, call...)
	}
	slices.Sort(sent)
	if !slices.Equal(sent, []int{0, 1}) {
		t.Errorf("calls %v sent the callers %v, want each of 0 and 1 once", calls, sent)
	}
}
