package pgstore

import (
	"testing"
	"time"
)

// A flusher whose last statements served several callers waits for as
// many before it sends the next statement, and no longer once they are
// there.
func TestGatherWaitsForRecentCallers(t *testing.T) {
	// A long bound, so a slow machine cannot make the arrivals late.
	c := &combiner{gatherFor: time.Minute}
	c.callers[0] = 3
	c.waiting = []*enqueueReq{{}}
	go func() {
		for range 2 {
			time.Sleep(time.Millisecond)
			c.mu.Lock()
			c.waiting = append(c.waiting, &enqueueReq{})
			c.mu.Unlock()
		}
	}()
	c.mu.Lock()
	start := time.Now()
	c.gather()
	took, n := time.Since(start), len(c.waiting)
	c.mu.Unlock()
	if n != 3 {
		t.Fatalf("gather returned with %d callers waiting, want the 3 recent statements served", n)
	}
	if took > 30*time.Second {
		t.Fatalf("gather took %v, want it to return once the callers were in", took)
	}
}

// A lone caller, whose recent statements served one caller each, never
// waits; nor does a flusher that already has the callers it expects.
func TestGatherDoesNotDelayALoneCaller(t *testing.T) {
	for _, tc := range []struct {
		name    string
		recent  int
		waiting int
	}{
		{"lone caller", 1, 1},
		{"first statement", 0, 1},
		{"all callers there", 4, 4},
		{"more than expected", 2, 5},
	} {
		c := &combiner{gatherFor: time.Second}
		c.callers[3] = tc.recent
		for range tc.waiting {
			c.waiting = append(c.waiting, &enqueueReq{})
		}
		c.mu.Lock()
		start := time.Now()
		c.gather()
		took := time.Since(start)
		c.mu.Unlock()
		if took >= c.gatherFor {
			t.Errorf("%s: gather took %v, want no wait", tc.name, took)
		}
	}
}

// A flusher that expects callers who do not come sends after at most
// combineGather (plus scheduling), not later.
func TestGatherGivesUpAfterItsBound(t *testing.T) {
	c := &combiner{}
	c.callers[0] = 8
	c.waiting = []*enqueueReq{{}}
	c.mu.Lock()
	start := time.Now()
	c.gather()
	took := time.Since(start)
	c.mu.Unlock()
	if took < combineGather {
		t.Errorf("gather returned after %v with 1 of 8 callers, want it to wait up to %v for the others", took, combineGather)
	}
	if took > combineGather+time.Second {
		t.Errorf("gather took %v, want about %v", took, combineGather)
	}
}

// The expected number of callers follows the recent statements: the most
// any of the last combineRecall served.
func TestExpectedCallersFollowRecentStatements(t *testing.T) {
	c := &combiner{}
	record := func(n int) {
		c.callers[c.next] = n
		c.next = (c.next + 1) % combineRecall
	}
	record(8)
	if got := c.expected(); got != 8 {
		t.Fatalf("expected after a statement of 8 = %d, want 8", got)
	}
	for range combineRecall - 1 {
		record(2)
	}
	if got := c.expected(); got != 8 {
		t.Fatalf("expected while the 8 is recent = %d, want 8", got)
	}
	record(2)
	if got := c.expected(); got != 2 {
		t.Fatalf("expected after %d statements of 2 = %d, want 2", combineRecall, got)
	}
}
