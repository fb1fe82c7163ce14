package sortie_test

import (
	"context"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store/memstore"
)

// A finished event's Duration is measured on the client's clock.
func TestFinishedEventDurationFollowsTheClientClock(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	started, moved := make(chan struct{}), make(chan struct{})
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		close(started)
		<-moved
		return nil
	}), nil)
	c := startClient(t, memstore.New(), &sortie.Config{Workers: workers, Clock: fc, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
	ev := record(t, c)
	id := mustEnqueue(t, c, Msg{}, nil)
	<-started
	fc.Advance(3 * time.Second)
	close(moved)
	if got := ev.finished(t, id, 1).Duration; got != 3*time.Second {
		t.Fatalf("finished event's Duration = %s, want the 3s the client's clock moved while the handler ran", got)
	}
}
