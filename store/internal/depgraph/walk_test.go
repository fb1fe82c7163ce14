package depgraph

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sortiehq/sortie/store"
)

func TestSettle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		state   store.JobState
		deleted bool
		ignore  bool
		want    Fate
	}{
		{"completed releases", store.JobStateCompleted, false, false, Fate{Release: true}},
		{"ignored failure releases", store.JobStateDead, false, true, Fate{Release: true}},
		{"ignored deletion releases", store.JobStateCancelled, true, true, Fate{Release: true}},
		{"dead cancels, naming the cause", store.JobStateDead, false, false,
			Fate{Message: "dependency job 7 ended dead", By: 7}},
		{"deletion cancels with no cause", store.JobStateCancelled, true, false,
			Fate{Message: "dependency job 7 was deleted"}},
	}
	for _, tt := range tests {
		if got := Settle(7, tt.state, tt.deleted, tt.ignore); got != tt.want {
			t.Errorf("%s: Settle() = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// graph is a dependency graph in a map: waits[j] lists the jobs j waits
// for, cancelledBy[j] the job whose ending cancelled j.
type graph struct {
	waits       map[int64][]int64
	ignore      map[int64]bool
	cancelledBy map[int64]int64
	released    []int64
	cancelled   []Fate
	stuck       map[int64]bool // jobs Revive must leave cancelled
	revived     []int64
}

func (g *graph) Dependents(ids []int64) ([]Dependent[int64], error) {
	var out []Dependent[int64]
	for j := int64(1); j <= 9; j++ {
		for _, d := range g.waits[j] {
			for _, id := range ids {
				if d == id {
					out = append(out, Dependent[int64]{Dep: id, Ignore: g.ignore[j], Row: j})
				}
			}
		}
	}
	for _, d := range out {
		delete(g.waits, d.Row)
	}
	return out, nil
}

func (g *graph) Apply(ds []Dependent[int64]) ([]int64, error) {
	var next []int64
	for _, d := range ds {
		if d.Fate.Release {
			g.released = append(g.released, d.Row)
			continue
		}
		g.cancelled = append(g.cancelled, d.Fate)
		g.cancelledBy[d.Row] = d.Fate.By
		next = append(next, d.Row)
	}
	return next, nil
}

func (g *graph) CancelledBy(id int64) ([]int64, error) {
	var out []int64
	for j := int64(1); j <= 9; j++ {
		if c, ok := g.cancelledBy[j]; ok && c == id {
			out = append(out, j)
		}
	}
	return out, nil
}

func (g *graph) Revive(y int64) (int64, error) {
	if g.stuck[y] {
		return 0, nil
	}
	delete(g.cancelledBy, y)
	g.revived = append(g.revived, y)
	return y, nil
}

func TestCascadeAndRevive(t *testing.T) {
	t.Parallel()
	// 2 and 3 wait for 1; 4 waits for 2 and ignores failures; 5 waits
	// for 3.
	g := &graph{
		waits:       map[int64][]int64{2: {1}, 3: {1}, 4: {2}, 5: {3}},
		ignore:      map[int64]bool{4: true},
		cancelledBy: map[int64]int64{},
	}
	if err := Cascade(g, []int64{1}, store.JobStateDead, false); err != nil {
		t.Fatal(err)
	}
	if want := []int64{4}; !cmp.Equal(g.released, want) {
		t.Errorf("released %v, want %v", g.released, want)
	}
	wantBy := map[int64]int64{2: 1, 3: 1, 5: 3}
	if !cmp.Equal(g.cancelledBy, wantBy) {
		t.Errorf("cancelled by %v, want %v", g.cancelledBy, wantBy)
	}
	if got, want := g.cancelled[2].Message, "dependency job 3 ended cancelled"; got != want {
		t.Errorf("5's error = %q, want %q (a cascade's later levels end cancelled)", got, want)
	}
	g.stuck = map[int64]bool{2: true}
	if err := Revive(g, 1); err != nil {
		t.Fatal(err)
	}
	if want := []int64{3, 5}; !cmp.Equal(g.revived, want) {
		t.Errorf("revived %v, want %v", g.revived, want)
	}
	if want := map[int64]int64{2: 1}; !cmp.Equal(g.cancelledBy, want) {
		t.Errorf("after the revive, cancelled by %v, want %v (a job that cannot wait keeps its cause)", g.cancelledBy, want)
	}
}
