package web

import (
	"slices"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/jobjson"
)

// The chart's axes: counts from 0 to a round top above the highest bar,
// with its middle; times every 10 minutes over an hour, in UTC; a bar per
// minute with counts, its segments stacked from the axis up, inside the
// plot.
func TestChartAxes(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 1, 2, 12, 34, 56, 0, time.UTC)
	h := &jobjson.History{Since: until.Add(-time.Hour), Until: until, Points: []jobjson.HistoryPoint{
		{At: time.Date(2026, 1, 2, 11, 40, 0, 0, time.UTC), Outcomes: jobjson.Outcomes{Completed: 5, Dead: 2, Retried: 9}},
		{At: time.Date(2026, 1, 2, 12, 34, 0, 0, time.UTC), Outcomes: jobjson.Outcomes{Completed: 1}},
	}}
	c := chart(h, 0, time.Minute, "/")

	var y []string
	for _, tk := range c.YTicks {
		y = append(y, tk.Label)
	}
	if want := []string{"0", "5", "10"}; !slices.Equal(y, want) {
		t.Errorf("y axis labels = %v, want %v: a round top above the highest bar (7)", y, want)
	}
	var x []string
	for _, tk := range c.XTicks {
		x = append(x, tk.Label)
		if tk.X < c.Left || tk.X > c.Right {
			t.Errorf("x label %q at %v, outside the plot [%v, %v]", tk.Label, tk.X, c.Left, c.Right)
		}
	}
	if want := []string{"11:40", "11:50", "12:00", "12:10", "12:20", "12:30"}; !slices.Equal(x, want) {
		t.Errorf("x axis labels = %v, want %v", x, want)
	}
	if c.Step != "minute" || len(c.Bars) != 2 {
		t.Fatalf("chart per %q with %d bars, want per minute with 2", c.Step, len(c.Bars))
	}
	b := c.Bars[0]
	if len(b.Segments) != 2 || b.Segments[0].Class != "completed" || b.Segments[1].Class != "dead" ||
		b.Segments[0].Y+b.Segments[0].H != c.Base || b.Segments[1].Y+b.Segments[1].H != b.Segments[0].Y {
		t.Errorf("first bar's segments = %+v, want completed on the axis and dead on top of it", b.Segments)
	}
	if top := b.Segments[1].Y; top < c.Top || b.X < c.Left || b.X+b.W > c.Right {
		t.Errorf("first bar at x %v..%v, top %v: outside the plot", b.X, b.X+b.W, top)
	}
	if want := "Jan 02 11:40–11:41 UTC: 5 completed, 0 cancelled, 2 dead; 9 retried"; b.Label != want {
		t.Errorf("first bar's label = %q, want %q", b.Label, want)
	}
}
