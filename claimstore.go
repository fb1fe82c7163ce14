package sortie

import (
	"context"
	"errors"
	"time"

	"github.com/sortiehq/sortie/store"
)

// The store calls of Take, Report and ExtendLease (take.go, report.go),
// kept in this one file so that a change of the store contract touches
// them in one place.

// claimOnce claims up to p.Limit jobs. When it got fewer, it also returns
// when more may be claimed (zero when none is known), so a waiting Take
// sets a timer instead of polling.
func (c *Client) claimOnce(ctx context.Context, p *store.JobFetchParams) ([]*JobRow, time.Time, error) {
	res, err := c.store.JobFetch(ctx, p)
	if err != nil {
		return nil, time.Time{}, err
	}
	return res.Jobs, res.NextAt, nil
}

// watchQueue subscribes to the store's wake-ups for queue; nil when the
// store cannot notify.
func (c *Client) watchQueue(ctx context.Context, queue string) (*store.Watch, error) {
	w, err := c.store.QueueWatch(ctx, &store.QueueWatchParams{Queue: queue})
	if errors.Is(err, store.ErrUnsupported) {
		return nil, nil
	}
	return w, err
}

// finishReports records reports in one store call.
func (c *Client) finishReports(ctx context.Context, reports []*store.Report, now time.Time) ([]store.ReportResult, error) {
	return c.store.JobFinish(ctx, &store.JobFinishParams{Reports: reports, Now: now})
}

// extendClaim extends a claim's lease to now + lease and records its
// progress, when given, in the same store call.
func (c *Client) extendClaim(ctx context.Context, ref store.LeaseRef, now time.Time, lease time.Duration, progress *float64) (store.LeaseStatus, error) {
	p := &store.LeaseExtendParams{Leases: []store.LeaseRef{ref}, Now: now, Lease: lease}
	if progress != nil {
		p.Progress = map[store.LeaseRef]float64{ref: *progress}
	}
	st, err := c.store.LeaseExtend(ctx, p)
	if err != nil {
		return store.LeaseStatus{}, err
	}
	return st[0], nil
}

// readJob reads one job, for a claim the client does not remember.
func (c *Client) readJob(ctx context.Context, id int64) (*JobRow, error) {
	return c.store.JobGet(ctx, &store.JobGetParams{ID: id})
}
