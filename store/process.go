package store

import (
	"fmt"
	"time"
)

// ProcessRow is one client process registered in the store (see
// Store.ProcessBeat): what it runs and when it was last heard from.
type ProcessRow struct {
	// ID is the process's own, unique name (host, PID and a random part).
	ID   string
	Host string
	PID  int
	// Version is the sortie version the process runs.
	Version string
	// Queues are the queues it works, each with its worker count.
	Queues []ProcessQueue
	// Busy is how many jobs it was running at its last beat.
	Busy int
	// Periodic are the periodic schedules it runs, as it last saw them.
	Periodic  []ProcessSchedule
	StartedAt time.Time
	// LastBeat is the Now of its last ProcessBeat.
	LastBeat time.Time
	// Quiet and Stop are the commands requested for it (ProcessCommand):
	// stop fetching, or stop gracefully. A beat returns them.
	Quiet bool
	Stop  bool
}

// ProcessQueue is one queue a process works and its worker count.
type ProcessQueue struct {
	Queue   string
	Workers int
}

// ProcessSchedule is a periodic schedule as the process running it sees
// it: its spec and misfire policy, the slot it waits for, and what its
// misfire policy last did.
type ProcessSchedule struct {
	Name string `json:"name"`
	// Spec is the cron expression or "every DURATION".
	Spec    string    `json:"spec"`
	Misfire string    `json:"misfire"`
	Next    time.Time `json:"next,omitzero"`
	// MissedAt is when the process last found slots missed while nothing
	// ran the schedule, Missed how many, Enqueued how many of them the
	// misfire policy enqueued.
	MissedAt time.Time `json:"missed_at,omitzero"`
	Missed   int       `json:"missed,omitempty"`
	Enqueued int       `json:"enqueued,omitempty"`
}

// ProcessCommandKind is a command for a process.
type ProcessCommandKind string

// The commands: quiet stops fetching new jobs (running ones finish); stop
// shuts the process's client down gracefully.
const (
	ProcessQuiet ProcessCommandKind = "quiet"
	ProcessStop  ProcessCommandKind = "stop"
)

// ProcessBeatParams are the arguments of Store.ProcessBeat.
type ProcessBeatParams struct {
	// Process is the row to record; its LastBeat, Quiet and Stop are
	// ignored (the store sets LastBeat = Now and keeps the commands).
	Process ProcessRow
	Now     time.Time
	// ForgetBefore: rows of other processes whose LastBeat is before it
	// are deleted in the same call (processes that died). Zero deletes
	// none.
	ForgetBefore time.Time
}

// ProcessListParams are the arguments of Store.ProcessList.
type ProcessListParams struct{}

// ProcessCommandParams are the arguments of Store.ProcessCommand.
type ProcessCommandParams struct {
	ID      string
	Command ProcessCommandKind
}

// ProcessDeleteParams are the arguments of Store.ProcessDelete.
type ProcessDeleteParams struct {
	ID string
}

// MaxProcessIDLen bounds a process ID.
const MaxProcessIDLen = 200

// ValidateProcess checks a row given to ProcessBeat.
func ValidateProcess(p *ProcessRow) error {
	switch {
	case p.ID == "":
		return fmt.Errorf("process ID is empty")
	case len(p.ID) > MaxProcessIDLen:
		return fmt.Errorf("process ID is longer than %d bytes", MaxProcessIDLen)
	case p.Busy < 0:
		return fmt.Errorf("busy must not be negative, got %d", p.Busy)
	}
	return nil
}

// ValidateProcessCommand checks the command of ProcessCommand.
func ValidateProcessCommand(c ProcessCommandKind) error {
	if c != ProcessQuiet && c != ProcessStop {
		return fmt.Errorf("unknown process command %q (want quiet or stop)", c)
	}
	return nil
}
