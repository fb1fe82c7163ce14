package pgstore

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// The first enqueue of a queue notifies in its statement; enqueues within
// the gap are left out, and one NOTIFY follows their commit, so the last
// job of a burst always wakes the workers.
func TestDebouncerTrailingNotify(t *testing.T) {
	var mu sync.Mutex
	var sent [][]string
	d := newDebouncer(func(q []string) {
		mu.Lock()
		sent = append(sent, q)
		mu.Unlock()
	})
	now, later := d.take([]string{"a"})
	if !slices.Equal(now, []string{"a"}) || len(later) != 0 {
		t.Fatalf("first take = %v, %v; want [a], []", now, later)
	}
	var deferred []string
	for range 5 {
		_, later = d.take([]string{"a", "b"})
		deferred = append(deferred, later...)
		d.committed(later)
	}
	if !slices.Contains(deferred, "a") {
		t.Fatalf("takes within the gap deferred %v, want a among them", deferred)
	}
	d.flushes.Wait()
	mu.Lock()
	defer mu.Unlock()
	count := 0
	for _, q := range sent {
		if slices.Contains(q, "a") {
			count++
		}
	}
	// One per gap at most: the burst took a few gaps at most, even under -race.
	if count == 0 || count > len(deferred) {
		t.Fatalf("deferred NOTIFYs of a = %d (%v), want 1 (and never one per deferred enqueue: %d)", count, sent, len(deferred))
	}
	// After the gap, a new enqueue notifies in its own statement again.
	time.Sleep(2 * notifyGap)
	if now, _ := d.take([]string{"a"}); !slices.Equal(now, []string{"a"}) {
		t.Fatalf("take after the gap = %v, want [a]", now)
	}
}
