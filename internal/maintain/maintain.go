// Package maintain holds the client's store maintenance: the heartbeat
// that extends the leases of the jobs it holds, the rescue of jobs whose
// lease expired and the pruning of finished jobs and history counts past
// their retention.
// Every client runs it; the store makes concurrent rounds safe.
package maintain

import (
	"context"
	"log/slog"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/logkey"
	"github.com/sortiehq/sortie/store"
)

// maintenanceBatch caps the jobs one rescue or prune call touches.
const maintenanceBatch = 1000

// Store is the part of store.Store maintenance uses.
type Store interface {
	// JobHistoryPrune is store.Store.JobHistoryPrune.
	JobHistoryPrune(ctx context.Context, p *store.JobHistoryPruneParams) (int, error)
	// JobPrune is store.Store.JobPrune.
	JobPrune(ctx context.Context, p *store.JobPruneParams) (int, error)
	// JobRescue is store.Store.JobRescue.
	JobRescue(ctx context.Context, p *store.JobRescueParams) (int, error)
}

// Retention is how long finished jobs are kept, by state, and the
// history counts; a negative duration keeps them forever.
type Retention struct {
	Completed time.Duration
	Cancelled time.Duration
	Dead      time.Duration
	History   time.Duration
}

// Maintainer rescues and prunes jobs in Store.
type Maintainer struct {
	Store     Store
	Clock     clock.Clock
	Health    *health.Health
	Logger    *slog.Logger
	Retention Retention
}

// Rescue makes the jobs whose lease expired available again,
// maintenanceBatch to a store call, and logs how many it rescued.
func (m *Maintainer) Rescue(ctx context.Context) {
	total := 0
	for {
		n, err := m.Store.JobRescue(ctx, &store.JobRescueParams{Now: m.Clock.Now(), Limit: maintenanceBatch})
		if err != nil {
			if ctx.Err() == nil {
				m.Health.Fail(ctx, "rescue", err)
			}
			break
		}
		m.Health.OK(ctx)
		total += n
		if n < maintenanceBatch {
			break
		}
	}
	if total > 0 {
		m.Logger.WarnContext(ctx, "rescued jobs whose lease expired", slog.Int(logkey.Count, total))
	}
}

// Prune deletes finished jobs and history counts past their retention,
// maintenanceBatch to a store call.
func (m *Maintainer) Prune(ctx context.Context) {
	if m.pruneJobs(ctx) && m.Retention.History >= 0 {
		m.pruneHistory(ctx, m.Clock.Now().Add(-m.Retention.History))
	}
}

// pruneHistory deletes the history counts of minutes before before.
func (m *Maintainer) pruneHistory(ctx context.Context, before time.Time) {
	for {
		n, err := m.Store.JobHistoryPrune(ctx, &store.JobHistoryPruneParams{Before: before, Limit: maintenanceBatch})
		if err != nil {
			if ctx.Err() == nil {
				m.Health.Fail(ctx, "prune history", err)
			}
			return
		}
		m.Health.OK(ctx)
		if n < maintenanceBatch {
			return
		}
	}
}

// pruneJobs deletes finished jobs past their retention and reports
// whether the store answered.
func (m *Maintainer) pruneJobs(ctx context.Context) bool {
	now := m.Clock.Now()
	cutoff := func(keep time.Duration) time.Time {
		if keep < 0 {
			return time.Time{}
		}
		return now.Add(-keep)
	}
	p := &store.JobPruneParams{
		CompletedBefore: cutoff(m.Retention.Completed),
		CancelledBefore: cutoff(m.Retention.Cancelled),
		DeadBefore:      cutoff(m.Retention.Dead),
		Limit:           maintenanceBatch,
		Now:             now,
	}
	for {
		n, err := m.Store.JobPrune(ctx, p)
		if err != nil {
			if ctx.Err() == nil {
				m.Health.Fail(ctx, "prune", err)
			}
			return false
		}
		m.Health.OK(ctx)
		if n < maintenanceBatch {
			return true
		}
	}
}
