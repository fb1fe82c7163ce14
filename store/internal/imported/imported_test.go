package imported

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sortiehq/sortie/store"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func TestImportStatuses(t *testing.T) {
	t.Parallel()
	row := func(id int64, kind string, st store.JobState, key string) *store.JobRow {
		return &store.JobRow{ID: id, Kind: kind, Queue: "q", Args: []byte(`{"a": 1}`), State: st, CreatedAt: t0, UniqueKey: key}
	}
	storedRows := map[int64]*store.JobRow{
		1: row(1, "same", store.JobStateCompleted, ""),
		2: row(2, "other", store.JobStateAvailable, ""),
	}
	storedRows[1].Args = []byte(`{"a":1}`) // as jsonb spells it
	stored := func(id int64) *store.JobRow { return storedRows[id] }
	holders := map[string]int64{"held": 2}
	holder := func(key string) (int64, bool) { id, ok := holders[key]; return id, ok }
	tests := []struct {
		name     string
		jobs     []*store.JobRow
		want     []store.ImportResult
		conflict bool
	}{
		{"new jobs are added", []*store.JobRow{row(3, "x", store.JobStateAvailable, "k"), row(4, "x", store.JobStateCompleted, "k")},
			[]store.ImportResult{{Status: store.ImportAdded}, {Status: store.ImportAdded}}, false},
		{"the same job is present, its key unchecked", []*store.JobRow{row(1, "same", store.JobStateAvailable, "held")},
			[]store.ImportResult{{Status: store.ImportPresent}}, false},
		{"another job's ID is taken", []*store.JobRow{row(2, "mine", store.JobStateAvailable, "")},
			[]store.ImportResult{{Status: store.ImportIDTaken}}, true},
		{"a key the store holds", []*store.JobRow{row(3, "x", store.JobStateWaiting, "held")},
			[]store.ImportResult{{Status: store.ImportUniqueTaken, Other: 2}}, true},
		{"a key an earlier job of the call holds", []*store.JobRow{row(3, "x", store.JobStateRunning, "k"), row(4, "x", store.JobStateRetrying, "k")},
			[]store.ImportResult{{Status: store.ImportAdded}, {Status: store.ImportUniqueTaken, Other: 3}}, true},
		{"finished jobs hold no key", []*store.JobRow{row(3, "x", store.JobStateDead, "held"), row(4, "x", store.JobStateCancelled, "held")},
			[]store.ImportResult{{Status: store.ImportAdded}, {Status: store.ImportAdded}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, conflict := Statuses(tt.jobs, stored, holder)
			if d := cmp.Diff(tt.want, got); d != "" || conflict != tt.conflict {
				t.Errorf("Statuses() conflict %v, want %v; results (-want +got):\n%s", conflict, tt.conflict, d)
			}
		})
	}
}
