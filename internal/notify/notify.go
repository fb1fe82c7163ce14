// Package notify fans wake-up signals out to the watchers of a queue. Stores
// that live in one process (memstore, sqlitestore) use it to implement
// Store.QueueWatch.
package notify

import (
	"sync"

	"github.com/sortiehq/sortie/store"
)

// Hub keeps the watchers of each queue. The zero value is ready to use.
type Hub struct {
	mu       sync.Mutex
	watchers map[string]map[chan struct{}]struct{}
}

// Watch registers a watcher for queue.
func (h *Hub) Watch(queue string) *store.Watch {
	c := make(chan struct{}, 1)
	h.mu.Lock()
	if h.watchers == nil {
		h.watchers = make(map[string]map[chan struct{}]struct{})
	}
	set := h.watchers[queue]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		h.watchers[queue] = set
	}
	set[c] = struct{}{}
	h.mu.Unlock()
	return store.NewWatch(c, func() {
		h.mu.Lock()
		delete(h.watchers[queue], c)
		if len(h.watchers[queue]) == 0 {
			delete(h.watchers, queue)
		}
		h.mu.Unlock()
	})
}

// Notify signals every watcher of queue without blocking; a watcher that
// already has a signal pending keeps just the one.
func (h *Hub) Notify(queue string) {
	h.mu.Lock()
	for c := range h.watchers[queue] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	h.mu.Unlock()
}

// NotifyAll signals the watchers of each queue in queues once.
func (h *Hub) NotifyAll(queues map[string]struct{}) {
	for q := range queues {
		h.Notify(q)
	}
}

// Count returns how many watchers queue has.
func (h *Hub) Count(queue string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watchers[queue])
}
