package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// tile is one of the overview's totals: a state, its jobs and where they
// are listed.
type tile struct {
	State store.JobState
	Count int64
	Link  string
}

// overviewStates are the states the overview shows totals of, in the
// order of a job's life; waiting and cancelled are on the jobs page.
var overviewStates = []store.JobState{store.JobStateAvailable, store.JobStateScheduled, store.JobStateRunning,
	store.JobStateRetrying, store.JobStateDead, store.JobStateCompleted}

// overview: GET /?history=1h|24h|7d, the totals per state, the queues with
// a line of their last hour each, and the chart of the jobs finished over
// that period.
func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) error {
	p, ok := chartPeriod(r.URL.Query().Get("history"))
	if !ok {
		return httperr.Errorf(http.StatusBadRequest, "%q is not a period of the chart: 1h, 24h or 7d.", r.URL.Query().Get("history"))
	}
	ov, err := d.c.QueueOverview(r.Context())
	if err != nil {
		return err
	}
	queues := jobjson.Queues(ov.Queues, ov.Counts, ov.Latency)
	period := chartPeriods[p].period
	step := jobjson.HistoryStep(period)
	now := time.Now()
	h, err := readHistory(r.Context(), d.c, "", period, step, now)
	if err != nil {
		return err
	}
	recent := h
	if p != 0 {
		if recent, err = readHistory(r.Context(), d.c, "", time.Hour, time.Minute, now); err != nil {
			return err
		}
	}
	totals := map[string]int64{}
	for _, q := range queues {
		for s, n := range q.Counts {
			totals[s] += n
		}
	}
	tiles := make([]tile, len(overviewStates))
	for i, s := range overviewStates {
		tiles[i] = tile{State: s, Count: totals[string(s)], Link: "/jobs?state=" + string(s)}
	}
	lines := map[string]sparkline{}
	for _, qh := range recent.Queues {
		lines[qh.Name] = spark(qh.Points, recent.Since, recent.Until, time.Minute)
	}
	rows := make([]queueRow, len(queues))
	for i, q := range queues {
		rows[i] = queueRow{Queue: q, Spark: lines[q.Name]}
	}
	d.render(w, r, http.StatusOK, "overview", map[string]any{
		"Title": "Overview", "Tiles": tiles, "Queues": rows, "Chart": chart(h, p, step, "/"),
		"Done": r.URL.Query().Get("done"),
	})
	return nil
}

// queueRow is a queue of the overview with its line of the last hour.
type queueRow struct {
	jobjson.Queue
	Spark sparkline
}

// queue: GET /queues/{queue}?history=, one queue: its jobs per state,
// limits, latency, and the chart of its finished jobs.
func (d *Dashboard) queue(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("queue")
	p, ok := chartPeriod(r.URL.Query().Get("history"))
	if !ok {
		return httperr.Errorf(http.StatusBadRequest, "%q is not a period of the chart: 1h, 24h or 7d.", r.URL.Query().Get("history"))
	}
	ov, err := d.c.QueueOverview(r.Context())
	if err != nil {
		return err
	}
	queues := jobjson.Queues(ov.Queues, ov.Counts, ov.Latency)
	var q *jobjson.Queue
	for i := range queues {
		if queues[i].Name == name {
			q = &queues[i]
		}
	}
	if q == nil {
		return notFound(fmt.Sprintf("No queue %s", name), fmt.Sprintf("No queue is named %q: it has no jobs and no settings.", name))
	}
	period := chartPeriods[p].period
	step := jobjson.HistoryStep(period)
	h, err := readHistory(r.Context(), d.c, name, period, step, time.Now())
	if err != nil {
		return err
	}
	var total int64
	for _, n := range q.Counts {
		total += n
	}
	d.render(w, r, http.StatusOK, "queue", map[string]any{
		"Title": "Queue " + name, "Queue": q, "Total": total, "Chart": chart(h, p, step, "/queues/"+name),
		"Done": r.URL.Query().Get("done"),
	})
	return nil
}

// notFound is a 404 whose page is titled title.
func notFound(title, msg string) error {
	return &pageError{status: http.StatusNotFound, title: title, msg: msg}
}

// pageError is an error with the title its page shows.
type pageError struct {
	status     int
	title, msg string
}

func (e *pageError) Error() string   { return e.msg }
func (e *pageError) HTTPStatus() int { return e.status }

// errorTitle is the heading of the page showing err.
func errorTitle(err error, status int) string {
	var pe *pageError
	if errors.As(err, &pe) {
		return pe.title
	}
	switch {
	case errors.Is(err, sortie.ErrNotFound):
		return "Not found"
	case status == http.StatusNotFound:
		return "No such page"
	case status == http.StatusForbidden:
		return "Not allowed"
	case status == http.StatusBadRequest:
		return "That did not work"
	case status == http.StatusConflict:
		return "Not possible now"
	case status == http.StatusTooManyRequests:
		return "Too many tries"
	case errors.Is(err, sortie.ErrStoreFull):
		return "The store is full"
	case status >= 500:
		return "The store did not answer"
	}
	return "Something went wrong"
}

// readHistory reads c's history of the period before now, per step, of
// queue ("" for every queue), and shapes it (jobjson.HistoryOf).
func readHistory(ctx context.Context, c *sortie.Client, queue string, period, step time.Duration, now time.Time) (*jobjson.History, error) {
	since := now.Add(-period)
	rows, err := c.JobHistory(ctx, &sortie.JobHistoryParams{Queue: queue, Since: since, Until: now, Step: step})
	if err != nil {
		return nil, err
	}
	return jobjson.HistoryOf(rows, since, now, step), nil
}
