package web

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// runningMax bounds the running jobs the running and processes pages read.
const runningMax = 1000

// worker is a process or a remote worker with the jobs it runs.
type worker struct {
	// Process is the registry's row; nil for a remote worker (one of the
	// HTTP API, in any language), known only by the jobs it holds.
	Process *jobjson.Process
	Name    string
	Jobs    []*store.JobRow
	Queues  []string
	// Workers is a process's worker count, over its queues.
	Workers int
	// Since is when its oldest running job started; LeaseUntil the latest
	// lease of its jobs, which its heartbeats extend.
	Since, LeaseUntil time.Time
}

// workers reads the processes and the running jobs, and returns the
// processes, each with its running jobs, then the remote workers (the
// claimers of running jobs that no registered process is), and whether
// there were more running jobs than runningMax.
func (d *Dashboard) workers(ctx context.Context) (procs, remote []*worker, more bool, err error) {
	rows, err := d.c.Processes(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	res, err := d.c.JobList(ctx, &sortie.JobListParams{State: sortie.JobStateRunning, Limit: runningMax})
	if err != nil {
		return nil, nil, false, err
	}
	by := map[string]*worker{}
	for _, row := range rows {
		p := jobjson.FromProcess(row, d.c.ProcessAlive(row))
		w := &worker{Process: &p, Name: row.ID}
		for _, q := range row.Queues {
			w.Queues = append(w.Queues, q.Queue)
			w.Workers += q.Workers
		}
		by[row.ID] = w
		procs = append(procs, w)
	}
	for _, j := range res.Jobs {
		w := by[j.AttemptedBy]
		if w == nil {
			w = &worker{Name: j.AttemptedBy}
			by[j.AttemptedBy] = w
			remote = append(remote, w)
		}
		w.Jobs = append(w.Jobs, j)
		if w.Since.IsZero() || j.AttemptedAt.Before(w.Since) {
			w.Since = j.AttemptedAt
		}
		if j.LeaseUntil.After(w.LeaseUntil) {
			w.LeaseUntil = j.LeaseUntil
		}
		if w.Process == nil && !slices.Contains(w.Queues, j.Queue) {
			w.Queues = append(w.Queues, j.Queue)
		}
	}
	slices.SortFunc(remote, func(a, b *worker) int { return cmp.Compare(a.Name, b.Name) })
	return procs, remote, res.NextCursor != 0, nil
}

// busy: GET /busy, every running job, by the process or remote worker
// running it, with its progress.
func (d *Dashboard) busy(w http.ResponseWriter, r *http.Request) error {
	procs, remote, more, err := d.workers(r.Context())
	if err != nil {
		return err
	}
	var groups []*worker
	n := 0
	for _, w := range append(procs, remote...) {
		if len(w.Jobs) > 0 {
			groups = append(groups, w)
			n += len(w.Jobs)
		}
	}
	d.render(w, r, http.StatusOK, "busy", map[string]any{"Title": "Running", "Groups": groups, "Running": n, "More": more,
		"Max": runningMax})
	return nil
}

// processes: GET /processes, the client processes registered in the store
// and the remote workers holding jobs.
func (d *Dashboard) processes(w http.ResponseWriter, r *http.Request) error {
	procs, remote, more, err := d.workers(r.Context())
	if err != nil {
		return err
	}
	d.render(w, r, http.StatusOK, "processes", map[string]any{"Title": "Processes", "Processes": procs, "Self": d.c.ID(), "Remote": remote,
		"More": more, "Done": r.URL.Query().Get("done")})
	return nil
}

// periodic: GET /periodic, every periodic schedule: the store's last slot
// and what the live processes running it report.
func (d *Dashboard) periodic(w http.ResponseWriter, r *http.Request) error {
	rows, err := d.c.PeriodicStatuses(r.Context())
	if err != nil {
		return err
	}
	d.render(w, r, http.StatusOK, "periodic", map[string]any{"Title": "Periodic", "Schedules": rows})
	return nil
}
