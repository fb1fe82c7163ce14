package httpapi

import (
	"context"
	"fmt"
	"sync"

	"github.com/sortiehq/sortie"
)

// knownQueues remembers the queues the store held, to warn about an
// enqueue to a queue it did not know (a misspelt name, most often, which
// no worker fetches from). It reads the store's queue list once per queue
// name it has not seen, so a known queue costs nothing.
type knownQueues struct {
	mu   sync.Mutex
	seen map[string]bool
}

// unknown returns a warning when queue (empty: the default queue) has no
// jobs and no settings in the store yet, and nil otherwise or when the
// store cannot say (the enqueue itself will report a store that is down).
func (k *knownQueues) unknown(ctx context.Context, c *sortie.Client, queue string) []string {
	if queue == "" {
		queue = sortie.QueueDefault
	}
	k.mu.Lock()
	seen := k.seen[queue]
	k.mu.Unlock()
	if seen {
		return nil
	}
	rows, err := c.QueueList(ctx)
	if err != nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen == nil {
		k.seen = map[string]bool{}
	}
	for _, r := range rows {
		k.seen[r.Name] = true
	}
	if k.seen[queue] {
		return nil
	}
	k.seen[queue] = true // it holds this job from now on: warn once
	return []string{fmt.Sprintf("queue %q was not known to the store: it had no jobs and no settings, so no worker may be fetching from it (check its name)", queue)}
}
