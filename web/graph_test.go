package web

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/sortiehq/sortie/store"
)

// Every edge of a workflow graph lies inside the drawing, including one
// that spans columns from the last row and so runs below every box (it
// was cut off at the bottom).
func TestWorkflowGraphEdgesInside(t *testing.T) {
	t.Parallel()
	// a -> b -> c and a -> c: the edge a -> c spans a column, below row 0,
	// the only row.
	jobs := []*store.JobRow{
		{ID: 1, Kind: "a", State: store.JobStateCompleted},
		{ID: 2, Kind: "b", State: store.JobStateCompleted, DependsOn: []int64{1}},
		{ID: 3, Kind: "c", State: store.JobStateAvailable, DependsOn: []int64{1, 2}},
	}
	g := layout(jobs, 3)
	if len(g.Edges) != 3 {
		t.Fatalf("layout drew %d edges, want 3", len(g.Edges))
	}
	point := regexp.MustCompile(`(-?[0-9.]+) (-?[0-9.]+)`)
	for _, e := range g.Edges {
		for _, m := range point.FindAllStringSubmatch(e.Path, -1) {
			x, _ := strconv.ParseFloat(m[1], 64)
			y, _ := strconv.ParseFloat(m[2], 64)
			if x < 0 || x > g.Width || y < 0 || y > g.Height {
				t.Errorf("edge %q reaches (%v, %v), outside the %vx%v drawing", e.Path, x, y, g.Width, g.Height)
			}
		}
	}
}
