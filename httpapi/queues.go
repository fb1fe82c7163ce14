package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// queues: GET /api/v1/queues, every queue with jobs or settings: paused or
// not, jobs per state, latency, limits.
func (a *api) queues(w http.ResponseWriter, r *http.Request) error {
	ov, err := a.c.QueueOverview(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": jobjson.Queues(ov.Queues, ov.Counts, ov.Latency)})
	return nil
}

// pause: POST /api/v1/queues/{queue}/pause[?create=true], for every
// process sharing the store. A queue nothing uses is refused (404) unless
// create is true.
func (a *api) pause(w http.ResponseWriter, r *http.Request) error {
	return a.onQueue(w, r, true, (*sortie.Client).QueuePause)
}

// resume: POST /api/v1/queues/{queue}/resume. A queue nothing uses is
// refused (404).
func (a *api) resume(w http.ResponseWriter, r *http.Request) error {
	return a.onQueue(w, r, false, (*sortie.Client).QueueResume)
}

func (a *api) onQueue(w http.ResponseWriter, r *http.Request, creates bool, act func(*sortie.Client, context.Context, string) (*store.QueueRow, error)) error {
	queue := r.PathValue("queue")
	if err := a.knownQueue(r, queue, creates); err != nil {
		return err
	}
	row, err := act(a.c, r.Context(), queue)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jobjson.FromQueue(row, nil))
	return nil
}

// configure: PATCH /api/v1/queues/{queue}[?create=true], some of max_running,
// rate_limit, rate_period, partition_max_running, partition_rate_limit,
// partition_rate_period, max_depth, overflow: changes those settings of the
// queue for every process (the others stay) and answers with the queue.
// 0 turns a limit off. Two admins changing one queue at once: the last
// write wins whole. A queue nothing uses is refused (404) unless create is
// true.
func (a *api) configure(w http.ResponseWriter, r *http.Request) error {
	var patch jobjson.SettingsPatch
	if err := decode(r, &patch); err != nil {
		return err
	}
	if patch.Empty() {
		return httperr.Errorf(http.StatusBadRequest, "request body changes no setting: send max_running, rate_limit, rate_period, partition_max_running, partition_rate_limit, partition_rate_period, max_depth or overflow")
	}
	queue := r.PathValue("queue")
	if err := store.ValidateQueueName(queue); err != nil {
		return httperr.Errorf(http.StatusBadRequest, "queue: %v", err)
	}
	if err := a.knownQueue(r, queue, true); err != nil {
		return err
	}
	row, err := a.c.QueueGet(r.Context(), queue)
	if err != nil {
		return err
	}
	settings := row.Settings
	if err := patch.Apply(&settings, func(f string) string { return f }); err != nil {
		return httperr.Errorf(http.StatusBadRequest, "%v", err)
	}
	row, err = a.c.QueueConfigure(r.Context(), queue, settings)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jobjson.FromQueue(row, nil))
	return nil
}

// deleteQueue: DELETE /api/v1/queues/{queue}, an empty queue: its settings
// and pause go, and it is no longer listed. Answers {"deleted": NAME}; 409
// when the queue holds jobs, 404 when nothing uses it.
func (a *api) deleteQueue(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	if err := a.knownQueue(r, queue, false); err != nil {
		return err
	}
	if err := a.c.QueueDelete(r.Context(), queue); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": queue})
	return nil
}

// knownQueue returns nil when queue is in use (Client.QueueKnown), or when
// the request's create parameter is true and creates allows it; otherwise
// a 404 naming the known queues, or a 400 for a bad name or parameter.
func (a *api) knownQueue(r *http.Request, queue string, creates bool) error {
	create, err := createParam(r, creates)
	if err != nil || create {
		return err
	}
	err = a.c.QueueKnown(r.Context(), queue)
	if _, ok := errors.AsType[*sortie.UnknownQueueError](err); ok {
		hint := ""
		if creates {
			hint = "; add ?create=true to make it"
		}
		return httperr.Errorf(http.StatusNotFound, "%s%s", strings.TrimPrefix(err.Error(), "sortie: "), hint)
	}
	return err
}

// createParam reads the request's create query parameter: true or false
// (default false), accepted only where an action creates queues.
func createParam(r *http.Request, creates bool) (bool, error) {
	v, given := r.URL.Query()["create"]
	if !given {
		return false, nil
	}
	if !creates {
		return false, httperr.Errorf(http.StatusBadRequest, "create: this action makes no queue")
	}
	switch strings.Join(v, ",") {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, httperr.Errorf(http.StatusBadRequest, "create must be true or false, got %s", shown(strings.Join(v, ",")))
}

// queuesHistory: GET /api/v1/queues/history?since=&step=&queue=, the jobs
// finished per queue and outcome over the period before now (since: a
// duration like 1h or 24h, or days like 7d; default 1h), per step (default
// a minute over an hour, 15 minutes over a day, an hour over a week; at
// most a week of minutes' points), of every queue or of queue, with the
// totals: the counts every process keeps in the store.
func (a *api) queuesHistory(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	period := time.Hour
	if s := q.Get("since"); s != "" {
		var err error
		if period, err = jobjson.ParseHistoryPeriod(s); err != nil {
			return httperr.Errorf(http.StatusBadRequest, "since %v", err)
		}
	}
	step := jobjson.HistoryStep(period)
	if s := q.Get("step"); s != "" {
		var err error
		if step, err = jobjson.ParseHistoryStep(s, period); err != nil {
			return httperr.Errorf(http.StatusBadRequest, "step %v", err)
		}
	}
	queue := q.Get("queue")
	if queue != "" {
		if err := store.ValidateQueueName(queue); err != nil {
			return httperr.Errorf(http.StatusBadRequest, "queue: %v", err)
		}
	}
	h, err := readHistory(r.Context(), a.c, queue, period, step, time.Now())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h)
	return nil
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
