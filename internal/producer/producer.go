// Package producer fetches a client's jobs: one Producer per queue or pool
// of queues claims jobs for a fixed set of worker goroutines and hands them
// to the client, which runs them. It reads the store through a small
// interface and never imports the client.
package producer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/logkey"
	"github.com/sortiehq/sortie/store"
)

// Store is the part of store.Store a Producer uses.
type Store interface {
	// JobFetch is store.Store.JobFetch.
	JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error)
	// QueueGet is store.Store.QueueGet.
	QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.QueueRow, error)
	// QueueWatch is store.Store.QueueWatch.
	QueueWatch(ctx context.Context, p *store.QueueWatchParams) (*store.Watch, error)
}

// Config is what a Producer works with.
type Config struct {
	Store  Store
	Clock  clock.Clock
	Health *health.Health
	Logger *slog.Logger
	// Queues are served in this order (strict), or in an order drawn by
	// Weights at each fetch (weighted) when Weights is not nil.
	Queues  []string
	Weights []int
	// MaxWorkers is the number of worker goroutines.
	MaxWorkers int
	// Kinds are the kinds of job the client has workers for.
	Kinds []string
	// Worker is the client's ID, recorded on its claims.
	Worker string
	// Lease is how long a claim holds its job.
	Lease time.Duration
	// PollInterval is the longest the producer sleeps without a wake-up.
	PollInterval time.Duration
	// FetchCooldown is how long the producer waits after a fetch for more
	// workers to free up while most are busy.
	FetchCooldown time.Duration
	// HeartbeatInterval is how often the client extends leases; a claim
	// that comes back later than half of it has its leases renewed at once.
	HeartbeatInterval time.Duration
	// Stop is closed to stop fetching; a job claimed and not started by
	// then goes to Work unrun (see Start).
	Stop <-chan struct{}
	// Goroutines counts the producer's goroutines; its owner waits on it
	// after closing Stop, and every claimed job has been worked by then.
	Goroutines *sync.WaitGroup
	// ExtendLeases extends the leases of refs to now + Lease and returns
	// each one's status in order.
	ExtendLeases func(ctx context.Context, refs []store.LeaseRef, now time.Time) ([]store.LeaseStatus, error)
	// Work runs one claimed job in the calling worker goroutine and returns
	// once its outcome is handed on.
	Work func(ctx context.Context, cl Claim)
}

// Producer fetches jobs of one queue, or of a pool of queues, for a fixed
// set of worker goroutines. It fetches at most as many jobs as there are
// free workers, and, when its jobs are short next to its claims, a few
// more to cover a claim's round trip (ahead.go), with up
// to fetchesInFlight fetches out at once (each for slots the others did
// not ask for), and it sleeps until a wake-up from the store, a freed
// worker, the next known RunAt or the poll interval.
type Producer struct {
	cfg     *Config
	max     int32
	running atomic.Int32
	// reserved counts the slots asked for by fetches in flight.
	reserved atomic.Int32
	// idle is set while the last fetch found fewer jobs than it asked for.
	idle  atomic.Bool
	jobs  *handoff
	freed chan struct{}
	wake  chan struct{}
	// rated knows which queues have rate limits, whose claims reserve
	// their start lead ahead (ratestart.go).
	rated rateLimits
	lead  startLead
	// pace and capacity are for claiming ahead (ahead.go): capacity is
	// the workers plus the jobs the fetch loop last allowed ahead of them.
	pace     pace
	capacity atomic.Int32
	// waiter is the store, when the producer waits on it for its queue's
	// next jobs (waits.go); nil when it watches and polls.
	waiter store.FetchWaiter
}

// New returns the producer of cfg; its owner calls Start.
func New(cfg *Config) *Producer {
	p := &Producer{
		cfg:   cfg,
		max:   int32(cfg.MaxWorkers),
		jobs:  newHandoff(),
		freed: make(chan struct{}, 1),
		wake:  make(chan struct{}, 1),
	}
	p.capacity.Store(p.max)
	p.waiter = waiterOf(cfg)
	return p
}

// Queues returns the queues the producer serves.
func (p *Producer) Queues() []string { return p.cfg.Queues }

// Idle reports whether the last fetch found fewer jobs than it asked for.
func (p *Producer) Idle() bool { return p.idle.Load() }

// Start launches the fetch loop and the worker goroutines, counted in
// Config.Goroutines; they end once Config.Stop is closed and the jobs
// already claimed are worked. A job a worker takes after Stop closed (one
// claimed ahead and still waiting in the buffer, or one a fetch out at the
// time brought back) is handed to Work unrun, to go back to its queue with
// its attempt not counted: stopping starts no new job.
func (p *Producer) Start(ctx context.Context) {
	p.cfg.Goroutines.Add(1 + int(p.max))
	go func() {
		defer p.cfg.Goroutines.Done()
		defer p.jobs.close()
		p.loop(ctx)
	}()
	for range p.max {
		go func() {
			defer p.cfg.Goroutines.Done()
			for cl := p.jobs.next(); cl.Row != nil; cl = p.jobs.next() {
				if p.stopped() {
					cl.Run = false
				}
				start := p.cfg.Clock.Now()
				if cl, ok := p.fresh(ctx, cl, start); ok {
					p.cfg.Work(ctx, cl)
					observe(&p.pace.run, p.cfg.Clock.Now().Sub(start))
				}
				if p.shouldWake(p.running.Add(-1) + p.reserved.Load()) {
					select {
					case p.freed <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
}

// stopped reports whether Config.Stop is closed.
func (p *Producer) stopped() bool {
	select {
	case <-p.cfg.Stop:
		return true
	default:
		return false
	}
}

// shouldWake says whether a worker that left taken slots taken (running
// jobs, and slots reserved by fetches in flight) should wake the fetch loop.
// The loop acts on a freed worker in two cases only: no slot was free (it
// waits for any free slot, then for the fetch cooldown), or half the pool
// is free (it fetches at once). Otherwise it is already waiting on the
// cooldown timer or on a fetch, and will read the counts afresh, so waking
// it for every finished job would only cost a wake-up per job. Workers
// free slots one at a time, so each threshold is met exactly as it is
// crossed; a fetch that returns changes the reserved count, but it wakes
// the loop itself.
//
// The capacity compared with is the one the loop last computed (workers
// plus jobs claimed ahead): the loop does not change it while it waits, so
// the thresholds are crossed as it last saw them.
func (p *Producer) shouldWake(taken int32) bool {
	capacity := p.capacity.Load()
	free := capacity - taken
	return free == 1 || free == (capacity+1)/2
}

// watch subscribes to the store's wake-ups for every queue. With one queue
// the watch's own channel is used; with several, forwarders merge them into
// p.wake until stop closes. It returns the channel to wait on (nil when the
// store cannot notify) and a function closing the watches.
func (p *Producer) watch(ctx context.Context, stop <-chan struct{}) (<-chan struct{}, func()) {
	var watches []*store.Watch
	for _, q := range p.cfg.Queues {
		w, err := p.cfg.Store.QueueWatch(ctx, &store.QueueWatchParams{Queue: q})
		switch {
		case err == nil:
			watches = append(watches, w)
		case !errors.Is(err, store.ErrUnsupported):
			p.cfg.Logger.WarnContext(ctx, "queue watch failed, polling instead", slog.String(logkey.Queue, q), slog.String(logkey.Error, err.Error()))
		}
	}
	closeAll := func() {
		for _, w := range watches {
			w.Close()
		}
	}
	switch len(watches) {
	case 0:
		return nil, closeAll
	case 1:
		return watches[0].C, closeAll
	}
	done := make(chan struct{})
	p.cfg.Goroutines.Add(len(watches))
	for _, w := range watches {
		go func() {
			defer p.cfg.Goroutines.Done()
			for {
				select {
				case <-done:
					return
				case <-w.C:
					select {
					case p.wake <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return p.wake, func() { close(done); closeAll() }
}
