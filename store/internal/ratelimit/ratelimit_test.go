package ratelimit

import (
	"testing"
	"time"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func TestRateWindow(t *testing.T) {
	t.Parallel()
	w := Window{Limit: 3, Period: time.Minute}
	if got := w.From(t0); !got.Equal(t0.Add(-time.Minute)) {
		t.Errorf("From() = %v", got)
	}
	if got := w.ForgetBefore(t0); !got.Equal(t0.Add(-2*time.Minute - time.Second)) {
		t.Errorf("ForgetBefore() = %v", got)
	}
	if got := w.Room(1); got != 2 {
		t.Errorf("Room(1) = %d, want 2", got)
	}
	if got := w.Room(5); got != 0 {
		t.Errorf("Room(5) = %d, want 0", got)
	}
	starts := []Start{{t0.Add(-50 * time.Second), 2}, {t0.Add(-10 * time.Second), 2}}
	// 4 starts, limit 3: a start is allowed once 2 left the window, which
	// the first row's leaving does.
	if got, want := w.FreeAt(starts), t0.Add(10*time.Second); !got.Equal(want) {
		t.Errorf("FreeAt() = %v, want %v", got, want)
	}
	if got := w.FreeAt(starts[1:]); !got.IsZero() {
		t.Errorf("FreeAt(2 starts) = %v, want zero (room left)", got)
	}
}
