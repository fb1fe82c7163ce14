package jobjson

import (
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// Process is a registered client process as the API, the command line and
// the dashboard show it.
type Process struct {
	ID        string         `json:"id"`
	Host      string         `json:"host,omitempty"`
	PID       int            `json:"pid,omitempty"`
	Version   string         `json:"version,omitempty"`
	Queues    []ProcessQueue `json:"queues"`
	Busy      int            `json:"busy"`
	StartedAt time.Time      `json:"started_at"`
	LastBeat  time.Time      `json:"last_beat"`
	// Alive: it beat recently (sortie.Client.ProcessAlive).
	Alive bool `json:"alive"`
	Quiet bool `json:"quiet"`
	Stop  bool `json:"stop"`
}

// ProcessQueue is one queue a process works and its worker count.
type ProcessQueue struct {
	Queue   string `json:"queue"`
	Workers int    `json:"workers"`
}

// FromProcess converts a registry row.
func FromProcess(r *store.ProcessRow, alive bool) Process {
	p := Process{ID: r.ID, Host: r.Host, PID: r.PID, Version: r.Version, Busy: r.Busy, StartedAt: r.StartedAt.UTC(),
		LastBeat: r.LastBeat.UTC(), Alive: alive, Quiet: r.Quiet, Stop: r.Stop, Queues: []ProcessQueue{}}
	for _, q := range r.Queues {
		p.Queues = append(p.Queues, ProcessQueue(q))
	}
	return p
}

// Periodic is a periodic schedule's status (sortie.PeriodicStatus).
type Periodic struct {
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

// FromPeriodic converts a schedule's status.
func FromPeriodic(s *sortie.PeriodicStatus) Periodic {
	p := Periodic{Name: s.Name, Spec: s.Spec, Misfire: s.Misfire, Missed: s.Missed, Enqueued: s.Enqueued, RunBy: s.RunBy,
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
