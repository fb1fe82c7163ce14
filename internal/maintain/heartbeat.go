package maintain

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/held"
	"github.com/sortiehq/sortie/internal/logkey"
	"github.com/sortiehq/sortie/store"
)

// leaseBatch caps the leases extended in one store call.
const leaseBatch = 1000

// LeaseExtender is the part of store.Store the heartbeat uses.
type LeaseExtender interface {
	// LeaseExtend is store.Store.LeaseExtend.
	LeaseExtend(ctx context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error)
}

// ExtendLeases extends the leases of refs to now + lease, leaseBatch to a
// store call, and returns each one's status in order. It also records the
// progress of the leases in progress, in the same store calls. The
// heartbeat and a late claim's renewal both go through it.
func ExtendLeases(ctx context.Context, st LeaseExtender, refs []store.LeaseRef, progress map[store.LeaseRef]float64, now time.Time, lease time.Duration) ([]store.LeaseStatus, error) {
	statuses := make([]store.LeaseStatus, 0, len(refs))
	for chunk := range slices.Chunk(refs, leaseBatch) {
		st, err := st.LeaseExtend(ctx, &store.LeaseExtendParams{Leases: chunk, Now: now, Lease: lease, Progress: progress})
		if err != nil {
			return nil, err
		}
		statuses = append(statuses, st...)
	}
	return statuses, nil
}

// Heartbeat extends the leases of a client's held jobs every Interval and
// cancels the handlers of jobs whose lease was lost or whose cancel was
// requested.
type Heartbeat struct {
	Store  LeaseExtender
	Clock  clock.Clock
	Health *health.Health
	Logger *slog.Logger
	// Held is the jobs whose leases are extended.
	Held *held.Set
	// Interval is the time between two heartbeats.
	Interval time.Duration
	// Lease is how long an extended lease lasts from the heartbeat.
	Lease time.Duration
	// LeaseLost and CancelRequested are the causes the handlers' contexts
	// are cancelled with when their job's lease was lost, or its cancel
	// requested.
	LeaseLost, CancelRequested error
}

// Run beats every Interval until ctx ends.
func (h *Heartbeat) Run(ctx context.Context) {
	t := h.Clock.NewTimer(h.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		h.beat(ctx)
		t.Reset(h.Interval)
	}
}

// beat extends the leases of the held jobs, with their progress, in as
// few store calls as leaseBatch allows, and acts on their statuses.
func (h *Heartbeat) beat(ctx context.Context) {
	jobs := h.Held.Snapshot()
	// A job completed by CompleteTx is left alone: its row is locked until
	// the application's transaction ends, and once that commits the job is
	// no longer running.
	// Nor is one whose Sleep or Await ended its attempt in the store.
	jobs = slices.DeleteFunc(jobs, func(j held.Job) bool { return j.Run.InTx() || j.Run.Suspended() })
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
	statuses, err := ExtendLeases(ctx, h.Store, refs, progress, h.Clock.Now(), h.Lease)
	if err != nil {
		if ctx.Err() == nil {
			h.Health.Fail(ctx, "heartbeat", err)
		}
		return
	}
	h.Health.OK(ctx)
	for i, st := range statuses {
		h.act(ctx, jobs[i], st)
	}
}

// act cancels j's handler when its lease was lost or its cancel requested.
func (h *Heartbeat) act(ctx context.Context, j held.Job, st store.LeaseStatus) {
	switch {
	case !st.Held && (j.Run.InTx() || j.Run.Suspended()):
		// CompleteTx committed, or a Sleep or Await ended the attempt,
		// while the extension was on its way: the job is no longer
		// running because of it, not because its lease was lost.
	case !st.Held:
		if h.Held.LeaseLost(j.ID, j.Token, h.LeaseLost) {
			h.Logger.WarnContext(ctx, "job lease lost, cancelling its handler", slog.Int64(logkey.JobID, j.ID))
		}
	case st.CancelRequested:
		if h.Held.CancelRequested(j.ID, j.Token, h.CancelRequested) {
			h.Logger.InfoContext(ctx, "job cancel requested, cancelling its handler", slog.Int64(logkey.JobID, j.ID))
		}
	}
}
