package sortie_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// beatRecorder passes every ProcessBeat's result to beats, the ID of every
// ProcessDelete to deletes, and the number of jobs each JobFetch claimed to
// fetches (while it has room).
type beatRecorder struct {
	*memstore.Store
	beats   chan *store.ProcessRow
	deletes chan string
	fetches chan int
}

func newBeatRecorder() *beatRecorder {
	return &beatRecorder{Store: memstore.New(), beats: make(chan *store.ProcessRow, 8), deletes: make(chan string, 1),
		fetches: make(chan int, 64)}
}

func (r *beatRecorder) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	res, err := r.Store.JobFetch(ctx, p)
	if err == nil {
		select {
		case r.fetches <- len(res.Jobs):
		default:
		}
	}
	return res, err
}

// waitDrained waits for a fetch that claimed nothing after one that claimed
// jobs. A client whose jobs ran and whose queue is then empty has no fetch
// out after it until something wakes it.
func (r *beatRecorder) waitDrained(t *testing.T) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	claimed := false
	for {
		select {
		case n := <-r.fetches:
			if n > 0 {
				claimed = true
			} else if claimed {
				return
			}
		case <-timeout:
			t.Fatal("no empty fetch after the claim within 10s")
		}
	}
}

func (r *beatRecorder) ProcessDelete(ctx context.Context, p *store.ProcessDeleteParams) error {
	err := r.Store.ProcessDelete(ctx, p)
	r.deletes <- p.ID
	return err
}

func (r *beatRecorder) ProcessBeat(ctx context.Context, p *store.ProcessBeatParams) (*store.ProcessRow, error) {
	row, err := r.Store.ProcessBeat(ctx, p)
	if err == nil {
		r.beats <- row
	}
	return row, err
}

func (r *beatRecorder) next(t *testing.T) *store.ProcessRow {
	t.Helper()
	select {
	case row := <-r.beats:
		return row
	case <-time.After(10 * time.Second):
		t.Fatal("no process beat within 10s")
		return nil
	}
}

// A started client registers itself (host, PID, queues, busy workers),
// beats every ProcessBeat on its clock, and leaves the registry at Stop.
func TestProcessRegistry(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	rec := newBeatRecorder()
	c := newClient(t, rec, &sortie.Config{Workers: msgWorkers(func(context.Context, *sortie.Job[Msg]) error { return nil }), Clock: fc, ID: "proc-test", ProcessBeat: 10 * time.Second, RescueInterval: time.Hour, PollInterval: time.Hour, Lease: time.Hour,
		Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 3}}, Pools: map[string]sortie.PoolConfig{
			"mixed": {Queues: []string{"a", "b"}, MaxWorkers: 2}}})
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	first := rec.next(t)
	host, _ := os.Hostname()
	if first.ID != "proc-test" || first.Host != host || first.PID != os.Getpid() || !first.LastBeat.Equal(t0) || !first.StartedAt.Equal(t0) ||
		len(first.Queues) != 3 || first.Queues[0] != (sortie.ProcessQueue{Queue: "default", Workers: 3}) || first.Queues[1].Queue != "a" {
		t.Errorf("first beat = %+v", first)
	}
	advanceToBeat(t, fc, 10*time.Second)
	if row := rec.next(t); !row.LastBeat.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("second beat at %v, want %v", row.LastBeat, t0.Add(10*time.Second))
	}
	rows, err := c.Processes(t.Context())
	if err != nil || len(rows) != 1 || !c.ProcessAlive(rows[0]) {
		t.Fatalf("Processes = %v, %v; want this client, alive", rows, err)
	}
	advanceToBeat(t, fc, 10*time.Second)
	rec.next(t)
	fc.Advance(time.Hour)
	if c.ProcessAlive(rows[0]) {
		t.Errorf("a row last beat an hour ago counts as alive")
	}
	if err := c.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-rec.deletes
	if rows, _ := c.Processes(t.Context()); len(rows) != 0 {
		t.Errorf("Processes after Stop = %v, want none", rows)
	}
}

// Quiet stops the client fetching at its next beat, while it stays up;
// stop then stops it gracefully and closes StopRequested.
func TestProcessCommands(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	rec := newBeatRecorder()
	ran := make(chan int64, 4)
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		ran <- job.ID
		return nil
	}), nil)
	c := newClient(t, rec, &sortie.Config{Workers: workers, Clock: fc, ID: "cmd-test", ProcessBeat: 10 * time.Second, RescueInterval: time.Hour, PollInterval: time.Hour, Lease: time.Hour,
		Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	rec.next(t)
	before := mustEnqueue(t, c, Msg{}, nil)
	if got := <-ran; got != before {
		t.Fatalf("ran job %d, want %d", got, before)
	}
	// A fetch already out when the quiet command arrives still claims what
	// it finds; the command stops the fetches after it. Quiet the client
	// once its queue is drained, so that none is out.
	rec.waitDrained(t)
	if _, err := c.CommandProcess(t.Context(), "nobody", sortie.ProcessQuiet); err == nil {
		t.Errorf("CommandProcess(nobody) succeeded")
	}
	if _, err := c.CommandProcess(t.Context(), "cmd-test", sortie.ProcessQuiet); err != nil {
		t.Fatal(err)
	}
	advanceToBeat(t, fc, 10*time.Second)
	if row := rec.next(t); !row.Quiet {
		t.Fatalf("beat after quiet = %+v", row)
	}
	// The client acts on a beat's commands before its next beat.
	advanceToBeat(t, fc, 10*time.Second)
	rec.next(t)
	after := mustEnqueue(t, c, Msg{}, nil)
	if _, err := c.CommandProcess(t.Context(), "cmd-test", sortie.ProcessStop); err != nil {
		t.Fatal(err)
	}
	advanceToBeat(t, fc, 10*time.Second)
	select {
	case <-c.StopRequested():
	case <-time.After(10 * time.Second):
		t.Fatal("StopRequested not closed after a stop command")
	}
	// The client stops by itself; its row goes with it.
	select {
	case id := <-rec.deletes:
		if id != "cmd-test" {
			t.Errorf("deleted process %q", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not stop and leave the registry after a stop command")
	}
	if row := mustGet(t, c, after); row.State != sortie.JobStateAvailable {
		t.Errorf("job enqueued after quiet is %s, want available: a quiet process must not fetch", row.State)
	}
	select {
	case id := <-ran:
		t.Errorf("job %d ran after quiet", id)
	default:
	}
}

// A client's beats carry its periodic schedules: spec, misfire policy and
// the slot it waits for.
func TestProcessReportsSchedules(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
	fc := clock.NewFake(t0)
	rec := newBeatRecorder()
	c := newClient(t, rec, &sortie.Config{Workers: msgWorkers(func(context.Context, *sortie.Job[Msg]) error { return nil }), Clock: fc,
		ProcessBeat: 10 * time.Second, RescueInterval: time.Hour, PollInterval: time.Hour, Lease: time.Hour, Periodic: []*sortie.PeriodicJob{
			{Name: "hourly", Cron: "0 * * * *", Args: func(time.Time) sortie.JobArgs { return Msg{} }},
			{Name: "tick", Interval: time.Minute, Misfire: sortie.MisfireSkip, Args: func(time.Time) sortie.JobArgs { return Msg{} }},
		}})
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(context.Background()) }()
	var row *store.ProcessRow
	for row = rec.next(t); len(row.Periodic) < 2 || row.Periodic[0].Next.IsZero() || row.Periodic[1].Next.IsZero(); row = rec.next(t) {
		advanceToBeat(t, fc, 10*time.Second)
	}
	h, k := row.Periodic[0], row.Periodic[1]
	if h.Name != "hourly" || h.Spec != "0 * * * *" || h.Misfire != "run_once" || h.Next.Before(t0) || h.Next.Minute() != 0 || h.Next.Second() != 0 {
		t.Errorf("hourly schedule reported as %+v", h)
	}
	if k.Name != "tick" || k.Spec != "every 1m0s" || k.Misfire != "skip" || k.Next.IsZero() {
		t.Errorf("tick schedule reported as %+v", k)
	}
}

// advanceToBeat waits until a timer is armed at d from now (the
// registry's, re-armed after its last beat; the tests keep the client's
// other timers an hour away), then moves the clock by d.
func advanceToBeat(t *testing.T, fc *clock.Fake, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	limit := fc.Now().Add(d)
	if _, err := fc.AwaitDeadline(ctx, func(dl time.Time) bool { return dl.Equal(limit) }); err != nil {
		t.Fatalf("no timer armed within %s: %v", d, err)
	}
	fc.Advance(d)
}
