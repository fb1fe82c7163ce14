package store

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestImportStatuses(t *testing.T) {
	t.Parallel()
	row := func(id int64, kind string, st JobState, key string) *JobRow {
		return &JobRow{ID: id, Kind: kind, Queue: "q", Args: []byte(`{"a": 1}`), State: st, CreatedAt: t0, UniqueKey: key}
	}
	storedRows := map[int64]*JobRow{
		1: row(1, "same", JobStateCompleted, ""),
		2: row(2, "other", JobStateAvailable, ""),
	}
	storedRows[1].Args = []byte(`{"a":1}`) // as jsonb spells it
	stored := func(id int64) *JobRow { return storedRows[id] }
	holders := map[string]int64{"held": 2}
	holder := func(key string) (int64, bool) { id, ok := holders[key]; return id, ok }
	tests := []struct {
		name     string
		jobs     []*JobRow
		want     []ImportResult
		conflict bool
	}{
		{"new jobs are added", []*JobRow{row(3, "x", JobStateAvailable, "k"), row(4, "x", JobStateCompleted, "k")},
			[]ImportResult{{Status: ImportAdded}, {Status: ImportAdded}}, false},
		{"the same job is present, its key unchecked", []*JobRow{row(1, "same", JobStateAvailable, "held")},
			[]ImportResult{{Status: ImportPresent}}, false},
		{"another job's ID is taken", []*JobRow{row(2, "mine", JobStateAvailable, "")},
			[]ImportResult{{Status: ImportIDTaken}}, true},
		{"a key the store holds", []*JobRow{row(3, "x", JobStateWaiting, "held")},
			[]ImportResult{{Status: ImportUniqueTaken, Other: 2}}, true},
		{"a key an earlier job of the call holds", []*JobRow{row(3, "x", JobStateRunning, "k"), row(4, "x", JobStateRetrying, "k")},
			[]ImportResult{{Status: ImportAdded}, {Status: ImportUniqueTaken, Other: 3}}, true},
		{"finished jobs hold no key", []*JobRow{row(3, "x", JobStateDead, "held"), row(4, "x", JobStateCancelled, "held")},
			[]ImportResult{{Status: ImportAdded}, {Status: ImportAdded}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, conflict := ImportStatuses(tt.jobs, stored, holder)
			if d := cmp.Diff(tt.want, got); d != "" || conflict != tt.conflict {
				t.Errorf("ImportStatuses() conflict %v, want %v; results (-want +got):\n%s", conflict, tt.conflict, d)
			}
		})
	}
}
