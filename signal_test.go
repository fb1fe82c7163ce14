package sortie_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store/memstore"
)

// runWorkers returns workers for Msg: a job whose Text is "long" runs until
// its context ends; any other waits for finish. Each signals started.
func runWorkers(started chan<- int64, finish <-chan struct{}) *sortie.Workers {
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		started <- job.ID
		if job.Args.Text == "long" {
			<-ctx.Done()
			return ctx.Err()
		}
		select {
		case <-finish:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), nil)
	return workers
}

// The first signal stops fetching and lets running jobs finish; the second
// cancels the rest and puts them back, and Run returns at once. (The
// signals are SIGUSR1 to this test process; internal/testkit/multiproc sends
// SIGTERM to worker processes.)
func TestRunTwoSignals(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	started, finish := make(chan int64, 4), make(chan struct{})
	logs := &syncBuffer{}
	c := newClient(t, st, &sortie.Config{Workers: runWorkers(started, finish), Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 2}}})
	short := mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{Priority: 1})
	long := mustEnqueue(t, c, Msg{Text: "long"}, &sortie.EnqueueOpts{Priority: 1})
	waiting := mustEnqueue(t, c, Msg{}, nil)
	ev := record(t, c)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background(), &sortie.RunOpts{Signals: []os.Signal{syscall.SIGUSR1}}) }()
	<-started
	<-started

	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "stopping: no new jobs")
	close(finish)
	ev.finished(t, short, 1)
	select {
	case err := <-ran:
		t.Fatalf("Run() = %v after the first signal while a job was running, want it to drain", err)
	default:
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run() = %v after the second signal, want nil: the running job was put back", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run() did not return within 5s of the second signal")
	}
	for _, want := range []struct {
		id      int64
		state   sortie.JobState
		attempt int
	}{{short, sortie.JobStateCompleted, 1}, {long, sortie.JobStateAvailable, 0}, {waiting, sortie.JobStateAvailable, 0}} {
		if row := mustGet(t, c, want.id); row.State != want.state || row.Attempt != want.attempt {
			t.Errorf("job %d after Run: state %s attempt %d, want %s on attempt %d", want.id, row.State, row.Attempt, want.state, want.attempt)
		}
	}
}

// The end of ctx starts the drain too, and the drain timeout cancels and
// puts back what still runs; a stop command does the same.
func TestRunDrainTimeout(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		stop func(c *sortie.Client, cancel context.CancelFunc) error
	}{
		{"context", func(_ *sortie.Client, cancel context.CancelFunc) error { cancel(); return nil }},
		{"stop command", func(c *sortie.Client, _ context.CancelFunc) error {
			_, err := c.CommandProcess(context.Background(), c.ID(), sortie.ProcessStop)
			return err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inner := memstore.New()
			t.Cleanup(func() { _ = inner.Close() })
			st := storefault.New(inner)
			started := make(chan int64, 1)
			c := newClient(t, st, &sortie.Config{Workers: runWorkers(started, nil), ProcessBeat: 10 * time.Millisecond,
				Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
			long := mustEnqueue(t, c, Msg{Text: "long"}, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- c.Run(ctx, &sortie.RunOpts{DrainTimeout: 100 * time.Millisecond}) }()
			<-started
			// The process is in the registry once its first beat returned,
			// that is when the second one starts.
			wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer wcancel()
			if err := st.WaitCalls(wctx, "ProcessBeat", 2); err != nil {
				t.Fatalf("the process's second beat: %v", err)
			}
			if err := tt.stop(c, cancel); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-ran:
				if err != nil {
					t.Fatalf("Run() = %v, want nil: the job was put back at the drain timeout", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run() did not return within 10s with a 100ms drain timeout")
			}
			if row := mustGet(t, c, long); row.State != sortie.JobStateAvailable || row.Attempt != 0 {
				t.Errorf("job after Run: state %s attempt %d, want available on attempt 0", row.State, row.Attempt)
			}
		})
	}
}

// Run refuses a negative drain timeout, naming the field.
func TestRunBadOpts(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	c := newClient(t, st, &sortie.Config{})
	err := c.Run(context.Background(), &sortie.RunOpts{DrainTimeout: -time.Second})
	if !errors.Is(err, sortie.ErrInvalidArgument) || err.Error() != "sortie: RunOpts.DrainTimeout must not be negative, got -1s" {
		t.Fatalf("Run(DrainTimeout -1s) = %v, want an invalid argument naming RunOpts.DrainTimeout", err)
	}
}
