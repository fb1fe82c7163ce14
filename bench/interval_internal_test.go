package bench

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

func TestMeasureStarts(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// at returns t0 plus each offset in milliseconds.
	at := func(ms ...int) []time.Time {
		ts := make([]time.Time, len(ms))
		for i, m := range ms {
			ts[i] = t0.Add(time.Duration(m) * time.Millisecond)
		}
		return ts
	}
	// burst returns n starts at ms.
	burst := func(ms, n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = ms
		}
		return out
	}
	concat := func(parts ...[]int) []int {
		var out []int
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tt := range []struct {
		name            string
		starts          []time.Time
		period, window  time.Duration
		wantIn, wantMax int
	}{
		{"none", nil, time.Second, time.Second, 0, 0},
		{"one", at(5), time.Second, time.Second, 1, 1},
		{"evenly spaced", at(0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100),
			time.Second, time.Second, 10, 10},
		// A start exactly one period after another is in the next window.
		{"bursts a period apart", at(concat(burst(0, 5), burst(1000, 5), burst(2000, 5), burst(3000, 5))...),
			time.Second, 3 * time.Second, 15, 5},
		{"bursts a little late", at(concat(burst(0, 5), burst(1002, 5), burst(2004, 5), burst(3006, 5))...),
			time.Second, 3 * time.Second, 15, 5},
		// Two bursts 999 ms apart share a window: the limit was broken.
		{"bursts too close", at(concat(burst(0, 5), burst(999, 5), burst(2000, 5))...),
			time.Second, 3 * time.Second, 15, 10},
		{"split burst", at(concat(burst(0, 3), burst(1, 2), burst(1000, 3), burst(1001, 2), burst(2000, 1))...),
			time.Second, time.Second, 5, 5},
		{"split burst overlapping", at(concat(burst(0, 3), burst(1, 2), burst(1000, 3), burst(1000, 3))...),
			time.Second, time.Second, 5, 8},
		{"unsorted", at(2000, 0, 1000, 500, 1500), time.Second, 2 * time.Second, 4, 2},
		{"short period", at(0, 10, 20, 30, 40, 50), 25 * time.Millisecond, 50 * time.Millisecond, 5, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := measureStarts(tt.starts, tt.period, tt.window)
			if m.inWindow != tt.wantIn || m.maxInPeriod != tt.wantMax {
				t.Errorf("measureStarts() = %d in window, %d at most in a period; want %d and %d",
					m.inWindow, m.maxInPeriod, tt.wantIn, tt.wantMax)
			}
		})
	}
}

func TestRateErrorPct(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ got, want, pct float64 }{
		{50, 50, 0}, {47.5, 50, 5}, {52.5, 50, 5}, {66.7, 50, 33.4}, {0, 50, 100},
	} {
		if got := rateErrorPct(tt.got, tt.want); math.Abs(got-tt.pct) > 1e-9 {
			t.Errorf("rateErrorPct(%g, %g) = %g, want %g", tt.got, tt.want, got, tt.pct)
		}
	}
}

func TestIntervalJobs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rate             float64
		duration, period time.Duration
		processes        int
		wantJobs, wantW  int
	}{
		{50, 3 * time.Second, time.Second, 2, 250, 25},
		{50, 2500 * time.Millisecond, time.Second, 2, 250, 25},
		{1000, time.Second, 100 * time.Millisecond, 3, 12_000, 100},
		{1, time.Second, time.Second, 4, 3, 1},
	} {
		t.Run(fmt.Sprintf("%g per %s for %s", tt.rate, tt.period, tt.duration), func(t *testing.T) {
			t.Parallel()
			opts := &Options{Rate: tt.rate, Duration: tt.duration, Period: tt.period, Processes: tt.processes,
				HelperCommand: func(store.Store) ([]string, error) { return nil, nil }}
			o, err := opts.WithDefaults(Interval)
			if err != nil {
				t.Fatal(err)
			}
			if o.Jobs != tt.wantJobs || o.Workers != tt.wantW {
				t.Errorf("WithDefaults() makes %d jobs with %d workers a process, want %d and %d", o.Jobs, o.Workers, tt.wantJobs, tt.wantW)
			}
		})
	}
}

func TestHelperOutput(t *testing.T) {
	t.Parallel()
	o := &helperOutput{ready: make(chan struct{})}
	_, _ = o.Write([]byte("sortie-bench-helper re"))
	select {
	case <-o.ready:
		t.Fatal("ready closed before the ready line was complete")
	default:
	}
	_, _ = o.Write([]byte("ady\n{\"id\":\"q/p1\",\"ran\":[1,2]}\n"))
	select {
	case <-o.ready:
	default:
		t.Fatal("ready not closed after the ready line")
	}
	if got, want := string(o.lastLine()), `{"id":"q/p1","ran":[1,2]}`; got != want {
		t.Errorf("lastLine() = %q, want %q", got, want)
	}

	var tb tailBuffer
	tb.max = 4
	_, _ = tb.Write([]byte("abc"))
	_, _ = tb.Write([]byte("defg"))
	if got := string(tb.bytes()); got != "defg" {
		t.Errorf("tailBuffer kept %q, want %q", got, "defg")
	}
}
