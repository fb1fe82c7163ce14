package sortie

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/sortiehq/sortie/internal/buildinfo"
	"github.com/sortiehq/sortie/store"
)

// ProcessRow is one client process in the store's registry (see
// Client.Processes).
type ProcessRow = store.ProcessRow

// ProcessQueue is one queue a process works and its worker count.
type ProcessQueue = store.ProcessQueue

// ProcessCommand is a command for a running process: ProcessQuiet or
// ProcessStop.
type ProcessCommand = store.ProcessCommandKind

// The process commands. Quiet stops the process fetching jobs (the
// running ones finish and are recorded; it stays up, quiet); stop shuts
// its client down gracefully, as Stop does, and closes its
// StopRequested channel so the program can exit.
const (
	ProcessQuiet = store.ProcessQuiet
	ProcessStop  = store.ProcessStop
)

// Processes returns the processes registered in the store, by ID: every
// started client (of any program on the store) that beat within the last
// Config.ProcessForget. Alive reports which beat recently.
func (c *Client) Processes(ctx context.Context) ([]*ProcessRow, error) {
	rows, err := c.store.ProcessList(ctx, &store.ProcessListParams{})
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	return rows, nil
}

// ProcessAlive reports whether row beat within three of this client's beat
// intervals (ProcessBeat, default 10 s) before now: a process that missed
// more is likely dead, and its row goes after Config.ProcessForget.
func (c *Client) ProcessAlive(row *ProcessRow) bool {
	beat := c.cfg.ProcessBeat
	if beat <= 0 {
		beat = 10 * time.Second
	}
	return !row.LastBeat.Before(c.clock.Now().Add(-3 * beat))
}

// QueuesWorked returns the workers each queue gets from the live processes
// of the registry (quiet and stopping ones left out, as ProcessAlive says),
// and how many processes are registered at all: with none, nothing is
// known (clients with a negative Config.ProcessBeat, and remote workers of
// the HTTP API, are not registered). The command line and the HTTP API warn
// with it about a job enqueued where no worker will take it.
func (c *Client) QueuesWorked(ctx context.Context) (queues map[string]int, processes int, err error) {
	rows, err := c.Processes(ctx)
	if err != nil {
		return nil, 0, err
	}
	queues = make(map[string]int)
	for _, r := range rows {
		if !c.ProcessAlive(r) || r.Quiet || r.Stop {
			continue
		}
		for _, q := range r.Queues {
			queues[q.Queue] += q.Workers
		}
	}
	return queues, len(rows), nil
}

// CommandProcess sends command to process id: it takes effect at the
// process's next beat (within Config.ProcessBeat). ErrNotFound when no
// such process is registered.
func (c *Client) CommandProcess(ctx context.Context, id string, command ProcessCommand) (*ProcessRow, error) {
	if err := store.ValidateProcessCommand(command); err != nil {
		return nil, invalidf("%v", err)
	}
	row, err := c.store.ProcessCommand(ctx, &store.ProcessCommandParams{ID: id, Command: command})
	if err != nil {
		return nil, fmt.Errorf("%s process %s: %w", command, id, err)
	}
	return row, nil
}

// StopRequested returns a channel closed when a stop command reached this
// client (CommandProcess, sortie processes --stop, the dashboard): the
// client is then stopping by itself, and a program whose client that is
// may exit once Stop (or its own shutdown) returns.
func (c *Client) StopRequested() <-chan struct{} { return c.stopRequested }

// Stopped reports whether the client was started and has been stopped
// since (by Stop, Run or a stop command): it no longer works jobs, extends
// leases, rescues or prunes. A client never started is not stopped.
func (c *Client) Stopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started && c.stopped
}

// registry is what a started client records about itself.
type registry struct {
	row       store.ProcessRow
	quietOnce sync.Once
	stopOnce  sync.Once
}

// newRegistry describes this client for the registry.
func (c *Client) newRegistry() *registry {
	host, _ := os.Hostname()
	r := &registry{row: store.ProcessRow{ID: c.cfg.ID, Host: host, PID: os.Getpid(), Version: buildinfo.Version(),
		StartedAt: c.clock.Now()}}
	for _, q := range sortedKeys(c.cfg.Queues) {
		r.row.Queues = append(r.row.Queues, store.ProcessQueue{Queue: q, Workers: c.cfg.Queues[q].MaxWorkers})
	}
	for _, name := range sortedKeys(c.cfg.Pools) {
		pc := c.cfg.Pools[name]
		for _, q := range pc.Queues {
			r.row.Queues = append(r.row.Queues, store.ProcessQueue{Queue: q, Workers: pc.MaxWorkers})
		}
	}
	return r
}

// registryLoop beats every Config.ProcessBeat until ctx ends, acting on the
// commands the beats return, then deletes the client's row.
func (c *Client) registryLoop(ctx context.Context, rs *runState) {
	reg := c.newRegistry()
	t := c.clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := c.store.ProcessDelete(delCtx, &store.ProcessDeleteParams{ID: reg.row.ID}); err != nil {
				c.logger.Warn("could not remove this process from the registry; it ages out", slog.String(logKeyError, err.Error()))
			}
			return
		case <-t.C():
		}
		c.beat(ctx, rs, reg)
		t.Reset(c.cfg.ProcessBeat)
	}
}

// beat records one beat and acts on the commands it returns.
func (c *Client) beat(ctx context.Context, rs *runState, reg *registry) {
	now := c.clock.Now()
	reg.row.Busy = rs.held.Len()
	reg.row.Periodic = rs.schedules()
	row, err := c.store.ProcessBeat(ctx, &store.ProcessBeatParams{Process: reg.row, Now: now, ForgetBefore: now.Add(-c.cfg.ProcessForget)})
	if err != nil {
		if ctx.Err() == nil {
			c.logger.Debug("process beat failed", slog.String(logKeyError, err.Error()))
		}
		return
	}
	if row.Quiet || row.Stop {
		reg.quietOnce.Do(func() {
			c.logger.Info("quiet requested: this process stops fetching jobs", slog.String("client_id", c.cfg.ID))
			rs.closeFetch()
		})
	}
	if row.Stop {
		reg.stopOnce.Do(func() {
			c.logger.Info("stop requested: this process stops gracefully", slog.String("client_id", c.cfg.ID))
			close(c.stopRequested)
			c.mu.Lock()
			runs := c.runs
			c.mu.Unlock()
			if !runs { // Run stops the client with its drain timeout
				go func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
			}
		})
	}
}

// schedules describes the client's periodic schedules for the registry.
func (rs *runState) schedules() []store.ProcessSchedule {
	var out []store.ProcessSchedule
	for _, p := range rs.periodic {
		st := p.runner.Status()
		spec := p.job.Cron
		if spec == "" {
			spec = "every " + p.job.Interval.String()
		}
		out = append(out, store.ProcessSchedule{Name: p.job.Name, Spec: spec, Misfire: p.job.Misfire.String(), Next: st.Next,
			MissedAt: st.MissedAt, Missed: st.Missed, Enqueued: st.Enqueued})
	}
	return out
}
