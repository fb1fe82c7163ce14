package depgraph

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sortiehq/sortie/store"
)

func TestDependencyIDs(t *testing.T) {
	t.Parallel()
	j := &store.NewJob{DependsOn: []int64{5, 3, 5}, DependsOnIndex: []int{0, 1}}
	res := []store.EnqueueResult{{ID: 3, Duplicate: true}, {ID: 9}}
	if got, want := IDs(j, res), []int64{5, 3, 9}; !cmp.Equal(got, want) {
		t.Errorf("IDs() = %v, want %v", got, want)
	}
}

func TestJudgeDeps(t *testing.T) {
	t.Parallel()
	deps := []int64{1, 2}
	tests := []struct {
		name   string
		ignore bool
		states []store.JobState
		want   Verdict
	}{
		{"all completed", false, []store.JobState{store.JobStateCompleted, store.JobStateCompleted}, Verdict{State: store.JobStateScheduled}},
		{"one pending", false, []store.JobState{store.JobStateCompleted, store.JobStateRunning}, Verdict{State: store.JobStateWaiting}},
		{"failed wins over pending", false, []store.JobState{store.JobStateRunning, store.JobStateDead},
			Verdict{State: store.JobStateCancelled, CancelledBy: 2, Message: "dependency job 2 ended dead"}},
		{"ignored failure", true, []store.JobState{store.JobStateCancelled, store.JobStateCompleted}, Verdict{State: store.JobStateScheduled}},
		{"ignored failure still waits", true, []store.JobState{store.JobStateCancelled, store.JobStateAvailable}, Verdict{State: store.JobStateWaiting}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Judge(store.JobStateScheduled, tt.ignore, deps, tt.states); got != tt.want {
				t.Errorf("Judge(%v) = %+v, want %+v", tt.states, got, tt.want)
			}
		})
	}
}
