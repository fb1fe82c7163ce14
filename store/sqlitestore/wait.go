package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sortiehq/sortie/store"
)

// waitPoll is how often JobWait reads the job again even without a
// notification: another process writing the same file does not notify this
// one.
const waitPoll = time.Second

// jobHub wakes the JobWait callers of a job after the commit that finished
// or deleted it.
type jobHub struct {
	// mu guards waiters.
	mu      sync.Mutex
	waiters map[int64]map[chan struct{}]struct{}
}

// watch registers a waiter for job id; stop unregisters it.
func (h *jobHub) watch(id int64) (c chan struct{}, stop func()) {
	c = make(chan struct{}, 1)
	h.mu.Lock()
	if h.waiters == nil {
		h.waiters = make(map[int64]map[chan struct{}]struct{})
	}
	set := h.waiters[id]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		h.waiters[id] = set
	}
	set[c] = struct{}{}
	h.mu.Unlock()
	return c, func() {
		h.mu.Lock()
		delete(h.waiters[id], c)
		if len(h.waiters[id]) == 0 {
			delete(h.waiters, id)
		}
		h.mu.Unlock()
	}
}

// notify signals the waiters of ids without blocking.
func (h *jobHub) notify(ids []int64) {
	if len(ids) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.waiters) == 0 {
		return
	}
	for _, id := range ids {
		for c := range h.waiters[id] {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// JobWait returns the job once it is finished, waiting as long as ctx
// allows. This process's own writes wake it at once; a job finished by
// another process using the same file is seen within about a second.
func (s *Store) JobWait(ctx context.Context, p *store.JobWaitParams) (*store.JobRow, error) {
	c, stop := s.jobs.watch(p.ID)
	defer stop()
	var timer *time.Timer
	for {
		j, err := s.JobGet(ctx, &store.JobGetParams{ID: p.ID})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("sqlitestore: wait for job %d: %w", p.ID, ctx.Err())
			}
			return nil, err
		}
		if j.State.Finished() {
			return j, nil
		}
		if timer == nil {
			timer = time.NewTimer(waitPoll)
			defer timer.Stop()
		} else {
			timer.Reset(waitPoll)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("sqlitestore: wait for job %d: %w", p.ID, ctx.Err())
		case <-c:
		case <-timer.C:
		}
	}
}
