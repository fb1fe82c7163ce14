package sortie_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/testkit/delayproxy"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/store/redisstore"
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

// lateClaimStore makes the first claim that finds jobs come back late: it
// calls late after the store claimed them and before they reach the runtime,
// as a claim held up behind a lock or a slow network would.
type lateClaimStore struct {
	store.Store
	once sync.Once
	late func()
}

func (s *lateClaimStore) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	res, err := s.Store.JobFetch(ctx, p)
	if err == nil && len(res.Jobs) > 0 {
		s.once.Do(s.late)
	}
	return res, err
}

// attemptsSeen registers a Msg handler that reports the attempt number of
// each start and holds the job until release is called.
func attemptsSeen() (workers *sortie.Workers, started <-chan int, release func()) {
	starts := make(chan int, 4)
	done := make(chan struct{})
	workers = sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		starts <- job.Attempt
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	}), nil)
	return workers, starts, sync.OnceFunc(func() { close(done) })
}

func waitAttempt(t *testing.T, started <-chan int) int {
	t.Helper()
	select {
	case a := <-started:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("no job started within 5s")
		return 0
	}
}

// runLateClaim starts a client on a memstore whose first claim comes back
// late, after late ran with the fake clock and the memstore; enqueues one
// job and returns the attempt number it first started with. The job holds
// its worker until the test ends.
func runLateClaim(t *testing.T, late func(fc *clock.Fake, inner store.Store)) (inner store.Store, id int64, attempt int) {
	t.Helper()
	fc := clock.NewFake(lateClaimStart)
	mem := memstore.New()
	t.Cleanup(func() { _ = mem.Close() })
	st := &lateClaimStore{Store: mem, late: func() { late(fc, mem) }}
	workers, started, release := attemptsSeen()
	c := startClient(t, st, &sortie.Config{Workers: workers, Clock: fc, Lease: 30 * time.Second, RescueInterval: 24 * time.Hour,
		Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
	t.Cleanup(release) // before Stop, which waits for the handler
	id = mustEnqueue(t, c, Msg{Text: "late"}, nil)
	return mem, id, waitAttempt(t, started)
}

var lateClaimStart = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// A claim that comes back 20s after the clock reading its lease counts from
// would leave 10s of a 30s lease, no more than the heartbeat interval: the
// runtime extends the lease before the handler starts.
func TestLateClaimRenewsItsLeaseAtOnce(t *testing.T) {
	t.Parallel()
	inner, id, attempt := runLateClaim(t, func(fc *clock.Fake, _ store.Store) { fc.Advance(20 * time.Second) })
	if attempt != 1 {
		t.Fatalf("the job started as attempt %d, want 1", attempt)
	}
	row, err := inner.JobGet(context.Background(), &store.JobGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if want := lateClaimStart.Add(50 * time.Second); !row.LeaseUntil.Equal(want) {
		t.Errorf("lease of the late claim ends at %v, want %v (renewed when the claim came back)", row.LeaseUntil, want)
	}
}

// A claim that comes back after its lease ended and another worker rescued
// the job must not run: the job runs once more under a claim of its own.
func TestLateClaimWithLostLeaseDoesNotRun(t *testing.T) {
	t.Parallel()
	_, _, attempt := runLateClaim(t, func(fc *clock.Fake, inner store.Store) {
		fc.Advance(40 * time.Second)
		// Another process's maintenance finds the lease over.
		if n, err := inner.JobRescue(context.Background(), &store.JobRescueParams{Now: fc.Now(), Limit: 10}); n != 1 || err != nil {
			t.Errorf("JobRescue() = %d, %v; want 1 job rescued", n, err)
		}
	})
	if attempt != 2 {
		t.Fatalf("the job started as attempt %d, want 2 (attempt 1's lease was lost before it started)", attempt)
	}
}

// An outcome whose reply the network lost, after Redis applied it, is
// sent again under the same claim token: the store answers with the
// recorded result, so the client reports it applied: one finished event,
// no "discarded" line, the job completed once. A proxy between the
// client and Redis drops the completion's reply and its connection.
func TestOutcomeWhoseReplyWasLostIsReportedApplied(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(redistest.StoreURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := delayproxy.Start(u.Host, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	ctx := context.Background()
	st, err := redisstore.Open(ctx, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	logs := &syncBuffer{}
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), nil)
	c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ev := record(t, c)
	// The completion's reply: sortie_finish answers the state it left.
	lost := proxy.LoseReply([]byte("$9\r\ncompleted\r\n"))
	id := mustEnqueue(t, c, Msg{Text: "once"}, nil)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the completion's reply never went through the proxy")
	}
	if fin := ev.finished(t, id, 1); fin.Outcome != sortie.OutcomeCompleted {
		t.Fatalf("finished event outcome %q, want completed", fin.Outcome)
	}
	ev.mu.Lock()
	n := 0
	for _, e := range ev.all {
		if e.Kind == sortie.EventJobFinished && e.Job.ID == id {
			n++
		}
	}
	ev.mu.Unlock()
	if n != 1 {
		t.Errorf("%d finished events for job %d, want 1", n, id)
	}
	if strings.Contains(logs.String(), "discarded") {
		t.Errorf("a lost reply was logged as a discarded outcome:\n%s", logs.String())
	}
	row, err := c.JobGet(ctx, id)
	if err != nil || row.State != sortie.JobStateCompleted || row.Attempt != 1 {
		t.Fatalf("job after the lost reply: %+v, %v; want completed at attempt 1", row, err)
	}
}

func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		started := make(chan struct{}, 1)
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			if err := sortie.SetProgress(ctx, 50); err != nil {
				return err
			}
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}), nil)
		c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}},
			Lease: time.Second, HeartbeatInterval: 20 * time.Millisecond})
		id := mustEnqueue(t, c, Msg{}, nil)
		<-started
		if row := mustGet(t, c, id); row.Progress != 50 {
			t.Fatalf("progress %v while running, want 50", row.Progress)
		}
		row, err := c.JobCancel(ctx, id)
		if err != nil || row.State != sortie.JobStateRunning || !row.CancelRequested {
			t.Fatalf("JobCancel of a running job = %+v, %v; want still running with CancelRequested", row, err)
		}
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		row, err = c.Wait(waitCtx, id)
		if err != nil || row.State != sortie.JobStateCancelled || row.Attempt != 1 {
			t.Fatalf("cancelled running job = %+v, %v; want cancelled after its one attempt", row, err)
		}
		if len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Message, "cancelled on request") {
			t.Fatalf("errors %+v, want one saying it was cancelled on request", row.Errors)
		}
	})
}
