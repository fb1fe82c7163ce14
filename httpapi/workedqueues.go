package httpapi

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sortiehq/sortie"
)

// workedQueues says which queues some worker works, to warn about an
// enqueue that no worker will pick up (a misspelt queue, or no worker
// deployed yet): the queues of the live processes in the store's registry,
// read at most once per workedTTL so an enqueue costs a map lookup, and the
// queues remote workers fetched through this API within remoteWorked.
type workedQueues struct {
	mu     sync.Mutex
	at     time.Time
	queues map[string]int
	// registry is false when no process is registered at all (the API's
	// own client not started, workers of an older sortie): then nothing
	// is said, since nothing is known. sortie serve's own client is
	// registered, so beside it a queue no process works is warned about.
	registry bool
	// fetched is when a remote worker last fetched from each queue.
	fetched map[string]time.Time
}

const (
	// workedTTL is how long a read of the registry is used.
	workedTTL = 5 * time.Second
	// remoteWorked is how long a queue counts as worked after a remote
	// worker's fetch from it: twice the longest long poll, so a worker
	// polling an idle queue is never missed.
	remoteWorked = 2 * defaultMaxWait
)

// fetchedFrom records that a remote worker fetched from queue now.
func (k *workedQueues) fetchedFrom(queue string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fetched == nil {
		k.fetched = make(map[string]time.Time)
	}
	k.fetched[queue] = time.Now()
}

// unknown returns a warning when no live process and no recent remote
// worker works queue (empty: the default queue), nil otherwise or when the
// registry cannot say.
func (k *workedQueues) unknown(ctx context.Context, c *sortie.Client, queue string) []string {
	if queue == "" {
		queue = sortie.QueueDefault
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.at) > workedTTL {
		queues, processes, err := c.QueuesWorked(ctx)
		if err != nil {
			return nil
		}
		k.at, k.queues, k.registry = time.Now(), queues, processes > 0
	}
	if !k.registry || k.queues[queue] > 0 || time.Since(k.fetched[queue]) < remoteWorked {
		return nil
	}
	return []string{fmt.Sprintf("no running worker works queue %q: the job waits until one does (is the queue's name right?)", queue)}
}
