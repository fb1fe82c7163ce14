package sortie_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/sortietest"
	"github.com/sortiehq/sortie/store/memstore"
)

// SyncAccounts is the args of a periodic job: the slot it was enqueued for.
type SyncAccounts struct {
	Slot time.Time `json:"slot"`
}

func (SyncAccounts) Kind() string { return "sync_accounts" }

// armClock is a fake clock that records the deadline of every timer armed
// on it, so the example moves time only once the scheduler waits for a
// slot. A real program uses the wall clock (the default).
type armClock struct {
	*sortietest.FakeClock

	mu      sync.Mutex
	armed   map[time.Time]bool
	changed chan struct{} // closed and replaced when a timer is armed
}

func newArmClock(start time.Time) *armClock {
	return &armClock{FakeClock: sortietest.NewFakeClock(start), armed: map[time.Time]bool{}, changed: make(chan struct{})}
}

func (c *armClock) NewTimer(d time.Duration) sortie.Timer {
	at := c.Now().Add(d)
	t := &armTimer{Timer: c.FakeClock.NewTimer(d), c: c}
	c.note(at)
	return t
}

func (c *armClock) note(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed[at] = true
	close(c.changed)
	c.changed = make(chan struct{})
}

// waitArmed returns once a timer has been armed for at.
func (c *armClock) waitArmed(at time.Time) {
	for {
		c.mu.Lock()
		ok, changed := c.armed[at], c.changed
		c.mu.Unlock()
		if ok {
			return
		}
		<-changed
	}
}

type armTimer struct {
	sortie.Timer
	c *armClock
}

func (t *armTimer) Reset(d time.Duration) {
	at := t.c.Now().Add(d)
	t.Timer.Reset(d)
	t.c.note(at)
}

// Periodic jobs: every started client runs every schedule, and the store
// enqueues each slot once, with the unique key periodic:<name>:<slot>.
func ExamplePeriodicJob() {
	ctx := context.Background()
	clk := newArmClock(time.Date(2030, 1, 1, 9, 7, 0, 0, time.UTC))
	st := memstore.New()
	defer st.Close()

	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[SyncAccounts]) error {
		fmt.Println("syncing accounts for", job.Args.Slot.Format(time.Kitchen))
		return nil
	}), nil)
	enqueued := make(chan *sortie.JobRow, 8)
	client, err := sortie.NewClient(st, &sortie.Config{
		Workers: workers,
		Clock:   clk,
		Periodic: []*sortie.PeriodicJob{{
			Name:     "sync",
			Interval: 15 * time.Minute, // slots aligned to the Unix epoch: :00, :15, :30, :45
			Args:     func(slot time.Time) sortie.JobArgs { return SyncAccounts{Slot: slot} },
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	client.Subscribe(func(e *sortie.Event) {
		if e.Kind == sortie.EventJobEnqueued {
			enqueued <- e.Job
		}
	})
	// The client works no queue here (Config.Queues is empty), so starting
	// it runs only the scheduler and the maintenance services.
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	for _, slot := range []time.Time{
		time.Date(2030, 1, 1, 9, 15, 0, 0, time.UTC), // a schedule first starts at its next slot
		time.Date(2030, 1, 1, 9, 30, 0, 0, time.UTC),
	} {
		clk.waitArmed(slot)
		clk.Set(slot)
		job := <-enqueued
		fmt.Println("enqueued", job.Kind, job.UniqueKey)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}

	// Drain runs the enqueued jobs inline, as a test would.
	if _, err := client.Drain(ctx); err != nil {
		log.Fatal(err)
	}
	schedules, err := client.PeriodicList(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range schedules {
		fmt.Println("schedule", s.Name, "last slot", s.Last.Format(time.RFC3339))
	}
	// Output:
	// enqueued sync_accounts periodic:sync:2030-01-01T09:15:00Z
	// enqueued sync_accounts periodic:sync:2030-01-01T09:30:00Z
	// syncing accounts for 9:15AM
	// syncing accounts for 9:30AM
	// schedule sync last slot 2030-01-01T09:30:00Z
}
