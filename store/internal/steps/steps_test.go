package steps

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

func TestSleepState(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		until time.Time
		want  store.JobState
	}{
		{"later", now.Add(time.Second), store.JobStateScheduled},
		{"now", now, store.JobStateAvailable},
		{"past", now.Add(-time.Hour), store.JobStateAvailable},
	} {
		if got := SleepState(tt.until, now); got != tt.want {
			t.Errorf("%s: SleepState = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestChecks(t *testing.T) {
	t.Parallel()
	job := func(key string) *store.NewJob {
		return &store.NewJob{Kind: "k", Queue: "q", Args: []byte(`{}`), UniqueKey: key}
	}
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"record: bad JSON", CheckRecords([]*store.StepRecord{{ID: 1, Name: "a", Result: []byte(`{`)}}), "not valid JSON"},
		{"record: nil", CheckRecords([]*store.StepRecord{nil}), "is nil"},
		{"record: empty name", CheckRecords([]*store.StepRecord{{ID: 1, Result: []byte(`1`)}}), "step name is empty"},
		{"sleep: until past LatestRunAt", CheckSleep(&store.StepSleepParams{Name: "s", Until: store.LatestRunAt.Add(time.Hour)}), "until must be between"},
		{"spawn: no jobs", CheckSpawn(&store.StepSpawnParams{Name: "s"}), "0 jobs"},
		{"spawn: a unique key", CheckSpawn(&store.StepSpawnParams{Name: "s", Jobs: []*store.NewJob{job(""), job("u")}}), "has a unique key"},
		{"spawn: a bad job", CheckSpawn(&store.StepSpawnParams{Name: "s", Jobs: []*store.NewJob{{Queue: "q"}}}), "kind is empty"},
		{"kind", Existing(7, &store.JobStep{Name: "x", Kind: store.StepRun}, store.StepSleep), `step "x" is recorded as a step, not a sleep`},
	} {
		if !errors.Is(tt.err, store.ErrInvalidArgument) || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: error %v, want ErrInvalidArgument saying %q", tt.name, tt.err, tt.want)
		}
	}
	if err := CheckSpawn(&store.StepSpawnParams{Name: "s", Jobs: []*store.NewJob{job("")}}); err != nil {
		t.Errorf("CheckSpawn(a valid job) = %v", err)
	}
}

func TestImportAwaitReady(t *testing.T) {
	t.Parallel()
	held := map[int64]bool{2: true, 3: true}
	in := func(id int64) bool { return held[id] }
	for _, tt := range []struct {
		name string
		step store.JobStep
		want bool
	}{
		{"all held, none pending", store.JobStep{Children: []int64{2, 3}}, true},
		{"one pending", store.JobStep{Children: []int64{2, 3}, Pending: 1}, false},
		{"one not yet imported", store.JobStep{Children: []int64{2, 3, 4}}, false},
		{"no children left", store.JobStep{}, true},
	} {
		if got := ImportAwaitReady(&tt.step, in); got != tt.want {
			t.Errorf("%s: ImportAwaitReady = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestWaitsForShownOnlyWhileWaiting(t *testing.T) {
	t.Parallel()
	for _, s := range store.JobStates {
		want := ""
		if s == store.JobStateWaiting || s == store.JobStateScheduled {
			want = "nap"
		}
		if got := WaitsFor(s, "nap"); got != want {
			t.Errorf("WaitsFor(%s) = %q, want %q", s, got, want)
		}
	}
	ids, err := DecodeChildren(EncodeChildren([]int64{5, 6}))
	if err != nil || len(ids) != 2 || ids[1] != 6 {
		t.Errorf("children round trip = %v, %v", ids, err)
	}
}

func TestChildren(t *testing.T) {
	t.Parallel()
	ids, pending := Children([]store.EnqueueResult{
		{ID: 4, State: store.JobStateAvailable}, {ID: 5, State: store.JobStateCancelled}, {ID: 6, State: store.JobStateWaiting},
	})
	if len(ids) != 3 || ids[0] != 4 || ids[1] != 5 || ids[2] != 6 || pending != 2 {
		t.Errorf("Children() = %v, %d; want [4 5 6], 2 pending", ids, pending)
	}
}
