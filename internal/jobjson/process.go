package jobjson

import (
	"time"

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
