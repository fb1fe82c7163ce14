package pgstore

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
)

// The first enqueue of a queue notifies in its statement; enqueues within
// the gap are left out, and one NOTIFY follows their commit at the end of
// the gap, so the last job of a burst always wakes the workers.
func TestDebouncerTrailingNotify(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var sent [][]string
	d := newDebouncer(fake, func(q []string) {
		mu.Lock()
		sent = append(sent, q)
		mu.Unlock()
	})
	now, later := d.take([]string{"a"})
	if !slices.Equal(now, []string{"a"}) || len(later) != 0 {
		t.Fatalf("first take = %v, %v; want [a], []", now, later)
	}
	fake.Advance(notifyGap / 4)
	for i := range 5 {
		now, later = d.take([]string{"a", "b"})
		if i == 0 && (!slices.Equal(now, []string{"b"}) || !slices.Equal(later, []string{"a"})) {
			t.Fatalf("take within a's gap = %v, %v; want [b] now, [a] later", now, later)
		}
		if i > 0 && (len(now) != 0 || !slices.Equal(later, []string{"a", "b"})) {
			t.Fatalf("take %d within both gaps = %v, %v; want [] now, [a b] later", i, now, later)
		}
		d.committed(later)
	}
	// The NOTIFYs wait for the end of each queue's gap (a's at 1 gap, b's
	// at 1.25), and there is one per queue however many enqueues were
	// deferred.
	fake.Advance(notifyGap - notifyGap/4 - 1)
	if next, _ := fake.NextDeadline(); !next.After(fake.Now()) {
		t.Fatalf("a timer is due at %v, before the end of a's gap", next)
	}
	fake.Advance(notifyGap)
	d.flushes.Wait()
	mu.Lock()
	got := slices.Clone(sent)
	mu.Unlock()
	slices.SortFunc(got, slices.Compare)
	if want := [][]string{{"a"}, {"b"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("deferred NOTIFYs = %v, want %v (one per queue, at the end of its gap)", got, want)
	}
	// After the gap, a new enqueue notifies in its own statement again.
	fake.Advance(2 * notifyGap)
	if now, _ := d.take([]string{"a"}); !slices.Equal(now, []string{"a"}) {
		t.Fatalf("take after the gap = %v, want [a]", now)
	}
}
