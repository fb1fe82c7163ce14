package intake

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sortiehq/sortie/store"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func TestStartState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		runAt time.Time
		state store.JobState
		at    time.Time
	}{
		{"zero is now", time.Time{}, store.JobStateAvailable, t0},
		{"past stays", t0.Add(-time.Hour), store.JobStateAvailable, t0.Add(-time.Hour)},
		{"now is available", t0, store.JobStateAvailable, t0},
		{"later is scheduled", t0.Add(time.Second), store.JobStateScheduled, t0.Add(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, at := StartState(tt.runAt, t0)
			if st != tt.state || !at.Equal(tt.at) {
				t.Errorf("StartState(%v) = %s, %v; want %s, %v", tt.runAt, st, at, tt.state, tt.at)
			}
		})
	}
}

func TestBatchDuplicates(t *testing.T) {
	t.Parallel()
	jobs := []*store.NewJob{{UniqueKey: "a"}, {UniqueKey: "b"}, {UniqueKey: "a"}, {}, {UniqueKey: "b"}}
	res := make([]store.EnqueueResult, len(jobs))
	if !MarkDuplicates(jobs, res) {
		t.Fatal("MarkDuplicates() = false, want true for a batch with keys")
	}
	// Job 1 duplicates a pending holder (ID 7); the others are new.
	res[0] = store.EnqueueResult{ID: 10, State: store.JobStateAvailable}
	res[1] = store.EnqueueResult{ID: 7, Duplicate: true, State: store.JobStateRunning}
	res[3] = store.EnqueueResult{ID: 11, State: store.JobStateScheduled}
	ResolveDuplicates(res)
	want := []store.EnqueueResult{
		{ID: 10, State: store.JobStateAvailable},
		{ID: 7, Duplicate: true, State: store.JobStateRunning},
		{ID: 10, Duplicate: true, State: store.JobStateAvailable},
		{ID: 11, State: store.JobStateScheduled},
		{ID: 7, Duplicate: true, State: store.JobStateRunning},
	}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("results mismatch (-want +got):\n%s", diff)
	}
	if MarkDuplicates([]*store.NewJob{{}, {}}, make([]store.EnqueueResult, 2)) {
		t.Error("MarkDuplicates() = true for a batch without keys, want false")
	}
}

func TestDepthExcess(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		queued, adding int64
		max            int
		want           int64
	}{{9, 2, 10, 1}, {8, 2, 10, 0}, {50, 1, 0, 0}, {3, 0, 2, 0}} {
		if got := DepthExcess(tt.queued, tt.adding, tt.max); got != tt.want {
			t.Errorf("DepthExcess(%d, %d, %d) = %d, want %d", tt.queued, tt.adding, tt.max, got, tt.want)
		}
	}
}
