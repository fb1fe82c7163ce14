package web

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// graph is a workflow laid out for an SVG: its jobs in columns by depth
// (each right of the jobs it depends on), edges from a dependency to its
// dependent.
type graph struct {
	ID            int64
	More          bool
	Width, Height float64
	Nodes         []graphNode
	Edges         []graphEdge
	// Counts are the workflow's jobs per state, for its caption.
	Counts []stateCount
}

// graphNode is a job of the graph: its box's top left corner.
type graphNode struct {
	Job     *store.JobRow
	X, Y    float64
	Kind    string // shortened to fit the box
	Current bool
}

// graphEdge is a dependency: a curve from (X1, Y1) to (X2, Y2) through
// C1 and C2, drawn as the dependency's state (a failed dependency's edge
// is red).
type graphEdge struct {
	Path  string
	State store.JobState
}

type stateCount struct {
	State store.JobState
	Count int
}

// The graph's geometry: boxes nodeW by nodeH, colGap apart across and
// rowGap down, within a margin.
const (
	nodeW, nodeH   = 168.0, 44.0
	colGap, rowGap = 56.0, 14.0
	graphMargin    = 4.0
)

// layout places jobs (a workflow's, by ID) in columns by depth, the
// longest chain of dependencies above each, ordered within a column by
// ID.
func layout(jobs []*store.JobRow, current int64) *graph {
	depth := map[int64]int{}
	for _, j := range jobs { // by ID: a job's dependencies come before it
		depth[j.ID] = 0
		for _, dep := range j.DependsOn {
			if dd, ok := depth[dep]; ok && dd+1 > depth[j.ID] {
				depth[j.ID] = dd + 1
			}
		}
	}
	g := &graph{}
	rows := map[int]int{}
	pos := map[int64]graphNode{}
	counts := map[store.JobState]int{}
	for _, j := range jobs {
		col := depth[j.ID]
		n := graphNode{Job: j, X: graphMargin + float64(col)*(nodeW+colGap), Y: graphMargin + float64(rows[col])*(nodeH+rowGap),
			Kind: shorten(j.Kind, 22), Current: j.ID == current}
		rows[col]++
		pos[j.ID] = n
		g.Nodes = append(g.Nodes, n)
		g.Width = max(g.Width, n.X+nodeW+graphMargin)
		g.Height = max(g.Height, n.Y+nodeH+graphMargin)
		counts[j.State]++
	}
	for _, j := range jobs {
		to := pos[j.ID]
		for _, dep := range j.DependsOn {
			from, ok := pos[dep]
			if !ok {
				continue
			}
			path, bottom := edgePath(from, to)
			g.Edges = append(g.Edges, graphEdge{State: from.Job.State, Path: path})
			g.Height = max(g.Height, bottom+graphMargin)
		}
	}
	for s, n := range counts {
		g.Counts = append(g.Counts, stateCount{State: s, Count: n})
	}
	slices.SortFunc(g.Counts, func(a, b stateCount) int { return cmp.Compare(stateOrder(a.State), stateOrder(b.State)) })
	return g
}

// edgePath returns the curve from the right of node from to the left of
// node to, and the lowest y it reaches. One spanning columns runs through
// the gap below its rows, so it does not pass behind the boxes of the
// columns between; below the last row that gap is under every box, and
// the graph grows to hold it.
func edgePath(from, to graphNode) (path string, bottom float64) {
	x1, y1 := from.X+nodeW, from.Y+nodeH/2
	x2, y2 := to.X-4, to.Y+nodeH/2
	if to.X-from.X <= nodeW+colGap+1 {
		mid := (x1 + x2) / 2
		return fmt.Sprintf("M%.0f %.0f C%.0f %.0f %.0f %.0f %.0f %.0f", x1, y1, mid, y1, mid, y2, x2, y2), max(y1, y2)
	}
	gap := max(from.Y, to.Y) + nodeH + rowGap/2
	c := colGap / 2
	return fmt.Sprintf("M%.0f %.0f C%.0f %.0f %.0f %.0f %.0f %.0f L%.0f %.0f C%.0f %.0f %.0f %.0f %.0f %.0f",
		x1, y1, x1+c, y1, x1, gap, x1+c, gap, x2-c, gap, x2, gap, x2-c, y2, x2, y2), gap
}

// stateOrder is s's place in a job's life.
func stateOrder(s store.JobState) int {
	if i := slices.Index(jobjson.States, s); i >= 0 {
		return i
	}
	return len(jobjson.States)
}

// shorten cuts s to n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
