package sortie

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/sortiehq/sortie/internal/held"
	"github.com/sortiehq/sortie/store"
)

const (
	// leaseBatch caps the leases extended in one store call.
	leaseBatch = 1000
	// pruneEvery is how many rescue rounds pass between two prunes.
	pruneEvery = 12
)

// heartbeatLoop extends the leases of held jobs every HeartbeatInterval and
// cancels the handlers of jobs whose lease was lost.
func (c *Client) heartbeatLoop(ctx context.Context, rs *runState) {
	t := c.clock.NewTimer(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		c.heartbeat(ctx, rs)
		t.Reset(c.cfg.HeartbeatInterval)
	}
}

func (c *Client) heartbeat(ctx context.Context, rs *runState) {
	jobs := rs.held.Snapshot()
	// A job completed by CompleteTx is left alone: its row is locked until
	// the application's transaction ends, and once that commits the job is
	// no longer running.
	jobs = slices.DeleteFunc(jobs, func(j held.Job) bool { return j.Run.InTx() })
	if len(jobs) == 0 {
		return
	}
	refs := make([]store.LeaseRef, len(jobs))
	var progress map[store.LeaseRef]float64
	for i, j := range jobs {
		refs[i] = store.LeaseRef{ID: j.ID, ClaimToken: j.Token}
		if p, ok := j.Run.TakeDueProgress(); ok && !j.Returned {
			if progress == nil {
				progress = map[store.LeaseRef]float64{}
			}
			progress[refs[i]] = p
		}
	}
	statuses, err := c.extendLeasesWith(ctx, refs, progress, c.clock.Now())
	if err != nil {
		if ctx.Err() == nil {
			c.storeHealth.Fail(ctx, "heartbeat", err)
		}
		return
	}
	c.storeHealth.OK(ctx)
	for i, st := range statuses {
		j := jobs[i]
		switch {
		case !st.Held && j.Run.InTx():
			// CompleteTx committed while the extension was on its way: the
			// job is no longer running because it completed, not because
			// its lease was lost.
		case !st.Held:
			if rs.held.LeaseLost(j.ID, j.Token, errLeaseLost) {
				c.logger.WarnContext(ctx, "job lease lost, cancelling its handler", slog.Int64(logKeyJobID, j.ID))
			}
		case st.CancelRequested:
			if rs.held.CancelRequested(j.ID, j.Token, errCancelRequested) {
				c.logger.InfoContext(ctx, "job cancel requested, cancelling its handler", slog.Int64(logKeyJobID, j.ID))
			}
		}
	}
}

// extendLeases extends the leases of refs to now + Config.Lease, leaseBatch
// to a store call, and returns each one's status in order. The heartbeat
// and a late claim's renewal both go through it.
func (c *Client) extendLeases(ctx context.Context, refs []store.LeaseRef, now time.Time) ([]store.LeaseStatus, error) {
	return c.extendLeasesWith(ctx, refs, nil, now)
}

// extendLeasesWith is extendLeases that also records the progress of the
// leases in progress, in the same store calls.
func (c *Client) extendLeasesWith(ctx context.Context, refs []store.LeaseRef, progress map[store.LeaseRef]float64, now time.Time) ([]store.LeaseStatus, error) {
	statuses := make([]store.LeaseStatus, 0, len(refs))
	for chunk := range slices.Chunk(refs, leaseBatch) {
		st, err := c.store.LeaseExtend(ctx, &store.LeaseExtendParams{Leases: chunk, Now: now, Lease: c.cfg.Lease, Progress: progress})
		if err != nil {
			return nil, err
		}
		statuses = append(statuses, st...)
	}
	return statuses, nil
}

// maintenanceLoop rescues jobs whose worker died, every RescueInterval, and
// prunes finished jobs past their retention every few rounds. Every client
// runs it; the store makes concurrent rounds safe.
func (c *Client) maintenanceLoop(ctx context.Context, rs *runState) {
	t := c.clock.NewTimer(c.cfg.RescueInterval)
	defer t.Stop()
	for round := 0; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		c.maintain.Rescue(ctx)
		c.reportUnservedKinds(ctx, rs)
		if round%pruneEvery == 0 {
			c.maintain.Prune(ctx)
		}
		t.Reset(c.cfg.RescueInterval)
	}
}

// reportUnservedKinds logs, once per queue and kind, jobs that wait in a
// queue this client works but that it never claims because it has no worker
// for their kind. It looks only at queues whose last fetch came back short,
// so a busy queue costs nothing.
func (c *Client) reportUnservedKinds(ctx context.Context, rs *runState) {
	for _, p := range rs.producers {
		if !p.Idle() {
			continue
		}
		for _, q := range p.Queues() {
			rows, err := c.store.JobList(ctx, &store.JobListParams{Queue: q, State: store.JobStateAvailable, Limit: 20})
			if err != nil {
				continue
			}
			for _, row := range rows {
				if c.handlers[row.Kind] != nil {
					continue
				}
				key := q + "\x00" + row.Kind
				if _, seen := rs.unserved.LoadOrStore(key, true); !seen {
					c.logger.WarnContext(ctx, "jobs wait in a queue this client works, but it has no worker for their kind; they are left for a client that has one",
						slog.String(logKeyQueue, q), slog.String(logKeyKind, row.Kind), slog.Int64(logKeyJobID, row.ID))
				}
			}
		}
	}
}

// Drain works every due job of the client's queues in the calling
// goroutine, one at a time, until none is due, and returns how many
// attempts it ran. Retries and scheduled jobs run once the client's clock
// reaches their RunAt. It is meant for tests and scripts; it does not need
// Start and must not run while the client is started. With no Config.Queues
// it works the queues its workers' options name, and "default".
func (c *Client) Drain(ctx context.Context) (int, error) {
	queues := c.drainQueues()
	ran := 0
	for {
		progressed := false
		for _, q := range queues {
			rows, err := store.FetchedJobs(c.store.JobFetch(ctx, &store.JobFetchParams{
				Queue: q, Kinds: c.kinds, Limit: 100, Now: c.clock.Now(), Lease: c.cfg.Lease, Worker: c.cfg.ID,
			}))
			if err != nil {
				return ran, err
			}
			for _, row := range rows {
				progressed = true
				ran++
				a := c.runAttempt(ctx, row)
				res, err := c.store.JobFinish(ctx, &store.JobFinishParams{Reports: []*store.Report{&a.outcome}, Now: c.clock.Now()})
				if err != nil {
					return ran, err
				}
				c.finished(ctx, a, res[0])
			}
		}
		if !progressed {
			return ran, ctx.Err()
		}
	}
}

func (c *Client) drainQueues() []string {
	seen := map[string]bool{}
	var queues []string
	add := func(q string) {
		if q != "" && !seen[q] {
			seen[q] = true
			queues = append(queues, q)
		}
	}
	for q := range c.cfg.Queues {
		add(q)
	}
	for _, pc := range c.cfg.Pools {
		for _, q := range pc.Queues {
			add(q)
		}
	}
	if len(queues) == 0 {
		add(QueueDefault)
		for _, k := range c.kinds {
			add(c.cfg.Workers.entry(k).opts.Queue)
		}
	}
	sort.Strings(queues)
	return queues
}
