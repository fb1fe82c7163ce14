package sortie

import (
	"context"
	"log/slog"
	"sort"
	"time"

	"github.com/sortiehq/sortie/internal/maintain"
	"github.com/sortiehq/sortie/store"
)

// pruneEvery is how many rescue rounds pass between two prunes.
const pruneEvery = 12

// extendLeases extends the leases of refs to now + Config.Lease, for a
// late claim's renewal.
func (c *Client) extendLeases(ctx context.Context, refs []store.LeaseRef, now time.Time) ([]store.LeaseStatus, error) {
	return maintain.ExtendLeases(ctx, c.store, refs, nil, now, c.cfg.Lease)
}

// maintenanceLoop rescues jobs whose worker died, every RescueInterval, and
// prunes finished jobs past their retention every few rounds; it checks
// the store's server settings when it starts and every round. Every client
// runs it; the store makes concurrent rounds safe.
func (c *Client) maintenanceLoop(ctx context.Context, rs *runState) {
	c.checkServer(ctx)
	t := c.clock.NewTimer(c.cfg.RescueInterval)
	defer t.Stop()
	for round := 0; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		c.checkServer(ctx)
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
				if s := a.suspended; s != nil {
					c.finished(ctx, a, store.ReportResult{Applied: true, State: s.state})
					continue
				}
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
