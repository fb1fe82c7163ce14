package producer

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Claiming ahead. A producer that claims for free workers only leaves a
// worker that finishes a short job waiting a whole claim round trip for
// its next one: over a network where a claim takes 5 ms and a job 50 µs,
// the workers would sit idle most of the time. So a producer whose jobs
// are short next to its claims holds jobs claimed beyond its workers: as
// many as its workers finish during one claim (workers × claim time ÷ job
// time), at most as many as it has workers. A job waits in that buffer
// about one claim's time, which it would have waited for a claim anyway,
// so claiming ahead never keeps a job long from another process's idle
// worker, and a producer of long jobs claims nothing ahead (the quotient
// is below one). A queue with any limit (running jobs or starts) is never
// claimed ahead: a job waiting in the buffer would count against the
// limit without running. A job that waited in the buffer past half the
// heartbeat interval has its lease renewed before it starts (fresh).

// paceWeight is the weight of the past in the moving averages of claim
// and job times: a new sample moves them by 1/paceWeight.
const paceWeight = 8

// pace keeps moving averages, in nanoseconds of the producer's clock, of
// a claim's round trip and of a job's time in a worker; 0 until measured.
type pace struct {
	claim, run atomic.Int64
}

// observe adds d to the average v. Concurrent observers may overwrite one
// another's sample; an average loses nothing that matters by it.
func observe(v *atomic.Int64, d time.Duration) {
	old := v.Load()
	if old == 0 {
		v.Store(max(int64(d), 1))
		return
	}
	v.Store(max(old+(int64(d)-old)/paceWeight, 1))
}

// ahead returns how many jobs beyond its workers the producer may hold
// claimed now.
func (p *Producer) ahead() int32 {
	claim, run := p.pace.claim.Load(), p.pace.run.Load()
	if claim <= 1 || run <= 1 || !p.rated.unlimited(p.cfg.Queues) {
		// Not measured (a fake clock measures nothing), or limited.
		return 0
	}
	return int32(min(int64(p.max), int64(p.max)*claim/run))
}

// fresh returns cl, taken from the buffer at now, ready to start: a job
// that waited in the buffer past half the heartbeat interval gets its lease
// renewed first, and ok is false when that lease was lost meanwhile (the
// job must not run).
func (p *Producer) fresh(ctx context.Context, cl Claim, now time.Time) (_ Claim, ok bool) {
	c := p.cfg
	if !cl.Run || cl.Reserved {
		return cl, true
	}
	waited := c.Lease - cl.Row.LeaseUntil.Sub(now)
	if waited <= c.HeartbeatInterval/2 {
		return cl, true
	}
	rows := p.renewLate(ctx, []*store.JobRow{cl.Row}, waited)
	return cl, len(rows) == 1
}
