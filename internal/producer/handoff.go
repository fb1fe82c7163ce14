package producer

import (
	"sync"

	"github.com/sortiehq/sortie/store"
)

// handoff passes claimed jobs to a producer's worker goroutines. A worker
// that finishes a job takes the next one without parking; a parked worker is
// woken for a new batch, and each worker that takes a job wakes one more
// only while jobs remain. So a burst of short jobs costs a few scheduler
// wake-ups instead of one per job, and a batch of slow jobs still has every
// job started within microseconds. It holds at most as many jobs as there
// are free workers and jobs claimed ahead (ahead.go), because the producer
// claims no more.
type handoff struct {
	mu     sync.Mutex
	cond   *sync.Cond
	rows   []Claim
	head   int
	parked int
	closed bool
}

func newHandoff() *handoff {
	h := &handoff{}
	h.cond = sync.NewCond(&h.mu)
	return h
}

// Claim is a job handed to a worker.
type Claim struct {
	// Row is the job as its claim left it.
	Row *store.JobRow
	// Reserved says its handler starts at its AttemptedAt, not before.
	Reserved bool
	// Run says whether it may run at all: a claim that came back after
	// its reserved start is put back unrun (ratestart.go).
	Run bool
}

// push adds claimed jobs and wakes a parked worker.
func (h *handoff) push(rows []*store.JobRow, reserved, run bool) {
	if len(rows) == 0 {
		return
	}
	h.mu.Lock()
	for _, r := range rows {
		h.rows = append(h.rows, Claim{r, reserved, run})
	}
	wake := h.parked > 0
	h.mu.Unlock()
	if wake {
		h.cond.Signal()
	}
}

// close makes next return nil once the jobs already pushed are taken.
func (h *handoff) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cond.Broadcast()
}

// next returns the next job, waiting for one; a nil row once closed and
// empty.
func (h *handoff) next() Claim {
	h.mu.Lock()
	for h.head == len(h.rows) && !h.closed {
		h.parked++
		h.cond.Wait()
		h.parked--
	}
	if h.head == len(h.rows) {
		h.mu.Unlock()
		return Claim{}
	}
	row := h.rows[h.head]
	h.rows[h.head] = Claim{}
	h.head++
	if h.head == len(h.rows) {
		h.rows, h.head = h.rows[:0], 0
	}
	more := h.head < len(h.rows) && h.parked > 0
	h.mu.Unlock()
	if more {
		h.cond.Signal()
	}
	return row
}
