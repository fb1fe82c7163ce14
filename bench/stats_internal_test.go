package bench

import (
	"testing"
	"time"
)

func TestPercentilesOf(t *testing.T) {
	t.Parallel()
	ds := make([]time.Duration, 100)
	for i := range ds {
		// 100 ms down to 1 ms: percentilesOf sorts.
		ds[i] = time.Duration(100-i) * time.Millisecond
	}
	got := percentilesOf(ds)
	want := percentiles{p50: 50, p95: 95, p99: 99, max: 100}
	if got != want {
		t.Errorf("percentilesOf(1..100 ms) = %+v, want %+v", got, want)
	}
	if got := percentilesOf([]time.Duration{3 * time.Millisecond}); got != (percentiles{3, 3, 3, 3}) {
		t.Errorf("percentilesOf(3 ms) = %+v, want all 3", got)
	}
	if got := percentilesOf(nil); got != (percentiles{}) {
		t.Errorf("percentilesOf(nil) = %+v, want zeros", got)
	}
}
