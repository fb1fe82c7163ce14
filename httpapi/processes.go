package httpapi

import (
	"errors"
	"net/http"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// processes: GET /api/v1/processes, every client process registered in
// the store: {"processes": [...]}, each with alive (it beat recently).
func (a *api) processes(w http.ResponseWriter, r *http.Request) error {
	rows, err := a.c.Processes(r.Context())
	if err != nil {
		return err
	}
	out := make([]jobjson.Process, len(rows))
	for i, row := range rows {
		out[i] = jobjson.FromProcess(row, a.c.ProcessAlive(row))
	}
	writeJSON(w, http.StatusOK, map[string]any{"processes": out})
	return nil
}

// processCommand: POST /api/v1/processes/{id}/quiet|stop: the process
// stops fetching (quiet) or stops gracefully (stop) at its next beat.
func (a *api) processCommand(w http.ResponseWriter, r *http.Request) error {
	cmd := store.ProcessCommandKind(r.PathValue("command"))
	if cmd != sortie.ProcessQuiet && cmd != sortie.ProcessStop {
		return httperr.Errorf(http.StatusNotFound, "no such endpoint: %s %s (a process takes quiet or stop)", r.Method, r.URL.Path)
	}
	id := r.PathValue("id")
	if id == a.c.ID() {
		// Quiet would stop the remote workers' fetches, stop this
		// server's rescue and retention while it kept answering.
		return httperr.Errorf(http.StatusConflict, "process %s is the one serving this API: stop it with SIGTERM (or Ctrl-C), not through its own API", shown(id))
	}
	row, err := a.c.CommandProcess(r.Context(), id, cmd)
	if errors.Is(err, sortie.ErrNotFound) {
		return httperr.Errorf(http.StatusNotFound, "process %s not found: it stopped, or aged out of the registry", shown(id))
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jobjson.FromProcess(row, a.c.ProcessAlive(row)))
	return nil
}

// periodic: GET /api/v1/periodic, every periodic schedule:
// {"schedules": [{"name", "last", "spec", "misfire", "next", "missed_at",
// "missed", "enqueued", "run_by"}]}.
func (a *api) periodic(w http.ResponseWriter, r *http.Request) error {
	rows, err := a.c.PeriodicStatuses(r.Context())
	if err != nil {
		return err
	}
	out := make([]jobjson.Periodic, len(rows))
	for i := range rows {
		out[i] = jobjson.FromPeriodic(&rows[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"schedules": out})
	return nil
}
