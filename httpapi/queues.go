package httpapi

import (
	"context"
	"net/http"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// queues: GET /api/v1/queues, every queue with jobs or settings: paused or
// not, jobs per state, limits.
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
