package sortie

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sortiehq/sortie/internal/completer"
	"github.com/sortiehq/sortie/internal/maintain"
	"github.com/sortiehq/sortie/internal/producer"
	"github.com/sortiehq/sortie/store"
)

// stopGrace is how long before Stop's deadline it cancels the handlers'
// contexts, so that handlers honouring cancellation return and their jobs
// are put back before Stop returns. With little time left it takes a fifth
// of what is left instead.
var stopGrace = 5 * time.Second

// Stop's bounds past the end of its context. Stop waits past ctx's end only
// for what its own cancellation set off: handlers whose contexts it
// cancelled less than stopCancelGrace ago get until then to return, and
// when some returned after ctx ended the store gets stopRecordGrace more to
// record their outcomes (releases, mostly). So Stop returns at most
// stopCancelGrace+stopRecordGrace after ctx ends, whatever the handlers and
// the store do; a handler that returns promptly when cancelled has its job
// put back even when ctx is cancelled outright.
const (
	stopCancelGrace = 500 * time.Millisecond
	stopRecordGrace = 500 * time.Millisecond
)

// Start begins working the configured queues and running the background
// services (lease heartbeats, rescue of jobs whose worker died, retention).
// ctx's values reach the handlers; its cancellation does not stop the
// client: call Stop.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrAlreadyStarted
	}
	for _, q := range sortedKeys(c.cfg.Queues) {
		if s := c.cfg.Queues[q].Settings; s != nil {
			if _, err := c.store.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: q, Settings: *s, Now: c.clock.Now()}); err != nil {
				return fmt.Errorf("start: configure queue %q: %w", q, err)
			}
		}
	}
	c.started = true
	base := context.WithoutCancel(ctx)
	workCtx, workCancel := context.WithCancelCause(base)
	bgCtx, bgCancel := context.WithCancel(base)
	rs := &runState{
		stopFetch:  make(chan struct{}),
		workCtx:    workCtx,
		workCancel: workCancel,
		bgCancel:   bgCancel,
	}
	rs.completer = completer.New(base, completer.Config[*attempt]{
		Store: c.store, Clock: c.clock, Health: &c.storeHealth, Logger: c.logger, Held: &rs.held,
		Report: func(a *attempt) *store.Report { return &a.outcome }, Finished: c.finished,
	})
	go rs.completer.Loop()

	queues := sortedKeys(c.cfg.Queues)
	for _, q := range queues {
		c.startProducer(workCtx, rs, []string{q}, nil, c.cfg.Queues[q].MaxWorkers)
	}
	for _, name := range sortedKeys(c.cfg.Pools) {
		pc := c.cfg.Pools[name]
		var weights []int
		if pc.Order == PoolWeighted {
			weights = pc.Weights
		}
		c.startProducer(workCtx, rs, pc.Queues, weights, pc.MaxWorkers)
	}
	rs.bg.Add(2)
	hb := &maintain.Heartbeat{
		Store: c.store, Clock: c.clock, Health: &c.storeHealth, Logger: c.logger, Held: &rs.held,
		Interval: c.cfg.HeartbeatInterval, Lease: c.cfg.Lease, LeaseLost: errLeaseLost, CancelRequested: errCancelRequested,
	}
	go func() { defer rs.bg.Done(); hb.Run(bgCtx) }()
	go func() { defer rs.bg.Done(); c.maintenanceLoop(bgCtx, rs) }()
	c.startPeriodic(bgCtx, rs)
	if c.cfg.ProcessBeat > 0 {
		rs.bg.Add(1)
		go func() { defer rs.bg.Done(); c.registryLoop(bgCtx, rs) }()
	}
	c.run = rs
	c.logger.InfoContext(ctx, "client started", slog.String("client_id", c.cfg.ID), slog.Int(logKeyCount, len(queues)))
	return nil
}

// startProducer starts the producer of queues (weighted when weights is
// not nil) with maxWorkers worker goroutines, which run the jobs it claims.
func (c *Client) startProducer(ctx context.Context, rs *runState, queues []string, weights []int, maxWorkers int) {
	p := producer.New(&producer.Config{
		Store: c.store, Clock: c.clock, Health: &c.storeHealth, Logger: c.logger,
		Queues: queues, Weights: weights, MaxWorkers: maxWorkers, Kinds: c.kinds, Worker: c.cfg.ID,
		Lease: c.cfg.Lease, PollInterval: c.cfg.PollInterval, FetchCooldown: c.cfg.FetchCooldown,
		HeartbeatInterval: c.cfg.HeartbeatInterval, Stop: rs.stopFetch, Goroutines: &rs.workers,
		ExtendLeases: c.extendLeases,
		Work:         func(ctx context.Context, cl producer.Claim) { c.work(ctx, rs, cl) },
	})
	rs.producers = append(rs.producers, p)
	p.Start(ctx)
}

// Stop stops fetching, puts back the jobs claimed but not started (their
// attempt not counted), waits for running jobs to finish and records their
// outcomes, and returns by ctx's deadline whatever the store does, or at
// most one second after it when handlers it cancelled are returning.
//
// Shortly before the deadline (5 s before it, or a fifth of the time left
// when that is less), or as soon as ctx is cancelled, Stop cancels the
// handlers' contexts; jobs whose handlers then return go back to available
// at once, their attempt not counted. A handler that returns within half a
// second of that cancellation has its job put back before Stop returns,
// even when that is past ctx's end: Stop then gives the store at most
// another half second to record it. A handler that has not returned by
// then keeps its job claimed: the job is never handed to another worker
// while its handler may still run, but once Stop returns its lease is no
// longer extended, so it expires and the job is rescued, counting the
// attempt. Outcomes the store could not record in time (it is down, or its
// disk is full) are left to the lease and the rescue the same way.
//
// Stop returns nil once everything is recorded, or a *StopError saying
// which jobs were left to their leases and why. A ctx without a deadline
// waits for every handler, then gives the store at most 10 seconds to
// record the last outcomes. A call while another is under way (a stop
// command stops the client by itself) waits for that one and returns its
// result, or returns when ctx ends. Run stops a worker process on its
// signals with the same rules.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return ErrNotStarted
	}
	if c.stopped {
		c.mu.Unlock()
		select {
		case <-c.stopDone:
			return c.stopErr
		case <-ctx.Done():
			return fmt.Errorf("sortie: stop: still stopping: %w", context.Cause(ctx))
		}
	}
	c.stopped = true
	rs := c.run
	c.mu.Unlock()
	err := c.stop(ctx, rs)
	c.stopErr = err
	close(c.stopDone)
	return err
}

// stop is the first Stop.
func (c *Client) stop(ctx context.Context, rs *runState) error {

	rs.closeFetch()
	running, late := c.stopWorkers(ctx, rs)
	recordCtx, cancel := recordContext(ctx, late)
	defer cancel()
	unrecorded, ferr := rs.completer.Stop(recordCtx)
	rs.bgCancel()
	waitCtx(recordCtx, &rs.bg)
	rs.workCancel(nil)
	if len(running) == 0 && unrecorded == 0 {
		c.logger.Info("client stopped", slog.String("client_id", c.cfg.ID))
		return nil
	}
	err := &StopError{Running: running, Unrecorded: unrecorded, Err: ferr}
	if err.Err == nil {
		err.Err = recordCtx.Err()
		if ctx.Err() != nil {
			err.Err = context.Cause(ctx)
		}
	}
	c.logger.Warn("client stopped with jobs left to their leases; they will be rescued when the leases expire",
		slog.String("client_id", c.cfg.ID), slog.Int("running", len(running)), slog.Int("unrecorded", unrecorded),
		slog.Duration("lease", c.cfg.Lease), slog.String(logKeyError, err.Err.Error()))
	return err
}

// recordContext returns the context under which Stop has the completer
// record the last outcomes: ctx, bounded to completer.StopTimeout when it
// has no deadline, or stopRecordGrace from now when handlers returned after
// ctx ended (late).
func recordContext(ctx context.Context, late bool) (context.Context, context.CancelFunc) {
	if late {
		return context.WithTimeout(context.WithoutCancel(ctx), stopRecordGrace)
	}
	if _, ok := ctx.Deadline(); !ok && ctx.Err() == nil {
		return context.WithTimeout(ctx, completer.StopTimeout)
	}
	return ctx, func() {}
}

// stopWorkers waits for the producers and handlers to end. It cancels the
// handlers' contexts stopGrace before ctx's deadline, or as soon as ctx
// ends, and gives them until stopCancelGrace after that cancellation to
// return, even past ctx's end. It returns the IDs of the jobs whose
// handlers had not returned by then (they stay claimed), and whether it
// waited past ctx's end (late).
func (c *Client) stopWorkers(ctx context.Context, rs *runState) (running []int64, late bool) {
	done := make(chan struct{})
	go func() { rs.workers.Wait(); close(done) }()
	var cancelAt <-chan time.Time
	if d, ok := ctx.Deadline(); ok {
		// ctx's deadline is on the wall clock, not Config.Clock: a fake
		// clock cannot make ctx end, so the grace before it is measured
		// on the wall clock too.
		left := time.Until(d)
		t := time.NewTimer(left - min(stopGrace, left/5))
		defer t.Stop()
		cancelAt = t.C
	}
	select {
	case <-done:
		return nil, false
	case <-cancelAt:
	case <-ctx.Done():
	}
	c.logger.WarnContext(ctx, "stopping: cancelling running jobs", slog.Int(logKeyCount, rs.held.Len()))
	rs.workCancel(errStopping)
	graceEnd := time.Now().Add(stopCancelGrace)
	select {
	case <-done:
		// Handlers that returned after ctx ended want their releases
		// recorded past it.
		return nil, ctx.Err() != nil
	case <-ctx.Done():
	}
	if wait := time.Until(graceEnd); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-done:
			return nil, true
		case <-t.C:
		}
		late = true
	}
	select {
	case <-done:
		return nil, late
	default:
	}
	for _, j := range rs.held.SnapshotRunning() {
		running = append(running, j.ID)
	}
	slices.Sort(running)
	return running, late
}

// waitCtx waits for wg, or until ctx ends.
func waitCtx(ctx context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
