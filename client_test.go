package sortie_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
)

func TestClientRunsJobToCompletion(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		workers := sortie.NewWorkers()
		got := make(chan string, 1)
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			got <- job.Args.Text
			return nil
		}), nil)
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 2}}})
		ev := record(t, c)
		id := mustEnqueue(t, c, Msg{Text: "hello"}, nil)
		fin := ev.finished(t, id, 1)
		if fin.Outcome != sortie.OutcomeCompleted {
			t.Fatalf("outcome = %s, want completed", fin.Outcome)
		}
		if text := <-got; text != "hello" {
			t.Fatalf("worker got args %q, want %q", text, "hello")
		}
		row := mustGet(t, c, id)
		if row.State != sortie.JobStateCompleted || row.Attempt != 1 || row.FinalizedAt.IsZero() {
			t.Fatalf("job after run: state %s attempt %d finalized %v, want completed, 1, set", row.State, row.Attempt, row.FinalizedAt)
		}
		if row.AttemptedBy != c.ID() {
			t.Fatalf("AttemptedBy = %q, want the client ID %q", row.AttemptedBy, c.ID())
		}
	})
}

func TestClientRetriesThenDead(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		workers := sortie.NewWorkers()
		var calls atomic.Int32
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			calls.Add(1)
			return errors.New("boom " + job.Args.Text)
		}), &sortie.WorkerOpts{MaxAttempts: 3, RetryPolicy: fastRetry()})
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}, PollInterval: 5 * time.Millisecond})
		ev := record(t, c)
		id := mustEnqueue(t, c, Msg{Text: "x"}, nil)
		for i, want := range []sortie.Outcome{sortie.OutcomeRetrying, sortie.OutcomeRetrying, sortie.OutcomeDead} {
			if got := ev.finished(t, id, i+1).Outcome; got != want {
				t.Fatalf("attempt %d outcome = %s, want %s", i+1, got, want)
			}
		}
		row := mustGet(t, c, id)
		if row.State != sortie.JobStateDead || row.Attempt != 3 {
			t.Fatalf("state %s attempt %d, want dead after 3", row.State, row.Attempt)
		}
		if len(row.Errors) != 3 {
			t.Fatalf("%d errors recorded, want 3", len(row.Errors))
		}
		for i, e := range row.Errors {
			if e.Attempt != i+1 || e.Message != "boom x" {
				t.Fatalf("error %d = %+v, want attempt %d message %q", i, e, i+1, "boom x")
			}
		}
		if n := calls.Load(); n != 3 {
			t.Fatalf("handler called %d times, want 3", n)
		}
	})
}

func TestClientOutcomes(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		workers := sortie.NewWorkers()
		var snoozed atomic.Bool
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			switch job.Args.Text {
			case "cancel":
				return sortie.Cancel(errors.New("not wanted"))
			case "snooze":
				if snoozed.CompareAndSwap(false, true) {
					return sortie.Snooze(time.Millisecond)
				}
				return nil
			case "panic":
				panic("kaboom")
			case "timeout":
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}), &sortie.WorkerOpts{MaxAttempts: 1})
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 4}}, PollInterval: 5 * time.Millisecond})
		ev := record(t, c)

		cancelID := mustEnqueue(t, c, Msg{Text: "cancel"}, nil)
		snoozeID := mustEnqueue(t, c, Msg{Text: "snooze"}, nil)
		panicID := mustEnqueue(t, c, Msg{Text: "panic"}, nil)
		timeoutID := mustEnqueue(t, c, Msg{Text: "timeout"}, &sortie.EnqueueOpts{Timeout: 20 * time.Millisecond})

		if got := ev.finished(t, cancelID, 1).Outcome; got != sortie.OutcomeCancelled {
			t.Errorf("cancel: outcome %s, want cancelled", got)
		}
		row := mustGet(t, c, cancelID)
		if row.State != sortie.JobStateCancelled || len(row.Errors) != 1 || row.Errors[0].Message != "not wanted" {
			t.Errorf("cancel: state %s errors %+v, want cancelled with the cause recorded", row.State, row.Errors)
		}

		if got := ev.finished(t, snoozeID, 1).Outcome; got != sortie.OutcomeSnoozed {
			t.Errorf("snooze: first outcome %s, want snoozed", got)
		}
		if got := ev.finished(t, snoozeID, 2).Outcome; got != sortie.OutcomeCompleted {
			t.Errorf("snooze: second outcome %s, want completed", got)
		}
		if row := mustGet(t, c, snoozeID); row.Attempt != 1 {
			t.Errorf("snooze: attempt %d after a snooze and a success, want 1 (snooze not counted)", row.Attempt)
		}

		if got := ev.finished(t, panicID, 1).Outcome; got != sortie.OutcomeDead {
			t.Errorf("panic: outcome %s, want dead (1 attempt)", got)
		}
		row = mustGet(t, c, panicID)
		if len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Message, "kaboom") || !strings.Contains(row.Errors[0].Stack, "client_test.go") {
			t.Errorf("panic: errors %+v, want the panic value and a stack naming the handler", row.Errors)
		}

		ev.finished(t, timeoutID, 1)
		row = mustGet(t, c, timeoutID)
		if len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Message, "timed out after 20ms") {
			t.Errorf("timeout: errors %+v, want a message saying it timed out after 20ms", row.Errors)
		}
	})
}

func TestClientUndecodableArgs(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), &sortie.WorkerOpts{MaxAttempts: 1})
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
		ev := record(t, c)
		res, err := st.JobEnqueueMany(context.Background(), &store.JobEnqueueManyParams{Now: time.Now(), Jobs: []*store.NewJob{
			{Kind: "msg", Queue: "default", Args: []byte(`{"text": 42}`), Priority: 2, MaxAttempts: 1},
		}})
		if err != nil {
			t.Fatal(err)
		}
		ev.finished(t, res[0].ID, 1)
		row := mustGet(t, c, res[0].ID)
		if row.State != sortie.JobStateDead || len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Message, `decode args of kind "msg"`) {
			t.Fatalf("state %s errors %+v, want dead with a decode error naming the kind", row.State, row.Errors)
		}
	})
}

func TestClientNeverClaimsUnknownKind(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), nil)
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
		ev := record(t, c)
		otherID := mustEnqueue(t, c, Other{}, nil)
		msgID := mustEnqueue(t, c, Msg{}, nil)
		ev.finished(t, msgID, 1)
		row := mustGet(t, c, otherID)
		if row.State != sortie.JobStateAvailable || row.Attempt != 0 {
			t.Fatalf("job of unregistered kind: state %s attempt %d, want available with no attempt charged", row.State, row.Attempt)
		}
	})
}

func TestClientScheduledJobStartsOnTime(t *testing.T) {
	t.Parallel()
	eachStoreFakeTime(t, func(t *testing.T, st store.Store) {
		workers := sortie.NewWorkers()
		started := make(chan time.Time, 1)
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			started <- time.Now()
			return nil
		}), nil)
		// An hour's poll: only the timer for the next RunAt can start the job
		// within the test's 10 s.
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}, PollInterval: time.Hour})
		runAt := time.Now().Add(150 * time.Millisecond)
		id := mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{RunAt: runAt})
		if row := mustGet(t, c, id); row.State != sortie.JobStateScheduled {
			t.Fatalf("state %s right after enqueue, want scheduled", row.State)
		}
		select {
		case at := <-started:
			if at.Before(runAt) {
				t.Fatalf("job started %s before its RunAt", runAt.Sub(at))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("scheduled job did not start within 10s of its RunAt, with an hour's poll")
		}
	})
}

func TestClientPriorityOrder(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		workers := sortie.NewWorkers()
		var order []string
		done := make(chan struct{})
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			order = append(order, job.Args.Text)
			if len(order) == 4 {
				close(done)
			}
			return nil
		}), nil)
		c := newClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
		mustEnqueue(t, c, Msg{Text: "p3"}, &sortie.EnqueueOpts{Priority: 3})
		mustEnqueue(t, c, Msg{Text: "p2-first"}, nil)
		mustEnqueue(t, c, Msg{Text: "p1"}, &sortie.EnqueueOpts{Priority: 1})
		mustEnqueue(t, c, Msg{Text: "p2-second"}, nil)
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Stop(context.Background()) }()
		<-done
		want := "p1,p2-first,p2-second,p3"
		if got := strings.Join(order, ","); got != want {
			t.Fatalf("ran in order %s, want %s", got, want)
		}
	})
}

func TestClientUniqueDuplicate(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		c := newClient(t, st, &sortie.Config{})
		ctx := context.Background()
		first, err := c.Enqueue(ctx, Msg{}, &sortie.EnqueueOpts{UniqueKey: "k"})
		if err != nil || first.Duplicate {
			t.Fatalf("first enqueue = %+v, %v; want inserted", first, err)
		}
		second, err := c.Enqueue(ctx, Msg{}, &sortie.EnqueueOpts{UniqueKey: "k"})
		if err != nil || !second.Duplicate || second.ID != first.ID {
			t.Fatalf("second enqueue = %+v, %v; want Duplicate of job %d", second, err, first.ID)
		}
	})
}

func TestClientEnqueueManyAtomic(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		c := newClient(t, st, &sortie.Config{})
		ctx := context.Background()
		res, err := c.EnqueueMany(ctx, []sortie.EnqueueParams{{Args: Msg{Text: "a"}}, {Args: Msg{Text: "b"}, Opts: &sortie.EnqueueOpts{Queue: "other"}}})
		if err != nil || len(res) != 2 || res[1].ID <= res[0].ID {
			t.Fatalf("EnqueueMany = %+v, %v; want two results with increasing IDs", res, err)
		}
		// One invalid job rejects the whole batch before anything is stored.
		_, err = c.EnqueueMany(ctx, []sortie.EnqueueParams{{Args: Msg{Text: "c"}}, {Args: Msg{}, Opts: &sortie.EnqueueOpts{Priority: 9}}})
		if !errors.Is(err, sortie.ErrInvalidArgument) || !strings.Contains(err.Error(), "job 2 of 2") {
			t.Fatalf("EnqueueMany with a bad job = %v, want ErrInvalidArgument naming job 2 of 2", err)
		}
		page, err := c.JobList(ctx, nil)
		if err != nil || len(page.Jobs) != 2 {
			t.Fatalf("JobList after a rejected batch: %d jobs, %v; want only the first batch's 2", len(page.Jobs), err)
		}
	})
}

func TestClientMiddleware(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), nil)
		var trail []string
		mark := func(name string) sortie.WorkMiddleware {
			return func(next sortie.WorkHandler) sortie.WorkHandler {
				return func(ctx context.Context, job *sortie.JobRow) error {
					trail = append(trail, name+">")
					err := next(ctx, job)
					trail = append(trail, "<"+name)
					return err
				}
			}
		}
		tagging := func(next sortie.EnqueueFunc) sortie.EnqueueFunc {
			return func(ctx context.Context, jobs []*sortie.NewJob) ([]sortie.EnqueueResult, error) {
				for _, j := range jobs {
					j.Tags = append(j.Tags, "via-middleware")
				}
				return next(ctx, jobs)
			}
		}
		c := startClient(t, st, &sortie.Config{
			Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}},
			WorkMiddleware: []sortie.WorkMiddleware{mark("outer"), mark("inner")}, EnqueueMiddleware: []sortie.EnqueueMiddleware{tagging},
		})
		ev := record(t, c)
		id := mustEnqueue(t, c, Msg{}, nil)
		ev.finished(t, id, 1)
		if got, want := strings.Join(trail, " "), "outer> inner> <inner <outer"; got != want {
			t.Fatalf("middleware ran as %q, want %q", got, want)
		}
		if tags := mustGet(t, c, id).Tags; len(tags) != 1 || tags[0] != "via-middleware" {
			t.Fatalf("tags = %v, want the enqueue middleware's tag", tags)
		}
	})
}

func TestClientGracefulStopLetsJobsFinish(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		c, id, release := startHeldJob(t, st)
		stopped := make(chan error, 1)
		go func() { stopped <- c.Stop(context.Background()) }()
		close(release)
		if err := <-stopped; err != nil {
			t.Fatalf("Stop() = %v", err)
		}
		if row := mustGet(t, c, id); row.State != sortie.JobStateCompleted {
			t.Fatalf("state %s after graceful stop, want completed (outcome flushed before Stop returns)", row.State)
		}
	})
}

func TestClientStopDeadlineReleasesJobs(t *testing.T) {
	t.Parallel()
	eachStoreFakeTime(t, func(t *testing.T, st store.Store) {
		workers := sortie.NewWorkers()
		started := make(chan struct{}, 1)
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}), nil)
		c := newClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		id := mustEnqueue(t, c, Msg{}, nil)
		<-started
		// Stop cancels the handlers a fifth of the time left before the
		// deadline: 200 ms for this one to return and be put back.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("Stop() = %v", err)
		}
		row := mustGet(t, c, id)
		if row.State != sortie.JobStateAvailable || row.Attempt != 0 || len(row.Errors) != 0 {
			t.Fatalf("interrupted job: state %s attempt %d errors %d, want available, attempt not counted, no error", row.State, row.Attempt, len(row.Errors))
		}
	})
}

func TestClientRescuesJobOfDeadWorker(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), nil)
		enq := newClient(t, st, &sortie.Config{})
		id := mustEnqueue(t, enq, Msg{}, nil)
		// A "worker" claims the job with a short lease and dies.
		rows, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 1, Now: time.Now(), Lease: 10 * time.Millisecond, Worker: "dead"}))
		if err != nil || len(rows) != 1 {
			t.Fatalf("JobFetch = %d rows, %v", len(rows), err)
		}
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}},
			RescueInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond})
		ev := record(t, c)
		ev.finished(t, id, 1)
		row := mustGet(t, c, id)
		if row.State != sortie.JobStateCompleted || row.Attempt != 2 || len(row.Errors) != 1 || row.Errors[0].Message != store.LeaseLostMessage {
			t.Fatalf("rescued job: state %s attempt %d errors %+v, want completed on attempt 2 with the lost lease recorded", row.State, row.Attempt, row.Errors)
		}
	})
}

func TestClientLostLeaseCancelsHandler(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		workers := sortie.NewWorkers()
		started := make(chan int64, 1)
		cause := make(chan error, 1)
		var runs atomic.Int32
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			if runs.Add(1) > 1 {
				return nil // the rescued job's second run
			}
			started <- job.ID
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		}), nil)
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"other-queue": {MaxWorkers: 1}},
			Lease: time.Second, HeartbeatInterval: 20 * time.Millisecond})
		mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{Queue: "other-queue"})
		<-started
		// Another client's rescuer, with a clock far ahead, takes the job back.
		if _, err := st.JobRescue(context.Background(), &store.JobRescueParams{Now: time.Now().Add(time.Hour), Limit: 10}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-cause:
			if err == nil || !strings.Contains(err.Error(), "lease lost") {
				t.Fatalf("handler context cause = %v, want lease lost", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("handler was not cancelled after its lease was lost")
		}
	})
}

// stubbornHeartbeat is the heartbeat interval of stubbornJob's client.
const stubbornHeartbeat = 10 * time.Millisecond

// stubbornJob starts a client on a fake clock whose one job ignores its
// context until release is called (which happens at the end of the test
// too; later runs of the job return at once), with a one-second lease
// heartbeated every stubbornHeartbeat, and returns the job's ID, the
// client's log and its clock.
func stubbornJob(t *testing.T, st store.Store, queue string) (id int64, logs *syncBuffer, fc *clock.Fake, release func()) {
	t.Helper()
	logs = &syncBuffer{}
	fc = clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	workers := sortie.NewWorkers()
	started, released := make(chan int64, 1), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	t.Cleanup(release)
	var runs atomic.Int32
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		if runs.Add(1) > 1 {
			return nil
		}
		started <- job.ID
		<-released // ignores ctx
		return nil
	}), nil)
	c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{queue: {MaxWorkers: 1}}, Clock: fc,
		Lease: time.Second, HeartbeatInterval: stubbornHeartbeat, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{Queue: queue})
	return <-started, logs, fc, release
}

// stepTimer waits until a loop of the client on fc has armed its timer for
// every (a timer is due every from now), then moves fc to it, n times; it
// then waits until the timer is armed again, so the last round is over.
func stepTimer(t *testing.T, fc *clock.Fake, every time.Duration, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; ; i++ {
		d, err := fc.AwaitDeadline(ctx, func(d time.Time) bool { return d.Equal(fc.Now().Add(every)) })
		if err != nil {
			next, ok := fc.NextDeadline()
			t.Fatalf("round %d: no timer due %s from %s (next: %s, %v)", i, every, fc.Now(), next, ok)
		}
		if i == n {
			return
		}
		fc.Set(d)
	}
}

// A handler that ignores its cancelled context after losing its lease is
// reported once, not at every heartbeat, and its lost lease is not
// extended again.
func TestClientLostLeaseLoggedOnce(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		_, logs, fc, release := stubbornJob(t, st, "lost-queue")
		if _, err := st.JobRescue(context.Background(), &store.JobRescueParams{Now: fc.Now().Add(time.Hour), Limit: 10}); err != nil {
			t.Fatal(err)
		}
		stepTimer(t, fc, stubbornHeartbeat, 1)
		if !strings.Contains(logs.String(), "job lease lost") {
			t.Fatalf("no lease-lost line after the heartbeat that followed the rescue:\n%s", logs)
		}
		stepTimer(t, fc, stubbornHeartbeat, 20)
		release()
		if n := strings.Count(logs.String(), "job lease lost"); n != 1 {
			t.Fatalf("lease-lost lines after twenty more heartbeats = %d, want 1:\n%s", n, logs.String())
		}
	})
}

// A job asked to cancel, whose handler ignores it, and which then loses
// its lease is still reported as lost (once) and no longer extended.
func TestClientCancelRequestedThenLeaseLost(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		id, logs, fc, release := stubbornJob(t, st, "cl-queue")
		if _, err := st.JobCancel(context.Background(), &store.JobCancelParams{ID: id, Now: fc.Now()}); err != nil {
			t.Fatal(err)
		}
		stepTimer(t, fc, stubbornHeartbeat, 1)
		if !strings.Contains(logs.String(), "job cancel requested") {
			t.Fatalf("no cancel-requested line after the heartbeat that followed the cancel:\n%s", logs)
		}
		if _, err := st.JobRescue(context.Background(), &store.JobRescueParams{Now: fc.Now().Add(time.Hour), Limit: 10}); err != nil {
			t.Fatal(err)
		}
		stepTimer(t, fc, stubbornHeartbeat, 1)
		if !strings.Contains(logs.String(), "job lease lost") {
			t.Fatalf("no lease-lost line after the heartbeat that followed the rescue:\n%s", logs)
		}
		stepTimer(t, fc, stubbornHeartbeat, 20)
		release()
		if n := strings.Count(logs.String(), "job lease lost"); n != 1 {
			t.Fatalf("lease-lost lines = %d, want 1:\n%s", n, logs.String())
		}
		if n := strings.Count(logs.String(), "job cancel requested"); n != 1 {
			t.Fatalf("cancel-requested lines = %d, want 1:\n%s", n, logs.String())
		}
	})
}

func TestClientLogsUnservedKindOnce(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		var logs syncBuffer
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), nil)
		fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		const rescue = 10 * time.Millisecond
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}},
			Clock: fc, RescueInterval: rescue, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		ev := record(t, c)
		mustEnqueue(t, c, Other{}, nil)
		mustEnqueue(t, c, Other{}, nil)
		ev.finished(t, mustEnqueue(t, c, Msg{}, nil), 1)
		// The kind is reported once the producer found its queue drained.
		for round := 0; !strings.Contains(logs.String(), "no worker for their kind"); round++ {
			if round == 100 {
				t.Fatalf("no log line about kind %q having no worker after %d maintenance rounds:\n%s", "other", round, logs.String())
			}
			stepTimer(t, fc, rescue, 1)
		}
		// Five more maintenance rounds pass: still one line.
		stepTimer(t, fc, rescue, 5)
		if n := strings.Count(logs.String(), "no worker for their kind"); n != 1 {
			t.Fatalf("logged the unserved kind %d times, want once:\n%s", n, logs.String())
		}
	})
}

func TestClientInspectAndAdmin(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		c := newClient(t, st, &sortie.Config{})
		var ids []int64
		for i := 0; i < 25; i++ {
			ids = append(ids, mustEnqueue(t, c, Msg{}, nil))
		}
		mustEnqueue(t, c, Other{}, &sortie.EnqueueOpts{Queue: "q2"})

		seen := 0
		p := &sortie.JobListParams{Kind: "msg", Limit: 10}
		for pages := 0; ; pages++ {
			page, err := c.JobList(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page.Jobs {
				if j.ID != ids[seen] {
					t.Fatalf("listing item %d is job %d, want %d", seen, j.ID, ids[seen])
				}
				seen++
			}
			if page.NextCursor == 0 {
				if pages != 2 {
					t.Fatalf("listed in %d pages, want 3", pages+1)
				}
				break
			}
			p.Cursor = page.NextCursor
		}
		if seen != 25 {
			t.Fatalf("paged through %d msg jobs, want 25", seen)
		}
		if _, err := c.JobList(ctx, &sortie.JobListParams{State: "bogus"}); !errors.Is(err, sortie.ErrInvalidArgument) {
			t.Fatalf("JobList with an unknown state = %v, want ErrInvalidArgument", err)
		}

		if _, err := c.JobCancel(ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.JobDelete(ctx, ids[1]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.JobGet(ctx, ids[1]); !errors.Is(err, sortie.ErrNotFound) {
			t.Fatalf("JobGet of a deleted job = %v, want ErrNotFound", err)
		}
		row, err := c.JobRetry(ctx, ids[0])
		if err != nil || row.State != sortie.JobStateAvailable {
			t.Fatalf("JobRetry of a cancelled job = %v, %v; want available", row, err)
		}
		counts, err := c.JobCounts(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, qc := range counts {
			got[qc.Queue+"/"+string(qc.State)] = qc.Count
		}
		if got["default/available"] != 24 || got["q2/available"] != 1 || len(got) != 2 {
			t.Fatalf("counts = %v, want default/available 24 and q2/available 1", got)
		}
	})
}
