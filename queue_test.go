package sortie_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// QueueKnown knows the queues with jobs, settings or a pause, and those a
// registered process works; any other name is refused with the known ones.
func TestQueueKnown(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		c := newClient(t, st, &sortie.Config{})
		mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{Queue: "jobs"})
		if _, err := c.QueueConfigure(ctx, "limited", sortie.QueueSettings{MaxRunning: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.QueuePause(ctx, "paused"); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if _, err := st.ProcessBeat(ctx, &store.ProcessBeatParams{Now: now, Process: store.ProcessRow{ID: "w-1", StartedAt: now,
			Queues: []store.ProcessQueue{{Queue: "worked", Workers: 1}}}}); err != nil {
			t.Fatal(err)
		}
		known := []string{"jobs", "limited", "paused", "worked"}
		for _, q := range known {
			if err := c.QueueKnown(ctx, q); err != nil {
				t.Errorf("QueueKnown(%q) = %v, want nil", q, err)
			}
		}
		err := c.QueueKnown(ctx, "mial")
		var uq *sortie.UnknownQueueError
		if !errors.As(err, &uq) || uq.Queue != "mial" || !slices.Equal(uq.Known, known) ||
			err.Error() != `sortie: unknown queue "mial": no job, setting, pause or running process uses it (known queues: jobs, limited, paused, worked)` {
			t.Fatalf("QueueKnown(mial) = %v, want an *UnknownQueueError listing %v", err, known)
		}
	})
}

// QueueDelete refuses a queue with jobs, saying how many, and deletes an
// empty one: no longer listed, nor known.
func TestQueueDelete(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		c := newClient(t, st, &sortie.Config{})
		if _, err := c.QueuePause(ctx, "mial"); err != nil {
			t.Fatal(err)
		}
		id := mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{Queue: "mial"})
		err := c.QueueDelete(ctx, "mial")
		if !errors.Is(err, sortie.ErrQueueNotEmpty) || err.Error() != `sortie: queue is not empty: queue "mial" holds 1 job: delete its jobs (or let retention prune the finished ones) first` {
			t.Fatalf("QueueDelete of a queue with a job = %v, want ErrQueueNotEmpty saying so", err)
		}
		if _, err := c.JobDelete(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := c.QueueDelete(ctx, "mial"); err != nil {
			t.Fatalf("QueueDelete of an empty queue = %v", err)
		}
		if rows, err := c.QueueList(ctx); err != nil || len(rows) != 0 {
			t.Errorf("QueueList after QueueDelete = %v, %v; want none", rows, err)
		}
		var uq *sortie.UnknownQueueError
		if err := c.QueueKnown(ctx, "mial"); !errors.As(err, &uq) {
			t.Errorf("QueueKnown of a deleted queue = %v, want an *UnknownQueueError", err)
		}
		if err := c.QueueDelete(ctx, "bad name!"); !errors.Is(err, sortie.ErrInvalidArgument) {
			t.Errorf("QueueDelete of an invalid name = %v, want ErrInvalidArgument", err)
		}
	})
}
