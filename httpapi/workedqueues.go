package httpapi

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sortiehq/sortie"
)

// workedQueues says which queues some running client process works, from
// the store's process registry, to warn about an enqueue that no worker
// will pick up (a misspelt queue, or no worker deployed yet). It reads the
// registry at most once per workedTTL, so an enqueue costs a map lookup.
type workedQueues struct {
	mu     sync.Mutex
	at     time.Time
	queues map[string]bool
	// registry is false when no process is registered at all (workers of
	// an older sortie, or a client with ProcessBeat < 0): then nothing is
	// said, since nothing is known.
	registry bool
}

// workedTTL is how long a read of the registry is used.
const workedTTL = 5 * time.Second

// unknown returns a warning when no live process works queue (empty: the
// default queue), nil otherwise or when the registry cannot say.
func (k *workedQueues) unknown(ctx context.Context, c *sortie.Client, queue string) []string {
	if queue == "" {
		queue = sortie.QueueDefault
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.at) > workedTTL {
		rows, err := c.Processes(ctx)
		if err != nil {
			return nil
		}
		k.at, k.queues, k.registry = time.Now(), map[string]bool{}, false
		for _, r := range rows {
			if !c.ProcessAlive(r) || r.Quiet || r.Stop {
				continue
			}
			for _, q := range r.Queues {
				k.queues[q.Queue] = true
				k.registry = true
			}
		}
	}
	if !k.registry || k.queues[queue] {
		return nil
	}
	return []string{fmt.Sprintf("no running worker works queue %q: the job waits until one does (is the queue's name right?)", queue)}
}
