package jobjson

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Outcomes are the counts of the history outcomes (store.HistoryRow).
type Outcomes struct {
	Completed int64 `json:"completed"`
	Cancelled int64 `json:"cancelled"`
	Dead      int64 `json:"dead"`
	Retried   int64 `json:"retried"`
}

// Add adds n jobs of outcome o.
func (c *Outcomes) Add(o store.HistoryOutcome, n int64) {
	switch o {
	case store.HistoryCompleted:
		c.Completed += n
	case store.HistoryCancelled:
		c.Cancelled += n
	case store.HistoryDead:
		c.Dead += n
	case store.HistoryRetried:
		c.Retried += n
	}
}

// Finished is the jobs that finished: completed, cancelled or dead.
func (c *Outcomes) Finished() int64 { return c.Completed + c.Cancelled + c.Dead }

// HistoryPoint is one step of a history: its start and its counts.
type HistoryPoint struct {
	At time.Time `json:"at"`
	Outcomes
}

// QueueHistory is one queue's history over a period: its totals, and a
// point per step that has counts.
type QueueHistory struct {
	Name   string         `json:"name"`
	Totals Outcomes       `json:"totals"`
	Points []HistoryPoint `json:"points"`
}

// History is the history of a period: from Since to Until, per Step, of
// every queue with counts (or one), and the totals of them all.
type History struct {
	Since  time.Time      `json:"since"`
	Until  time.Time      `json:"until"`
	Step   string         `json:"step"`
	Totals Outcomes       `json:"totals"`
	Points []HistoryPoint `json:"points"`
	Queues []QueueHistory `json:"queues"`
}

// MaxHistoryPeriod is the longest period a history may cover.
const MaxHistoryPeriod = 366 * 24 * time.Hour

// maxHistoryPoints bounds the steps of one history (a week of minutes).
const maxHistoryPoints = 7 * 24 * 60

// historySteps are the steps HistoryStep picks from.
var historySteps = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour}

// HistoryStep returns the step a chart of period uses: the shortest of
// 1m, 5m, 15m, 1h, 6h and 24h that makes at most 200 points (an hour per
// minute, a day per 15 minutes, a week per hour).
func HistoryStep(period time.Duration) time.Duration {
	for _, s := range historySteps {
		if period/s <= 200 {
			return s
		}
	}
	return historySteps[len(historySteps)-1]
}

// ParseHistoryPeriod reads a period to look back over: a duration like
// 90m or 24h, or a number of days like 7d; positive, at most a year.
func ParseHistoryPeriod(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		n, nerr := strconv.Atoi(days)
		d, err = time.Duration(n)*24*time.Hour, nerr
	}
	if err != nil || d <= 0 || d > MaxHistoryPeriod {
		return 0, fmt.Errorf("must be a positive duration like 1h, 24h or 7d, at most 366d, got %q", s)
	}
	return d, nil
}

// ParseHistoryStep reads a step: a whole number of minutes like 1m, 15m or
// 1h, giving at most a week of minutes' points over period.
func ParseHistoryStep(s string, period time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Minute || d%time.Minute != 0 {
		return 0, fmt.Errorf("must be a whole number of minutes like 1m, 15m or 1h, got %q", s)
	}
	if period/d > maxHistoryPoints {
		return 0, fmt.Errorf("%q makes %d points over %s, more than %d: take a longer step", s, period/d, period, maxHistoryPoints)
	}
	return d, nil
}

// HistoryOf shapes rows, a history read per step from since to until
// (sortie.Client.JobHistory): points are sorted oldest first, queues by
// name.
func HistoryOf(rows []store.HistoryRow, since, until time.Time, step time.Duration) *History {
	h := &History{Since: since.UTC(), Until: until.UTC(), Step: step.String(), Points: []HistoryPoint{}, Queues: []QueueHistory{}}
	byQueue := map[string]*QueueHistory{}
	var names []string
	for _, r := range rows {
		q := byQueue[r.Queue]
		if q == nil {
			q = &QueueHistory{Name: r.Queue, Points: []HistoryPoint{}}
			byQueue[r.Queue] = q
			names = append(names, r.Queue)
		}
		q.Totals.Add(r.Outcome, r.Count)
		h.Totals.Add(r.Outcome, r.Count)
		addPoint(&q.Points, r)
		addPoint(&h.Points, r)
	}
	slices.Sort(names)
	for _, n := range names {
		h.Queues = append(h.Queues, *byQueue[n])
	}
	return h
}

// addPoint adds r to the last point of points, or to a new one when r is
// of a later step (rows come oldest first).
func addPoint(points *[]HistoryPoint, r store.HistoryRow) {
	ps := *points
	if n := len(ps); n == 0 || !ps[n-1].At.Equal(r.At) {
		ps = append(ps, HistoryPoint{At: r.At.UTC()})
	}
	ps[len(ps)-1].Add(r.Outcome, r.Count)
	*points = ps
}

// Duration writes a duration to about two significant units, as the
// command line and the dashboard show them: 850ms, 12.3s, 4m10s.
func Duration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
