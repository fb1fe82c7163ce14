// Package held keeps the jobs a client holds leases for: the workers add
// them, the heartbeat extends and cancels them, and the completer drops
// them once their outcomes are recorded.
package held

import (
	"context"
	"sync"

	"github.com/sortiehq/sortie/store"
)

// Run is what the set's users need to know of a held job's run.
type Run interface {
	// InTx reports whether CompleteTx completed the job inside a
	// transaction.
	InTx() bool
	// Suspended reports whether a Sleep or Await ended the attempt in the
	// store: the job is no longer running, and its lease not lost.
	Suspended() bool
	// TakeDueProgress returns a progress value waiting to be written, if
	// any.
	TakeDueProgress() (float64, bool)
}

// Job is a job this client claimed and has not yet recorded the outcome
// of.
type Job struct {
	ID     int64
	Token  int64
	Cancel context.CancelCauseFunc
	Run    Run
	// Returned is set once the handler returned (the outcome is queued).
	Returned bool
	// CancelRequested is set once its handler was cancelled for a
	// JobCancel, so that is logged once.
	CancelRequested bool
}

// Set is the jobs a client holds leases for. It is safe for concurrent
// use; the zero value is empty and ready.
type Set struct {
	mu   sync.Mutex
	jobs map[int64]*Job
}

// Add holds j.
func (h *Set) Add(j *Job) {
	h.mu.Lock()
	if h.jobs == nil {
		h.jobs = make(map[int64]*Job)
	}
	h.jobs[j.ID] = j
	h.mu.Unlock()
}

// Remove drops the claim (id, token) from the set.
func (h *Set) Remove(id, token int64) {
	h.mu.Lock()
	if j := h.jobs[id]; j != nil && j.Token == token {
		delete(h.jobs, id)
	}
	h.mu.Unlock()
}

// MarkReturned records that the handler of the claim (id, token) returned.
func (h *Set) MarkReturned(id, token int64) {
	h.mu.Lock()
	if j := h.jobs[id]; j != nil && j.Token == token {
		j.Returned = true
	}
	h.mu.Unlock()
}

// RemoveReported removes the claims of recorded reports, taking the lock
// once.
func (h *Set) RemoveReported(reports []*store.Report) {
	h.mu.Lock()
	for _, r := range reports {
		if j := h.jobs[r.ID]; j != nil && j.Token == r.ClaimToken {
			delete(h.jobs, r.ID)
		}
	}
	h.mu.Unlock()
}

// Len returns how many jobs are held.
func (h *Set) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.jobs)
}

// Snapshot returns copies of every held job.
func (h *Set) Snapshot() []Job {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Job, 0, len(h.jobs))
	for _, j := range h.jobs {
		out = append(out, *j)
	}
	return out
}

// SnapshotRunning returns copies of the held jobs whose handler has not
// returned.
func (h *Set) SnapshotRunning() []Job {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Job
	for _, j := range h.jobs {
		if !j.Returned {
			out = append(out, *j)
		}
	}
	return out
}

// CancelRequested cancels the handler of job id with cause, if held with
// token, and reports whether it did. A cancel request is acted on once.
func (h *Set) CancelRequested(id, token int64, cause error) bool {
	return h.cancel(id, token, cause, false)
}

// LeaseLost cancels the handler of job id with cause, if held with token,
// and reports whether it did. It also drops the job from the set: the claim
// is no longer this client's, so it is not extended again, and the same job
// claimed again (after its rescue) gets an entry of its own.
func (h *Set) LeaseLost(id, token int64, cause error) bool {
	return h.cancel(id, token, cause, true)
}

func (h *Set) cancel(id, token int64, cause error, lost bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	j := h.jobs[id]
	if j == nil || j.Token != token || j.Returned {
		return false
	}
	if lost {
		delete(h.jobs, id)
	} else if j.CancelRequested {
		return false
	}
	j.CancelRequested = true
	j.Cancel(cause)
	return true
}
