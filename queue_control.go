package sortie

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
)

// QueuePause pauses queue for every process sharing the store: it still
// takes enqueues, but no worker starts its jobs until QueueResume. Running
// jobs finish. It takes effect at each worker's next fetch.
func (c *Client) QueuePause(ctx context.Context, queue string) (*QueueRow, error) {
	return c.queuePause(ctx, queue, true)
}

// QueueResume resumes a paused queue and wakes its workers.
func (c *Client) QueueResume(ctx context.Context, queue string) (*QueueRow, error) {
	return c.queuePause(ctx, queue, false)
}

func (c *Client) queuePause(ctx context.Context, queue string, paused bool) (*QueueRow, error) {
	if err := store.ValidateQueueName(queue); err != nil {
		return nil, invalidf("queue: %v", err)
	}
	row, err := c.store.QueuePause(ctx, &store.QueuePauseParams{Queue: queue, Paused: paused, Now: c.clock.Now()})
	if err != nil {
		verb := "pause"
		if !paused {
			verb = "resume"
		}
		return nil, fmt.Errorf("%s queue %q: %w", verb, queue, err)
	}
	return row, nil
}

// QueueConfigure replaces queue's shared settings (global concurrency, rate
// limits, partition limits, maximum depth) for every process.
func (c *Client) QueueConfigure(ctx context.Context, queue string, settings QueueSettings) (*QueueRow, error) {
	if err := store.ValidateQueueName(queue); err != nil {
		return nil, invalidf("queue: %v", err)
	}
	if err := validateQueueSettings(fmt.Sprintf("settings of queue %q", queue), &settings); err != nil {
		return nil, err
	}
	row, err := c.store.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: queue, Settings: settings, Now: c.clock.Now()})
	if err != nil {
		return nil, fmt.Errorf("configure queue %q: %w", queue, err)
	}
	return row, nil
}

// QueueGet returns a queue's shared state.
func (c *Client) QueueGet(ctx context.Context, queue string) (*QueueRow, error) {
	row, err := c.store.QueueGet(ctx, &store.QueueGetParams{Queue: queue})
	if err != nil {
		return nil, fmt.Errorf("get queue %q: %w", queue, err)
	}
	return row, nil
}

// QueueList returns every queue that has jobs, settings or a pause, by name.
func (c *Client) QueueList(ctx context.Context) ([]*QueueRow, error) {
	rows, err := c.store.QueueList(ctx, &store.QueueListParams{})
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return rows, nil
}

// QueueOverview is every queue with its job counts and how long its oldest
// due job has waited: what the dashboard's overview, GET /api/v1/queues and
// `sortie queues` list.
type QueueOverview struct {
	// Queues are QueueList's rows.
	Queues []*QueueRow
	// Counts are JobCounts of every queue.
	Counts []QueueStateCount
	// Latency is QueueLatency's Latency by queue; a queue without due
	// jobs is not in it.
	Latency map[string]time.Duration
}

// QueueOverview reads the queues, their job counts and their latencies,
// one store call each.
func (c *Client) QueueOverview(ctx context.Context) (*QueueOverview, error) {
	rows, err := c.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := c.JobCounts(ctx, "")
	if err != nil {
		return nil, err
	}
	latency, err := c.QueueLatency(ctx, "")
	if err != nil {
		return nil, err
	}
	ov := &QueueOverview{Queues: rows, Counts: counts, Latency: make(map[string]time.Duration, len(latency))}
	for _, l := range latency {
		ov.Latency[l.Queue] = l.Latency
	}
	return ov, nil
}

// QueueDelete deletes an empty queue, for every process: its settings and
// pause go, and it is no longer listed. A queue holding jobs in any state
// (finished ones included) is refused with an error wrapping
// ErrQueueNotEmpty that says how many; delete them, or let retention prune
// the finished ones, first. A queue no one knows is no error. A later
// enqueue or pause makes the queue anew, with no settings.
func (c *Client) QueueDelete(ctx context.Context, queue string) error {
	if err := store.ValidateQueueName(queue); err != nil {
		return invalidf("queue: %v", err)
	}
	err := c.store.QueueDelete(ctx, &store.QueueDeleteParams{Queue: queue})
	if err != nil && !errors.Is(err, ErrQueueNotEmpty) { // that one names the queue
		return fmt.Errorf("delete queue %q: %w", queue, err)
	}
	return err
}

// QueueKnown returns nil when queue is in use: it has jobs (in any state),
// settings or a pause in the store, or a registered process (this client
// included) works it. Otherwise it returns an *UnknownQueueError listing
// the queues in use. The command line, the HTTP API and the dashboard ask
// it before they pause or configure a queue, so that a typo does not make
// a queue; QueuePause and QueueConfigure themselves take any valid name.
func (c *Client) QueueKnown(ctx context.Context, queue string) error {
	if err := store.ValidateQueueName(queue); err != nil {
		return invalidf("queue: %v", err)
	}
	known, err := c.queuesInUse(ctx)
	if err != nil {
		return err
	}
	if _, ok := slices.BinarySearch(known, queue); ok {
		return nil
	}
	return &UnknownQueueError{Queue: queue, Known: known}
}

// queuesInUse returns the queues the store lists and those the registered
// processes and this client work, sorted and without repeats.
func (c *Client) queuesInUse(ctx context.Context) ([]string, error) {
	rows, err := c.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	procs, err := c.Processes(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
	}
	for _, p := range procs {
		for _, q := range p.Queues {
			names = append(names, q.Queue)
		}
	}
	names = append(names, sortedKeys(c.cfg.Queues)...)
	for _, pc := range c.cfg.Pools {
		names = append(names, pc.Queues...)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
