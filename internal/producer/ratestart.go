package producer

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/internal/logkey"
	"github.com/sortiehq/sortie/store"
)

// Rate-limited queues space the starts of handlers, not only the claims. A
// claim stamps its start with the clock reading taken before the store
// call, and that call may wait (for the queue's row lock, a SQLite writer
// held by another process) before the job reaches a worker: a claim that
// waited 80 ms and one that did not started 220 ms apart in a 300 ms
// interval queue. So a producer claims from such a queue for a start a
// little ahead (its lead, three times the slowest recent claim and at
// least rateStartLead), the store counts the start at that moment, and the
// worker starts the handler then (Claim.Reserved). A claim that comes back
// after its start has passed (by more than rateStartSlack) is put back
// without running (Claim.Run false), its attempt not counted: started
// late, it would come closer to the next start than the limit allows.
const (
	// rateStartLead is the least a claim from a rate-limited queue
	// reserves its start ahead of its clock reading.
	rateStartLead = 100 * time.Millisecond
	// rateStartLeadMax caps the lead: the stores keep the starts a fetch
	// that far behind another still counts (store.MaxStartAhead).
	rateStartLeadMax = store.MaxStartAhead
	// rateStartSlack is how late after its reserved start a claim may come
	// back and still run.
	rateStartSlack = 5 * time.Millisecond
	// rateSettingsTTL is how long a producer trusts what it read of a
	// queue's limits before reading them again.
	rateSettingsTTL = 5 * time.Second
)

// startLead is how far ahead of its clock reading a claim from a
// rate-limited queue reserves its start: three times the slowest recent
// claim, rising at once when claims slow down and falling by a sixteenth
// of the excess per claim when they speed up.
type startLead struct {
	d atomic.Int64
}

// get returns the current lead.
func (l *startLead) get() time.Duration {
	return max(time.Duration(l.d.Load()), rateStartLead)
}

// observe records a claim that took took.
func (l *startLead) observe(took time.Duration) {
	cur := l.get()
	next := max(min(3*took, rateStartLeadMax), cur-(cur-rateStartLead)/16)
	l.d.Store(int64(next))
}

// rateLimits remembers which of a producer's queues have rate limits
// (RateLimit or PartitionRateLimit), and which have any limit (those or
// MaxRunning, PartitionMaxRunning), read from the store's shared settings.
type rateLimits struct {
	mu     sync.Mutex
	queues map[string]rateLimitsEntry
}

type rateLimitsEntry struct {
	limited bool // a rate limit
	capped  bool // any limit
	readAt  time.Time
}

// unlimited reports whether every queue of qs was read, at its last
// read, to have no limit at all.
func (r *rateLimits) unlimited(qs []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range qs {
		if e, ok := r.queues[q]; !ok || e.capped {
			return false
		}
	}
	return true
}

// limited reports whether queue q has a rate limit, reading its settings
// when what is known is older than rateSettingsTTL. A failed read counts
// as no limit; the next fetch reads again.
func (r *rateLimits) limited(ctx context.Context, c *Config, q string) bool {
	now := c.Clock.Now()
	r.mu.Lock()
	e, ok := r.queues[q]
	r.mu.Unlock()
	if ok && now.Sub(e.readAt) < rateSettingsTTL {
		return e.limited
	}
	row, err := c.Store.QueueGet(ctx, &store.QueueGetParams{Queue: q})
	if err != nil {
		return false
	}
	set := row.Settings
	e = rateLimitsEntry{limited: set.RateLimit > 0 || set.PartitionRateLimit > 0, readAt: now}
	e.capped = e.limited || set.MaxRunning > 0 || set.PartitionMaxRunning > 0
	r.mu.Lock()
	if r.queues == nil {
		r.queues = make(map[string]rateLimitsEntry)
	}
	r.queues[q] = e
	r.mu.Unlock()
	return e.limited
}

// lateClaims reports whether a claim of a rate-limited queue that reserved
// its start at start came back too late to run, logging it when so.
func (p *Producer) lateClaims(ctx context.Context, q string, start time.Time, n int) bool {
	late := p.cfg.Clock.Now().Sub(start)
	if late <= rateStartSlack || n == 0 {
		return false
	}
	p.cfg.Logger.InfoContext(ctx, "claim of a rate-limited queue came back after the start it reserved, putting its jobs back",
		slog.String(logkey.Queue, q), slog.Int(logkey.Count, n), slog.Duration(logkey.Duration, late))
	return true
}
