package sortie

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/store"
)

// producer fetches jobs of one queue for a fixed pool of worker goroutines.
// It fetches at most as many jobs as there are free workers, so no job is
// claimed that no goroutine can start, and it sleeps until a wake-up from
// the store, a freed worker, the next known RunAt or the poll interval.
type producer struct {
	c       *Client
	rs      *runState
	queue   string
	max     int32
	running atomic.Int32
	// idle is set while the last fetch found fewer jobs than it asked for.
	idle  atomic.Bool
	jobs  chan *store.JobRow
	freed chan struct{}
}

func newProducer(c *Client, rs *runState, queue string, maxWorkers int) *producer {
	return &producer{
		c:     c,
		rs:    rs,
		queue: queue,
		max:   int32(maxWorkers),
		jobs:  make(chan *store.JobRow, maxWorkers),
		freed: make(chan struct{}, 1),
	}
}

// start launches the fetch loop and the worker goroutines.
func (p *producer) start(ctx context.Context) {
	p.rs.workers.Add(1 + int(p.max))
	go func() {
		defer p.rs.workers.Done()
		defer close(p.jobs)
		p.loop(ctx)
	}()
	for range p.max {
		go func() {
			defer p.rs.workers.Done()
			for row := range p.jobs {
				p.c.work(ctx, p.rs, row)
				if p.shouldWake(p.running.Add(-1)) {
					select {
					case p.freed <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
}

// shouldWake says whether a worker that just finished a job, leaving
// running jobs running, should wake the fetch loop. The loop acts on a freed
// worker in two cases only: the pool was full (it waits for any free worker,
// then for the fetch cooldown), or half the pool is free (it fetches at
// once). Otherwise it is already waiting on the cooldown timer or the store,
// or fetching, and reads running afresh; waking it for every finished job
// cost a wake-up per job. running moves down one at a time, so each
// threshold is met exactly as it is crossed.
func (p *producer) shouldWake(running int32) bool {
	free := p.max - running
	return free == 1 || free == (p.max+1)/2
}

func (p *producer) loop(ctx context.Context) {
	c := p.c
	stop := p.rs.stopFetch
	var watchC <-chan struct{}
	w, err := c.store.QueueWatch(ctx, &store.QueueWatchParams{Queue: p.queue})
	switch {
	case err == nil:
		defer w.Close()
		watchC = w.C
	case !errors.Is(err, store.ErrUnsupported):
		c.logger.WarnContext(ctx, "queue watch failed, polling instead", slog.String(logKeyQueue, p.queue), slog.String(logKeyError, err.Error()))
	}
	poll := c.clock.NewTimer(c.cfg.PollInterval)
	defer poll.Stop()
	cooldown := time.NewTimer(time.Hour)
	cooldown.Stop()
	defer cooldown.Stop()

	var lastFetch time.Time
	drained := false // the last fetch found fewer jobs than it asked for
	failures := 0
	for {
		select {
		case <-stop:
			return
		default:
		}
		free := p.max - p.running.Load()
		if free > 0 && !drained {
			// While most workers are busy, wait a little so that more of them
			// free up and one fetch serves several.
			if wait := c.cfg.FetchCooldown - time.Since(lastFetch); free*2 < p.max && wait > 0 {
				cooldown.Reset(wait)
			} else {
				rows, err := c.store.JobFetch(ctx, &store.JobFetchParams{
					Queue: p.queue, Kinds: c.kinds, Limit: int(free),
					Now: c.clock.Now(), Lease: c.cfg.Lease, Worker: c.cfg.ID,
				})
				lastFetch = time.Now()
				if err != nil {
					failures++
					c.storeHealth.fail(ctx, "fetch", err)
					sleepCtx(ctx, stop, backoff(failures))
					continue
				}
				if failures > 0 {
					failures = 0
					c.storeHealth.ok(ctx)
				}
				p.running.Add(int32(len(rows)))
				for _, row := range rows {
					p.jobs <- row
				}
				if len(rows) == int(free) {
					p.idle.Store(false)
					continue
				}
				drained = true
				p.idle.Store(true)
				poll.Reset(p.nextWake(ctx))
			}
		}
		select {
		case <-stop:
			return
		case <-watchC:
			drained = false
		case <-poll.C():
			drained = false
			poll.Reset(c.cfg.PollInterval)
		case <-p.freed:
		case <-cooldown.C:
		}
	}
}

// nextWake returns how long the producer may sleep: until the queue's next
// scheduled job is due, or the poll interval, whichever is sooner.
func (p *producer) nextWake(ctx context.Context) time.Duration {
	d := p.c.cfg.PollInterval
	next, err := p.c.store.JobNextRunAt(ctx, &store.JobNextRunAtParams{Queue: p.queue})
	if err != nil || next.IsZero() {
		return d
	}
	until := next.Sub(p.c.clock.Now())
	if until < d {
		d = max(until, 100*time.Microsecond)
	}
	return d
}
