package fetchplan

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sortiehq/sortie/store"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func TestPartitionRoom(t *testing.T) {
	t.Parallel()
	s := &store.QueueSettings{PartitionMaxRunning: 2, PartitionRateLimit: 5, PartitionRatePeriod: time.Second}
	for _, tt := range []struct{ limit, running, started, want int64 }{
		{10, 0, 0, 2}, {10, 1, 0, 1}, {10, 0, 4, 1}, {10, 3, 0, 0}, {1, 0, 0, 1},
	} {
		if got := PartitionRoom(*s, tt.limit, tt.running, tt.started); got != tt.want {
			t.Errorf("PartitionRoom(%d, %d, %d) = %d, want %d", tt.limit, tt.running, tt.started, got, tt.want)
		}
	}
}

func TestMergeHeads(t *testing.T) {
	t.Parallel()
	heads := []Head{
		{ID: 5, Priority: 2, RunAt: t0},
		{ID: 2, Priority: 1, RunAt: t0.Add(time.Second)},
		{ID: 9, Priority: 1, RunAt: t0},
		{ID: 3, Priority: 2, RunAt: t0},
	}
	if got, want := MergeHeads(heads, 3), []int64{9, 2, 3}; !cmp.Equal(got, want) {
		t.Errorf("MergeHeads() = %v, want %v", got, want)
	}
	if got := MergeHeads(nil, 3); len(got) != 0 {
		t.Errorf("MergeHeads(nil) = %v, want none", got)
	}
}
func TestOldestDue(t *testing.T) {
	t.Parallel()
	now := t0
	tests := []struct {
		name               string
		available, waiting time.Time
		want               time.Time
	}{
		{"nothing", time.Time{}, time.Time{}, time.Time{}},
		{"available only", now.Add(-time.Minute), time.Time{}, now.Add(-time.Minute)},
		{"waiting, not due", time.Time{}, now.Add(time.Second), time.Time{}},
		{"waiting, due now", time.Time{}, now, now},
		{"due waiting older than available", now.Add(-time.Second), now.Add(-time.Hour), now.Add(-time.Hour)},
		{"available older than due waiting", now.Add(-time.Hour), now.Add(-time.Second), now.Add(-time.Hour)},
		{"available, waiting not due", now.Add(-time.Hour), now.Add(time.Hour), now.Add(-time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := OldestDue(tt.available, tt.waiting, now); !got.Equal(tt.want) {
				t.Errorf("OldestDue(%v, %v) = %v, want %v", tt.available, tt.waiting, got, tt.want)
			}
		})
	}
}
