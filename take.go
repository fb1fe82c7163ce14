package sortie

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/held"
	"github.com/sortiehq/sortie/store"
)

// TakeOpts are the options of Client.Take. A nil *TakeOpts means all
// defaults.
type TakeOpts struct {
	// Kinds, when not empty, limits Take to jobs of these kinds; jobs of
	// other kinds stay in the queue for other workers. Defaults to every
	// kind.
	Kinds []string
	// Wait bounds how long Take blocks while the queue has no job to give:
	// once it has passed, Take returns no jobs and a nil error. Defaults to
	// no bound but ctx's; a negative Wait does not block at all.
	Wait time.Duration
	// Lease is how long a taken job stays claimed without a heartbeat.
	// Defaults to Config.Lease; at least 1 second. (A started client's
	// heartbeat then extends it by Config.Lease.)
	Lease time.Duration
	// Worker names the taker in the jobs' AttemptedBy. Defaults to
	// Config.ID.
	Worker string
	// Remote leaves the jobs' leases to the taker, a worker in another
	// process (the HTTP API takes its remote workers' jobs this way): the
	// client does not extend them, so a taker that dies loses its jobs to
	// the rescue one lease later. The taker extends each lease with
	// ExtendLease before it runs out and reports each job with Report.
	// Without Remote the client keeps the leases itself, and must be
	// started.
	Remote bool
}

// Taken is a job claimed by Client.Take: the row as the claim left it
// (running, with its ClaimToken; its Timeout is the one that applies: the
// job's own, else its kind's WorkerOpts.Timeout, else Config.JobTimeout),
// and the handle that reports how the attempt ended. Exactly one of Complete, Fail, Cancel, Snooze and Release
// records the end; until then a started client extends the job's lease at
// every heartbeat, as it does for its own workers' jobs. Its methods are
// safe for concurrent use.
type Taken struct {
	*JobRow
	c   *Client
	run *jobRun
	// settle ends the client's hold on the job, once.
	settle func()
}

// Context returns the job's context: sortie.SetResult and SetProgress work
// on it as in a handler, and it is cancelled when the job's lease is lost
// (context.Cause is ErrLeaseLost), when JobCancel asks the job to stop,
// when its timeout (the job's own, its kind's WorkerOpts.Timeout, or
// Config.JobTimeout) passes, and shortly before Stop's deadline. A taker
// watching it stops the work and reports the end: Release for a Stop,
// Fail or Cancel otherwise. A Remote take's context is never cancelled.
func (t *Taken) Context() context.Context { return &t.run.ctx }

// Take claims up to n jobs of queue (1 to 1,000), blocking until at least
// one is available, opts.Wait has passed (no jobs, nil error), ctx ends
// (its error) or the client stops (an error wrapping ErrClosed). A job
// becomes available while Take waits is claimed at once: Take wakes on the
// store's notifications and on the next scheduled job's due time, and
// checks the queue every Config.PollInterval in case a notification is
// missed (or the store sends none). Jobs are claimed as the client's
// workers claim them (priority, due time, ID; the queue's pause and limits
// hold), each attempt counted at the claim, and announced with
// EventJobStarted.
//
// Each taken job must be reported once with one of Taken's methods (or
// Report), even when its context was cancelled: until then a started
// client holds it and Stop waits for it, as for a running handler. Unless
// opts.Remote, the client must be started (Start), since its heartbeat
// keeps the leases; it may work no queue of its own.
func (c *Client) Take(ctx context.Context, queue string, n int, opts *TakeOpts) ([]*Taken, error) {
	p, o, err := c.takeParams(queue, n, opts)
	if err != nil {
		return nil, err
	}
	var rs *runState
	if !o.Remote {
		if rs, err = c.beginTake(); err != nil {
			return nil, err
		}
		defer rs.workers.Done()
	}
	rows, err := c.takeWaiting(ctx, p, o.Wait, rs)
	taken := make([]*Taken, len(rows))
	for i, row := range rows {
		taken[i] = c.hold(ctx, rs, row, o.Remote)
	}
	return taken, err
}

// takeParams validates Take's arguments and returns its fetch.
func (c *Client) takeParams(queue string, n int, opts *TakeOpts) (*store.JobFetchParams, TakeOpts, error) {
	var o TakeOpts
	if opts != nil {
		o = *opts
	}
	if err := store.ValidateQueueName(queue); err != nil {
		return nil, o, invalidf("Take: %v", err)
	}
	if n < 1 || n > maxTake {
		return nil, o, invalidf("Take: n must be 1 to %d, got %d", maxTake, n)
	}
	for i, k := range o.Kinds {
		if err := store.ValidateKind(k); err != nil {
			return nil, o, invalidf("TakeOpts.Kinds[%d]: %v", i, err)
		}
	}
	if o.Lease == 0 {
		o.Lease = c.cfg.Lease
	}
	if o.Lease < time.Second {
		return nil, o, invalidf("TakeOpts.Lease must be at least 1s, got %s", o.Lease)
	}
	if o.Worker == "" {
		o.Worker = c.cfg.ID
	}
	return &store.JobFetchParams{Queue: queue, Kinds: o.Kinds, Limit: n, Lease: o.Lease, Worker: o.Worker}, o, nil
}

// maxTake caps the jobs of one Take.
const maxTake = 1000

// beginTake returns the run state of a started client, counting the Take
// among the work Stop waits for; the caller calls rs.workers.Done.
func (c *Client) beginTake() (*runState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.started:
		return nil, fmt.Errorf("take: %w: start the client, whose heartbeat keeps the taken jobs' leases (or take with TakeOpts.Remote)", ErrNotStarted)
	case c.stopped:
		return nil, fmt.Errorf("take: client stopped: %w", ErrClosed)
	}
	c.run.workers.Add(1)
	return c.run, nil
}

// takeWaiting claims jobs until it gets some, wait passes, ctx ends or the
// client stops.
func (c *Client) takeWaiting(ctx context.Context, p *store.JobFetchParams, wait time.Duration, rs *runState) ([]*JobRow, error) {
	var stop <-chan struct{}
	if rs != nil {
		stop = rs.stopFetch
	}
	deadline := c.clock.Now().Add(wait)
	if fw, ok := c.store.(store.FetchWaiter); ok && wait >= 0 && c.onWallClock() {
		return c.takeFromWaits(ctx, fw, p, wait, deadline, stop)
	}
	var watch *store.Watch
	defer func() {
		if watch != nil {
			watch.Close()
		}
	}()
	for {
		p.Now = c.clock.Now()
		rows, next, err := c.claimOnce(ctx, p)
		if err != nil || len(rows) > 0 || wait < 0 {
			return rows, err
		}
		left := deadline.Sub(p.Now)
		if wait > 0 && left <= 0 {
			return nil, nil
		}
		if watch == nil {
			if watch, err = c.watchQueue(ctx, p.Queue); err != nil {
				return nil, err
			}
			if watch != nil {
				continue // a job enqueued before the watch began
			}
		}
		if err := c.sleepForJobs(ctx, watch, stop, c.takeNap(p.Now, next, wait, left)); err != nil {
			return nil, err
		}
	}
}

// onWallClock reports whether the client runs on the wall clock, the one a
// store waits on (store.FetchWaiter); a client on another clock (a test's)
// waits on its own timers.
func (c *Client) onWallClock() bool {
	_, wall := c.clock.(clock.Real)
	return wall
}

// takeFromWaits is takeWaiting on a store that can wait: each turn is one
// waiting fetch (store.FetchWaiter) of up to the nap a watching Take would
// sleep, so a job enqueued meanwhile is claimed for the Take in the
// enqueue's own step. Jobs claimed for it as ctx ends or the client stops
// are returned with them, not dropped.
func (c *Client) takeFromWaits(ctx context.Context, fw store.FetchWaiter, p *store.JobFetchParams, wait time.Duration, deadline time.Time, stop <-chan struct{}) ([]*JobRow, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if stop != nil {
		go func() {
			select {
			case <-stop:
				cancel()
			case <-wctx.Done():
			}
		}()
	}
	for {
		p.Now = c.clock.Now()
		left := deadline.Sub(p.Now)
		nap := c.cfg.PollInterval
		if wait > 0 {
			nap = min(nap, max(left, 0))
		}
		res, err := fw.JobFetchWait(wctx, p, nap)
		switch {
		case err != nil && ctx.Err() == nil && wctx.Err() != nil:
			return nil, fmt.Errorf("take: client stopped: %w", ErrClosed)
		case err != nil:
			return nil, err
		case len(res.Jobs) > 0:
			return res.Jobs, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case wctx.Err() != nil:
			return nil, fmt.Errorf("take: client stopped: %w", ErrClosed)
		case wait > 0 && !c.clock.Now().Before(deadline):
			return nil, nil
		}
	}
}

// takeNap is how long a waiting Take sleeps at most: until the next
// scheduled job is due, the end of its wait, or the poll interval.
func (c *Client) takeNap(now, next time.Time, wait, left time.Duration) time.Duration {
	d := c.cfg.PollInterval
	if wait > 0 {
		d = min(d, left)
	}
	if !next.IsZero() {
		d = min(d, max(next.Sub(now), time.Millisecond))
	}
	return d
}

// sleepForJobs waits for a wake-up of the queue or d, whichever comes
// first; it returns an error when ctx ends or the client stops.
func (c *Client) sleepForJobs(ctx context.Context, watch *store.Watch, stop <-chan struct{}, d time.Duration) error {
	var wake <-chan struct{}
	if watch != nil {
		wake = watch.C
	}
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C():
	case <-stop:
		return fmt.Errorf("take: client stopped: %w", ErrClosed)
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// hold makes the handle of a taken row: it is announced, remembered for
// its report and, unless remote, held with its context under the heartbeat.
func (c *Client) hold(ctx context.Context, rs *runState, row *JobRow, remote bool) *Taken {
	if row.Timeout == 0 {
		row.Timeout = c.timeoutOf(row)
	}
	t := &Taken{JobRow: row, c: c, settle: func() {}}
	if remote {
		t.run = newJobRun(c, context.WithoutCancel(ctx), row)
	} else {
		c.holdLocal(rs, t)
	}
	c.claims.add(row, t)
	if c.logger.Enabled(ctx, slog.LevelInfo) {
		c.logger.InfoContext(ctx, "job taken", slog.Int64(logKeyJobID, row.ID), slog.String(logKeyKind, row.Kind),
			slog.String(logKeyQueue, row.Queue), slog.Int(logKeyAttempt, row.Attempt))
	}
	if c.events.active() {
		c.events.publish(&Event{Kind: EventJobStarted, Job: row, At: c.clock.Now()})
	}
	return t
}

// holdLocal puts t in the held set, whose heartbeat extends its lease and
// cancels its context, and counts it among the work Stop waits for until
// it is settled.
func (c *Client) holdLocal(rs *runState, t *Taken) {
	row := t.JobRow
	base, cancel := context.WithCancelCause(rs.workCtx)
	jobCtx, stopTimer := context.Context(base), context.CancelFunc(func() {})
	if timeout := c.timeoutOf(row); timeout > 0 {
		jobCtx, stopTimer = context.WithTimeoutCause(base, timeout, &timeoutError{timeout})
	}
	t.run = newJobRun(c, jobCtx, row)
	t.run.held = held.Job{ID: row.ID, Token: row.ClaimToken, Cancel: cancel, Run: &t.run.rj}
	rs.held.Add(&t.run.held)
	rs.workers.Add(1)
	var once sync.Once
	t.settle = func() {
		once.Do(func() {
			stopTimer()
			cancel(nil)
			rs.held.Remove(row.ID, row.ClaimToken)
			rs.workers.Done()
		})
	}
}

// claimBook remembers the jobs this client's Takes handed out until they
// are reported, so a report needs no read of the job for its retry policy
// and events. A claim never reported (its taker died) is forgotten a lease
// after it expired.
type claimBook struct {
	mu        sync.Mutex
	byID      map[int64]*claimEntry
	lastSweep time.Time
}

type claimEntry struct {
	row   *JobRow
	taken *Taken
	until time.Time
}

func (b *claimBook) add(row *JobRow, t *Taken) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byID == nil {
		b.byID = make(map[int64]*claimEntry)
	}
	now := row.AttemptedAt
	if lease := row.LeaseUntil.Sub(now); now.Sub(b.lastSweep) > lease {
		for id, e := range b.byID {
			if now.Sub(e.until) > lease {
				delete(b.byID, id)
			}
		}
		b.lastSweep = now
	}
	b.byID[row.ID] = &claimEntry{row: row, taken: t, until: row.LeaseUntil}
}

// get returns the entry of claim (id, token), or nil.
func (b *claimBook) get(id, token int64) *claimEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.byID[id]; e != nil && e.row.ClaimToken == token {
		return e
	}
	return nil
}

// extended moves the claim's expiry to until.
func (b *claimBook) extended(id, token int64, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.byID[id]; e != nil && e.row.ClaimToken == token {
		e.until = until
	}
}

// done forgets the claim.
func (b *claimBook) done(id, token int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.byID[id]; e != nil && e.row.ClaimToken == token {
		delete(b.byID, id)
	}
}

// The store calls of Take, Report and ExtendLease (report.go), kept
// together here, beside the claim book, so that a change of the store
// contract touches them in one place.

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
