package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/internal/names"
	"github.com/sortiehq/sortie/store"
)

// queues: GET /api/v1/queues, every queue with jobs or settings: paused or
// not, jobs per state, latency, limits.
func (a *api) queues(w http.ResponseWriter, r *http.Request) error {
	queues, err := jobjson.ListQueues(r.Context(), a.c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": queues})
	return nil
}

// pause: POST /api/v1/queues/{queue}/pause, for every process sharing the
// store.
func (a *api) pause(w http.ResponseWriter, r *http.Request) error {
	return a.onQueue(w, r, (*sortie.Client).QueuePause)
}

// resume: POST /api/v1/queues/{queue}/resume.
func (a *api) resume(w http.ResponseWriter, r *http.Request) error {
	return a.onQueue(w, r, (*sortie.Client).QueueResume)
}

func (a *api) onQueue(w http.ResponseWriter, r *http.Request, act func(*sortie.Client, context.Context, string) (*store.QueueRow, error)) error {
	row, err := act(a.c, r.Context(), r.PathValue("queue"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jobjson.FromQueue(row, nil))
	return nil
}

// configure: PATCH /api/v1/queues/{queue}, some of max_running,
// rate_limit, rate_period, partition_max_running, partition_rate_limit,
// partition_rate_period, max_depth, overflow: changes those settings of the
// queue for every process (the others stay) and answers with the queue.
// 0 turns a limit off. Two admins changing one queue at once: the last
// write wins whole.
func (a *api) configure(w http.ResponseWriter, r *http.Request) error {
	var patch jobjson.SettingsPatch
	if err := decode(r, &patch); err != nil {
		return err
	}
	if patch.Empty() {
		return httperr.Errorf(http.StatusBadRequest, "request body changes no setting: send max_running, rate_limit, rate_period, partition_max_running, partition_rate_limit, partition_rate_period, max_depth or overflow")
	}
	queue := r.PathValue("queue")
	if err := names.Queue(queue); err != nil {
		return httperr.Errorf(http.StatusBadRequest, "queue: %v", err)
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
		if err := names.Queue(queue); err != nil {
			return httperr.Errorf(http.StatusBadRequest, "queue: %v", err)
		}
	}
	h, err := jobjson.ReadHistory(r.Context(), a.c, queue, period, step, time.Now())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h)
	return nil
}
