package sortie_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// A result whose JSON is not valid UTF-8 (raw JSON, which encoding/json
// does not check) is refused, and the previous result is kept.
func TestSetResultRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	errs := make(chan error, 1)
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		if err := sortie.SetResult(ctx, json.RawMessage(`{"ok": true}`)); err != nil {
			return err
		}
		errs <- sortie.SetResult(ctx, json.RawMessage("{\"ok\": \"\xff\"}"))
		return nil
	}), nil)
	c := startClient(t, memstore.New(), &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
	id := mustEnqueue(t, c, Msg{}, nil)
	if err := <-errs; !errors.Is(err, sortie.ErrInvalidArgument) {
		t.Errorf("SetResult of invalid UTF-8 = %v, want ErrInvalidArgument", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	row, err := c.Wait(ctx, id)
	if err != nil || string(row.Result) != `{"ok":true}` {
		t.Fatalf("job = %+v, %v; want completed with the first result", row, err)
	}
}

// SetProgress spaces its writes by the client's clock: on a fake clock that
// does not move, a second value waits, and once the clock has moved on the
// next value is written at once.
func TestSetProgressSpacingFollowsTheClientClock(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	stored := make(chan float64)
	moved := make(chan struct{})
	var c *sortie.Client
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		progress := func(p float64) float64 {
			if err := sortie.SetProgress(ctx, p); err != nil {
				t.Errorf("SetProgress(%v) = %v", p, err)
			}
			row, err := c.JobGet(ctx, job.ID)
			if err != nil {
				t.Errorf("JobGet(%d) = %v", job.ID, err)
				return -1
			}
			return row.Progress
		}
		progress(10)
		stored <- progress(20)
		<-moved
		stored <- progress(30)
		return nil
	}), nil)
	c = startClient(t, memstore.New(), &sortie.Config{Workers: workers, Clock: fc, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
	mustEnqueue(t, c, Msg{}, nil)
	if got := <-stored; got != 10 {
		t.Fatalf("progress right after SetProgress(10), SetProgress(20) = %v, want 10 (the second waits)", got)
	}
	fc.Advance(200 * time.Millisecond)
	close(moved)
	if got := <-stored; got != 30 {
		t.Fatalf("progress after the clock moved 200ms and SetProgress(30) = %v, want 30", got)
	}
}

// extendRecorder passes the params of each LeaseExtend, once it returned,
// to calls (dropping them when calls is full).
type extendRecorder struct {
	store.Store
	calls chan *store.LeaseExtendParams
}

func (s *extendRecorder) LeaseExtend(ctx context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error) {
	st, err := s.Store.LeaseExtend(ctx, p)
	select {
	case s.calls <- p:
	default:
	}
	return st, err
}

// nextExtension returns the params of the next LeaseExtend call.
func (s *extendRecorder) nextExtension(t *testing.T) *store.LeaseExtendParams {
	t.Helper()
	select {
	case p := <-s.calls:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no LeaseExtend call within 10s")
		return nil
	}
}

// SetProgress writes through LeaseExtend, and a heartbeat carries the
// progress set since the last write in its lease extension: a job's
// heartbeat is one store call, progress included.
func TestHeartbeatCarriesProgress(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	rec := &extendRecorder{Store: memstore.New(), calls: make(chan *store.LeaseExtendParams, 8)}
	set, done := make(chan struct{}), make(chan struct{})
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		for _, p := range []float64{10, 20} {
			if err := sortie.SetProgress(ctx, p); err != nil {
				t.Errorf("SetProgress(%v) = %v", p, err)
			}
		}
		close(set)
		<-done
		return nil
	}), nil)
	// No process beats: their timer would be the earliest.
	c := startClient(t, rec, &sortie.Config{Workers: workers, Clock: fc, HeartbeatInterval: time.Minute, Lease: time.Hour,
		PollInterval: time.Hour, RescueInterval: 24 * time.Hour, ProcessBeat: -1, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
	defer close(done)
	id := mustEnqueue(t, c, Msg{}, nil)
	if p := rec.nextExtension(t); len(p.Leases) != 1 || p.Progress[p.Leases[0]] != 10 {
		t.Fatalf("LeaseExtend of SetProgress(10) = %+v, want job %d's lease with progress 10", p, id)
	}
	<-set
	// The heartbeat's timer is the earliest once armed (the others are an
	// hour or more away): wait for it before moving the clock.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := fc.AwaitDeadline(ctx, func(d time.Time) bool { return !d.After(t0.Add(time.Minute)) }); err != nil {
		t.Fatalf("heartbeat timer never armed: %v", err)
	}
	fc.Advance(time.Minute)
	p := rec.nextExtension(t)
	if len(p.Leases) != 1 || p.Leases[0].ID != id || p.Progress[p.Leases[0]] != 20 {
		t.Fatalf("heartbeat LeaseExtend = %+v, want job %d's lease with progress 20", p, id)
	}
	if got := mustGet(t, c, id).Progress; got != 20 {
		t.Errorf("job %d after the heartbeat: Progress = %v, want 20", id, got)
	}
}

func TestResultLimitAndWait(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		tooLarge := make(chan error, 1)
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			tooLarge <- sortie.SetResult(ctx, strings.Repeat("x", 200))
			return sortie.SetResult(ctx, map[string]string{"ok": job.Args.Text})
		}), nil)
		c := startClient(t, st, &sortie.Config{Workers: workers, MaxResultBytes: 100, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
		id := mustEnqueue(t, c, Msg{Text: "yes"}, nil)
		row, err := c.Wait(ctx, id)
		if err != nil || row.State != sortie.JobStateCompleted || string(row.Result) != `{"ok":"yes"}` {
			t.Fatalf("Wait = %+v, %v; want completed with result {\"ok\":\"yes\"}", row, err)
		}
		if err := <-tooLarge; !errors.Is(err, sortie.ErrResultTooLarge) || !strings.Contains(err.Error(), "more than Config.MaxResultBytes (100)") {
			t.Fatalf("oversized SetResult = %v, want ErrResultTooLarge naming the limit", err)
		}
		if err := sortie.SetResult(ctx, 1); !errors.Is(err, sortie.ErrNotInJob) {
			t.Fatalf("SetResult outside a job = %v, want ErrNotInJob", err)
		}
	})
}
