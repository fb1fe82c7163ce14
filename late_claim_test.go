package sortie_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

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
