package sortie

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/sortiehq/sortie/store"
)

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var (
	// errStopping is the cause of job contexts cancelled by Stop's deadline.
	errStopping = errors.New("sortie: client stopping")
	// errLeaseLost is the cause of job contexts cancelled because the lease
	// was lost (the job was rescued and may run elsewhere).
	errLeaseLost = errors.New("sortie: job lease lost")
	// errCancelRequested is the cause of job contexts cancelled because
	// JobCancel asked the running job to stop.
	errCancelRequested = errors.New("sortie: job cancelled on request")
)

// stopGrace is how long Stop waits for handlers after cancelling their
// contexts before it releases their jobs and returns without them.
var stopGrace = 5 * time.Second

// runState is what a started client runs: producers, workers, the completer
// and background services. It exists from Start to Stop.
type runState struct {
	stopFetch  chan struct{}
	workCancel context.CancelCauseFunc
	bgCancel   context.CancelFunc
	producers  []*producer
	workers    sync.WaitGroup // producers and their worker goroutines
	bg         sync.WaitGroup // heartbeat and maintenance
	completer  *completer
	held       heldSet
	// unserved holds the "queue\x00kind" pairs already reported as having
	// no worker here, so each is logged once.
	unserved sync.Map
}

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
		workCancel: workCancel,
		bgCancel:   bgCancel,
	}
	rs.held.jobs = make(map[int64]*heldJob)
	rs.completer = newCompleter(c, &rs.held)
	go rs.completer.loop(base)

	queues := sortedKeys(c.cfg.Queues)
	for _, q := range queues {
		p := newProducer(c, rs, q, []string{q}, nil, c.cfg.Queues[q].MaxWorkers)
		rs.producers = append(rs.producers, p)
		p.start(workCtx)
	}
	for _, name := range sortedKeys(c.cfg.Pools) {
		pc := c.cfg.Pools[name]
		var weights []int
		if pc.Order == PoolWeighted {
			weights = pc.Weights
		}
		p := newProducer(c, rs, name, pc.Queues, weights, pc.MaxWorkers)
		rs.producers = append(rs.producers, p)
		p.start(workCtx)
	}
	rs.bg.Add(2)
	go func() { defer rs.bg.Done(); c.heartbeatLoop(bgCtx, rs) }()
	go func() { defer rs.bg.Done(); c.maintenanceLoop(bgCtx, rs) }()
	c.startPeriodic(bgCtx, rs)
	c.run = rs
	c.logger.InfoContext(ctx, "client started", slog.String("client_id", c.cfg.ID), slog.Int(logKeyCount, len(queues)))
	return nil
}

// Stop stops fetching, waits for running jobs to finish and records their
// outcomes. If ctx ends first, it cancels the handlers' contexts; jobs whose
// handlers then return an error go back to available at once without
// counting the attempt. Handlers that ignore their context are abandoned
// after a few seconds more and their jobs released. Stop returns nil once
// everything is recorded, or an error saying what could not be.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return ErrNotStarted
	}
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	rs := c.run
	c.mu.Unlock()

	close(rs.stopFetch)
	done := make(chan struct{})
	go func() { rs.workers.Wait(); close(done) }()
	var abandoned []heldJob
	select {
	case <-done:
	case <-ctx.Done():
		c.logger.WarnContext(ctx, "stop deadline reached, cancelling running jobs", slog.Int(logKeyCount, rs.held.len()))
		rs.workCancel(errStopping)
		grace := time.NewTimer(stopGrace)
		select {
		case <-done:
		case <-grace.C:
			abandoned = rs.held.snapshotRunning()
		}
		grace.Stop()
	}
	err := rs.completer.stop()
	if len(abandoned) > 0 {
		if rerr := c.releaseAbandoned(abandoned); rerr != nil && err == nil {
			err = rerr
		}
	}
	rs.bgCancel()
	rs.bg.Wait()
	rs.workCancel(nil)
	c.logger.Info("client stopped", slog.String("client_id", c.cfg.ID))
	return err
}

// heldJob is a job this client claimed and has not yet recorded the
// outcome of.
type heldJob struct {
	id     int64
	token  int64
	cancel context.CancelCauseFunc
	rj     *runningJob
	// returned is set once the handler returned (the outcome is queued).
	returned bool
	// cancelRequested is set once its handler was cancelled for a JobCancel,
	// so that is logged once.
	cancelRequested bool
}

// heldSet is the jobs a client holds leases for.
type heldSet struct {
	mu   sync.Mutex
	jobs map[int64]*heldJob
}

func (h *heldSet) add(j *heldJob) {
	h.mu.Lock()
	h.jobs[j.id] = j
	h.mu.Unlock()
}

func (h *heldSet) markReturned(id, token int64) {
	h.mu.Lock()
	if j := h.jobs[id]; j != nil && j.token == token {
		j.returned = true
	}
	h.mu.Unlock()
}

// removeAll removes the claims of recorded attempts, taking the lock once.
func (h *heldSet) removeAll(batch []*attempt) {
	h.mu.Lock()
	for _, a := range batch {
		if j := h.jobs[a.row.ID]; j != nil && j.token == a.row.ClaimToken {
			delete(h.jobs, a.row.ID)
		}
	}
	h.mu.Unlock()
}

func (h *heldSet) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.jobs)
}

// snapshot returns copies of every held job.
func (h *heldSet) snapshot() []heldJob {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]heldJob, 0, len(h.jobs))
	for _, j := range h.jobs {
		out = append(out, *j)
	}
	return out
}

// snapshotRunning returns copies of the held jobs whose handler has not returned.
func (h *heldSet) snapshotRunning() []heldJob {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []heldJob
	for _, j := range h.jobs {
		if !j.returned {
			out = append(out, *j)
		}
	}
	return out
}

// cancel cancels the handler of job id, if held with token, and reports
// whether it did. A lost lease also drops the job from the set: the claim
// is no longer this client's, so it is not extended again, and the same
// job claimed again (after its rescue) gets an entry of its own. A cancel
// request is acted on once.
func (h *heldSet) cancel(id, token int64, cause error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	j := h.jobs[id]
	if j == nil || j.token != token || j.returned {
		return false
	}
	if errors.Is(cause, errLeaseLost) {
		delete(h.jobs, id)
	} else if j.cancelRequested {
		return false
	}
	j.cancelRequested = true
	j.cancel(cause)
	return true
}
