package web

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sortiehq/sortie/internal/jobjson"
)

// chartPeriods are the periods the overview's chart offers, by the value
// of its ?history= parameter; the first is the default.
var chartPeriods = []struct {
	name   string
	period time.Duration
	// tick is the time between two labels of the x axis; format how they
	// read.
	tick   time.Duration
	format string
}{
	{"1h", time.Hour, 10 * time.Minute, "15:04"},
	{"24h", 24 * time.Hour, 4 * time.Hour, "15:04"},
	{"7d", 7 * 24 * time.Hour, 24 * time.Hour, "Mon 02"},
}

// The chart's geometry, in the SVG's coordinates: the plot and the margins
// that hold the axes' labels.
const (
	chartWidth, chartHeight = 1200.0, 230.0
	plotLeft, plotRight     = 44.0, 1192.0
	plotTop, plotBottom     = 8.0, 206.0
)

// segment is one outcome's part of a bar.
type segment struct {
	Y, H  float64
	Class string
}

// bar is one step of the chart: its finished jobs stacked by outcome.
type bar struct {
	X, W     float64
	Segments []segment
	Label    string
}

// tick is a label on an axis, at X (x axis) or Y (y axis).
type tick struct {
	X, Y  float64
	Label string
}

// chartData is what the overview draws.
type chartData struct {
	Period, Step string
	// Periods are the other periods, for links to Base?history=NAME.
	Periods                []string
	Link                   string
	Width, Height          float64
	Left, Right, Top, Base float64
	// PlotH is the height of the plot.
	PlotH float64
	// TitleY is the baseline of the axes' titles.
	TitleY         float64
	Bars           []bar
	XTicks, YTicks []tick
	Totals         jobjson.Outcomes
}

// chart lays out h, read over p's period (the page at link offers the
// others), as stacked bars (completed,
// cancelled, dead) per step, with a labelled axis of time (UTC) and one of
// jobs per step.
func chart(h *jobjson.History, p int, step time.Duration, link string) chartData {
	c := chartData{
		Link: link, Period: chartPeriods[p].name, Step: stepName(step), Width: chartWidth, Height: chartHeight,
		Left: plotLeft, Right: plotRight, Top: plotTop, Base: plotBottom, PlotH: plotBottom - plotTop, TitleY: chartHeight - 4, Totals: h.Totals,
	}
	for i, cp := range chartPeriods {
		if i != p {
			c.Periods = append(c.Periods, cp.name)
		}
	}
	first := h.Since.Truncate(step)
	n := int(h.Until.Sub(first)/step) + 1
	var top int64
	for _, pt := range h.Points {
		top = max(top, pt.Finished())
	}
	scale := niceCeil(top)
	w := (plotRight - plotLeft) / float64(n)
	for _, pt := range h.Points {
		i := int(pt.At.Sub(first) / step)
		if i < 0 || i >= n {
			continue
		}
		b := bar{X: plotLeft + float64(i)*w, W: max(w-1, 1), Label: fmt.Sprintf("%s–%s UTC: %d completed, %d cancelled, %d dead; %d retried",
			pt.At.UTC().Format("Jan 02 15:04"), pt.At.Add(step).UTC().Format("15:04"), pt.Completed, pt.Cancelled, pt.Dead, pt.Retried)}
		y := plotBottom
		for _, s := range []struct {
			n     int64
			class string
		}{{pt.Completed, "completed"}, {pt.Cancelled, "cancelled"}, {pt.Dead, "dead"}} {
			hgt := float64(s.n) / float64(scale) * (plotBottom - plotTop)
			if s.n > 0 {
				y -= hgt
				b.Segments = append(b.Segments, segment{Y: y, H: hgt, Class: s.class})
			}
		}
		c.Bars = append(c.Bars, b)
	}
	for _, v := range []int64{0, scale / 2, scale} {
		c.YTicks = append(c.YTicks, tick{X: plotLeft - 6, Y: plotBottom - float64(v)/float64(scale)*(plotBottom-plotTop), Label: strconv.FormatInt(v, 10)})
	}
	every := chartPeriods[p].tick
	for t := h.Since.Truncate(every).Add(every); t.Before(h.Until); t = t.Add(every) {
		x := plotLeft + float64(t.Sub(first))/float64(step)*w
		c.XTicks = append(c.XTicks, tick{X: x, Y: plotBottom + 16, Label: t.UTC().Format(chartPeriods[p].format)})
	}
	return c
}

// niceCeil returns the smallest of 2, 4, 10, 20, 40, 100, ... (an even
// number, so its half labels the middle of the axis) that is at least n.
func niceCeil(n int64) int64 {
	for m := int64(1); ; m *= 10 {
		for _, f := range []int64{2, 4, 10} {
			if v := f * m; v >= n || v > math.MaxInt64/20 {
				return v
			}
		}
	}
}

// chartPeriod returns the index in chartPeriods of the period named name,
// the first for "".
func chartPeriod(name string) (int, bool) {
	if name == "" {
		return 0, true
	}
	for i, p := range chartPeriods {
		if p.name == name {
			return i, true
		}
	}
	return 0, false
}

// stepName names a step of the chart in words: "minute", "15 minutes",
// "hour", "6 hours", "day".
func stepName(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}} {
		if d%u.d == 0 {
			if n := d / u.d; n > 1 {
				return fmt.Sprintf("%d %ss", n, u.name)
			}
			return u.name
		}
	}
	return d.String()
}

// sparkline is a queue's finished jobs per step as small bars, each with
// its values on hover.
type sparkline struct {
	Width, Height float64
	Bars          []sparkBar
	Total         int64
}

// sparkBar is one step of a sparkline: its outcomes stacked.
type sparkBar struct {
	X        float64
	Segments []segment
	Label    string
}

// Its geometry: bars 2 wide with a gap of 1, 24 high.
const sparkBarW, sparkHeight = 2.0, 24.0

// spark lays out points, read from since to until in steps of step, as a
// bar per step.
func spark(points []jobjson.HistoryPoint, since, until time.Time, step time.Duration) sparkline {
	first := since.Truncate(step)
	n := int(until.Sub(first)/step) + 1
	s := sparkline{Width: float64(n) * (sparkBarW + 1), Height: sparkHeight}
	var top int64
	for _, pt := range points {
		top = max(top, pt.Finished())
	}
	for _, pt := range points {
		i := int(pt.At.Sub(first) / step)
		if i < 0 || i >= n || pt.Finished() == 0 {
			continue
		}
		s.Total += pt.Finished()
		b := sparkBar{X: float64(i) * (sparkBarW + 1), Label: fmt.Sprintf("%s UTC: %d completed, %d cancelled, %d dead",
			pt.At.UTC().Format("15:04"), pt.Completed, pt.Cancelled, pt.Dead)}
		y := sparkHeight
		for _, o := range []struct {
			n     int64
			class string
		}{{pt.Completed, "completed"}, {pt.Cancelled, "cancelled"}, {pt.Dead, "dead"}} {
			if o.n == 0 {
				continue
			}
			h := max(float64(o.n)/float64(top)*sparkHeight, 1)
			y -= h
			b.Segments = append(b.Segments, segment{Y: y, H: h, Class: o.class})
		}
		s.Bars = append(s.Bars, b)
	}
	return s
}
