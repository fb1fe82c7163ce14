package httpapi

import (
	"errors"
	"net/http"
	"time"

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
	out := make([]periodicJSON, len(rows))
	for i := range rows {
		out[i] = periodicOf(&rows[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"schedules": out})
	return nil
}

// periodicJSON is a periodic schedule's status (sortie.PeriodicStatus) as
// JSON.
type periodicJSON struct {
	Name      string     `json:"name"`
	Last      *time.Time `json:"last,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	Spec      string     `json:"spec,omitempty"`
	Misfire   string     `json:"misfire,omitempty"`
	Next      *time.Time `json:"next,omitempty"`
	MissedAt  *time.Time `json:"missed_at,omitempty"`
	Missed    int        `json:"missed,omitempty"`
	Enqueued  int        `json:"enqueued,omitempty"`
	RunBy     []string   `json:"run_by"`
}

// periodicOf converts a schedule's status.
func periodicOf(s *sortie.PeriodicStatus) periodicJSON {
	p := periodicJSON{Name: s.Name, Spec: s.Spec, Misfire: s.Misfire, Missed: s.Missed, Enqueued: s.Enqueued, RunBy: s.RunBy,
		Last: timePtr(s.Last), UpdatedAt: timePtr(s.UpdatedAt), Next: timePtr(s.Next), MissedAt: timePtr(s.MissedAt)}
	if p.RunBy == nil {
		p.RunBy = []string{}
	}
	return p
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
