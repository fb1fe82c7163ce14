package pgstore

import (
	"context"
	"sync"
	"time"

	"github.com/sortiehq/sortie/store"
)

// waiters wakes JobWait calls of this process when this Store finishes or
// deletes their job. Finishes by other processes are seen by polling.
type waiters struct {
	mu sync.Mutex
	m  map[int64][]chan struct{}
}

func newWaiters() *waiters { return &waiters{m: map[int64][]chan struct{}{}} }

func (w *waiters) add(id int64) chan struct{} {
	c := make(chan struct{})
	w.mu.Lock()
	w.m[id] = append(w.m[id], c)
	w.mu.Unlock()
	return c
}

func (w *waiters) remove(id int64, c chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := w.m[id]
	for i := range cs {
		if cs[i] == c {
			cs = append(cs[:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(w.m, id)
	} else {
		w.m[id] = cs
	}
}

// wake closes the channels waiting for id.
func (w *waiters) wake(id int64) {
	w.mu.Lock()
	cs := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	for _, c := range cs {
		close(c)
	}
}

// finished wakes the waiters of the jobs that reached a final state.
func (w *waiters) finished(done []finished) {
	w.mu.Lock()
	empty := len(w.m) == 0
	w.mu.Unlock()
	if empty {
		return
	}
	for _, f := range done {
		if f.state.Finished() {
			w.wake(f.id)
		}
	}
}

func (w *waiters) deleted(id int64) { w.wake(id) }

func (w *waiters) closeAll() {
	w.mu.Lock()
	m := w.m
	w.m = map[int64][]chan struct{}{}
	w.mu.Unlock()
	for _, cs := range m {
		for _, c := range cs {
			close(c)
		}
	}
}

// Poll intervals of JobWait: it reads the job again after waitPollMin,
// doubling up to waitPollMax, or at once when this Store finishes it.
const (
	waitPollMin = 10 * time.Millisecond
	waitPollMax = 500 * time.Millisecond
)

// JobWait returns the job once it is finished. A finish by this Store wakes
// the waiter at once; finishes by other processes are seen by reading the
// job again, at intervals growing from 10 ms to 500 ms.
func (s *Store) JobWait(ctx context.Context, p *store.JobWaitParams) (*store.JobRow, error) {
	poll := waitPollMin
	for {
		c := s.waits.add(p.ID)
		j, err := s.JobGet(ctx, &store.JobGetParams{ID: p.ID})
		if err != nil || j.State.Finished() {
			s.waits.remove(p.ID, c)
			return j, err
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			s.waits.remove(p.ID, c)
			return nil, ctx.Err()
		case <-c:
		case <-t.C:
			poll = min(2*poll, waitPollMax)
		}
		t.Stop()
		s.waits.remove(p.ID, c)
		if err := s.checkOpen(); err != nil {
			return nil, err
		}
	}
}
