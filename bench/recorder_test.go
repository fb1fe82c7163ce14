package bench_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
)

func TestRecorder(t *testing.T) {
	t.Parallel()
	r := bench.NewRecorder(3, true)
	at := r.Now()
	for _, tt := range []struct {
		seq  int64
		want bool
	}{{0, true}, {1, true}, {5, false}, {-1, false}} {
		if got := r.Record(tt.seq, at); got != tt.want {
			t.Errorf("Record(%d) = %t, want %t", tt.seq, got, tt.want)
		}
	}
	select {
	case <-r.AllRan():
		t.Fatal("AllRan closed with job 2 not run")
	default:
	}
	if got := r.Ran(); got != 2 {
		t.Errorf("Ran() = %d, want 2", got)
	}
	r.Record(2, at-int64(time.Second)) // enqueued a second before the others
	select {
	case <-r.AllRan():
	default:
		t.Fatal("AllRan not closed with every job run")
	}
	r.Record(1, at)
	if got := r.Ran(); got != 4 {
		t.Errorf("Ran() = %d, want 4 (job 1 twice)", got)
	}

	counts := []store.QueueStateCount{{Queue: "q", State: store.JobStateCompleted, Count: 3}}
	tally := r.Tally(counts, []string{"earlier"})
	if !slices.Equal(tally.Runs, []int32{1, 2, 1}) || tally.Stray != 2 {
		t.Errorf("Tally() runs %v, stray %d, want [1 2 1] and 2", tally.Runs, tally.Stray)
	}
	if !slices.Equal(tally.Counts, counts) || !slices.Equal(tally.Problems, []string{"earlier"}) {
		t.Errorf("Tally() counts %v, problems %q, want them as given", tally.Counts, tally.Problems)
	}

	lat := r.Latencies()
	if len(lat) != 3 {
		t.Fatalf("Latencies() = %v, want 3", lat)
	}
	since := time.Duration(r.Now() - at)
	if lat[0] < 0 || lat[0] > since {
		t.Errorf("job 0's latency %v, want from 0 to %v", lat[0], since)
	}
	if lat[2] < time.Second || lat[2] > since+time.Second {
		t.Errorf("job 2's latency %v, want from 1s to %v", lat[2], since+time.Second)
	}
	if got := bench.NewRecorder(3, false).Latencies(); got != nil {
		t.Errorf("Latencies() without latency = %v, want nil", got)
	}
}
