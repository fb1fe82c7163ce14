package sortie_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// slowFetchStore holds chosen fetches before they reach the store, as a slow
// round trip would, and records how many fetches were out at once and how
// many slots they asked for together.
type slowFetchStore struct {
	store.Store
	// noWatch makes QueueWatch unsupported, so workers learn of new jobs
	// only by fetching.
	noWatch bool
	// delay is added to every fetch, as a network's round trip would.
	delay time.Duration

	mu   sync.Mutex
	hold chan struct{} // the next fetch waits on it, when not nil
	held chan struct{} // closed when a fetch starts waiting on hold
	// holdAnswer makes the held fetch wait after the store answered it,
	// not before it asks.
	holdAnswer bool
	inFlight   int
	asked      int // slots asked for by the fetches in flight
	maxFlight  int
	maxAsked   int
	fetchCalls int
	// changed is closed and replaced whenever a fetch starts or returns.
	changed chan struct{}
}

// newSlowFetchStore wraps a memstore closed when t ends.
func newSlowFetchStore(t *testing.T) *slowFetchStore {
	inner := memstore.New()
	t.Cleanup(func() { _ = inner.Close() })
	return watchFetches(inner)
}

// watchFetches wraps st, holding no fetch until told.
func watchFetches(st store.Store) *slowFetchStore {
	return &slowFetchStore{Store: st, changed: make(chan struct{})}
}

// changedLocked wakes the tests waiting in waitCounts.
func (s *slowFetchStore) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitCounts waits until ok accepts the fetches made and the fetches out
// now, failing the test after 10 seconds.
func (s *slowFetchStore) waitCounts(t *testing.T, what string, ok func(calls, inFlight int) bool) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		calls, inFlight, changed := s.fetchCalls, s.inFlight, s.changed
		s.mu.Unlock()
		if ok(calls, inFlight) {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s: %d fetches made, %d out", what, calls, inFlight)
		}
	}
}

// holdNext makes the next fetch wait until the returned function is called,
// and returns a channel closed once that fetch is waiting.
func (s *slowFetchStore) holdNext() (held <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold, s.held, s.holdAnswer = make(chan struct{}), make(chan struct{}), false
	hold := s.hold
	return s.held, sync.OnceFunc(func() { close(hold) })
}

// holdNextAnswer is holdNext for a fetch that the store has answered: its
// answer waits, as on a slow network back.
func (s *slowFetchStore) holdNextAnswer() (held <-chan struct{}, release func()) {
	held, release = s.holdNext()
	s.mu.Lock()
	s.holdAnswer = true
	s.mu.Unlock()
	return held, release
}

func (s *slowFetchStore) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	s.mu.Lock()
	s.fetchCalls++
	s.inFlight++
	s.asked += p.Limit
	s.maxFlight = max(s.maxFlight, s.inFlight)
	s.maxAsked = max(s.maxAsked, s.asked)
	hold, held, after := s.hold, s.held, s.holdAnswer
	s.hold, s.held = nil, nil
	s.changedLocked()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.asked -= p.Limit
		s.changedLocked()
		s.mu.Unlock()
	}()
	if hold != nil && !after {
		close(held)
		<-hold
	}
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	rows, err := s.Store.JobFetch(ctx, p)
	if hold != nil && after {
		close(held)
		<-hold
	}
	return rows, err
}

func (s *slowFetchStore) QueueWatch(ctx context.Context, p *store.QueueWatchParams) (*store.Watch, error) {
	if s.noWatch {
		return nil, store.ErrUnsupported
	}
	return s.Store.QueueWatch(ctx, p)
}

func (s *slowFetchStore) fetches() int {
	calls, _ := s.counts()
	return calls
}

// counts returns how many fetches were made and how many are out now.
func (s *slowFetchStore) counts() (calls, inFlight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetchCalls, s.inFlight
}

func (s *slowFetchStore) peaks() (flight, asked int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxFlight, s.maxAsked
}

// gatedWorkers registers a Msg handler that reports each start on started
// and returns once the job's text is released.
type gatedWorkers struct {
	started chan string
	mu      sync.Mutex
	gates   map[string]chan struct{}
}

func newGatedWorkers() (*sortie.Workers, *gatedWorkers) {
	g := &gatedWorkers{started: make(chan string, 16), gates: map[string]chan struct{}{}}
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		gate := g.gate(job.Args.Text)
		g.started <- job.Args.Text
		<-gate
		return nil
	}), nil)
	return workers, g
}

func (g *gatedWorkers) gate(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates[name] == nil {
		g.gates[name] = make(chan struct{})
	}
	return g.gates[name]
}

func (g *gatedWorkers) release(name string) { close(g.gate(name)) }

// waitStarted waits for the named jobs to start, in any order.
func (g *gatedWorkers) waitStarted(t *testing.T, names ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	timeout := time.After(5 * time.Second)
	for len(want) > 0 {
		select {
		case n := <-g.started:
			if !want[n] {
				t.Fatalf("job %q started, want one of %v", n, want)
			}
			delete(want, n)
		case <-timeout:
			t.Fatalf("jobs %v did not start within 5s", want)
		}
	}
}

// A claim that is slow to come back must not leave idle the workers that
// freed up meanwhile: a second fetch takes their slots, and the two together
// never ask for more jobs than there are workers and jobs claimed ahead
// (at most as many again: TestClaimAhead).
func TestSlowFetchDoesNotIdleFreedWorkers(t *testing.T) {
	t.Parallel()
	st := newSlowFetchStore(t)
	workers, g := newGatedWorkers()
	c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 2}}})
	for _, name := range []string{"a", "b", "c", "d"} {
		mustEnqueue(t, c, Msg{Text: name}, nil)
	}
	g.waitStarted(t, "a", "b")

	// a's slot goes to a fetch that hangs in the store.
	held, release := st.holdNext()
	defer release()
	g.release("a")
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("no fetch after a worker freed up")
	}
	// b's slot must not wait for it.
	g.release("b")
	g.waitStarted(t, "c")

	release()
	g.waitStarted(t, "d")
	g.release("c")
	g.release("d")
	flight, asked := st.peaks()
	if flight != 2 {
		t.Errorf("at most %d fetches were in flight at once, want 2", flight)
	}
	if asked > 2*2 {
		t.Errorf("fetches in flight asked for %d jobs together, more than twice the 2 workers", asked)
	}
}

// Stop while a fetch is out: the job it claims is not started after the
// stop, nor left claimed with no worker until its lease runs out; it goes
// back to available at once, its attempt not counted.
func TestStopPutsBackJobsOfFetchInFlight(t *testing.T) {
	t.Parallel()
	st := newSlowFetchStore(t)
	workers, g := newGatedWorkers()
	held, release := st.holdNext()
	defer release()
	c := newClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 2}}})
	id := mustEnqueue(t, c, Msg{Text: "late"}, nil)
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the client did not fetch")
	}
	fetchStopped := sortie.FetchStopped(c)
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- c.Stop(ctx)
	}()
	<-fetchStopped
	release()
	if err := <-stopped; err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	select {
	case n := <-g.started:
		t.Errorf("job %q, claimed by the fetch in flight at Stop, started after it; want it put back unstarted", n)
	default:
	}
	if row := mustGet(t, c, id); row.State != sortie.JobStateAvailable || row.Attempt != 0 {
		t.Fatalf("job claimed by the fetch in flight at Stop: state %s attempt %d, want available on attempt 0", row.State, row.Attempt)
	}
}

// When one of two fetches comes back short but the other full, more jobs
// may wait: the producer fetches again rather than sleeping until its
// poll (here an hour away, with no store wake-ups).
func TestFullFetchAfterShortOneFetchesAgain(t *testing.T) {
	t.Parallel()
	st := newSlowFetchStore(t)
	st.noWatch = true
	workers, g := newGatedWorkers()
	c := newClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 2}}, PollInterval: time.Hour})
	for _, name := range []string{"a", "b"} {
		mustEnqueue(t, c, Msg{Text: name}, nil) // before Start: nothing would wake the workers
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	g.waitStarted(t, "a", "b")
	held, release := st.holdNext()
	defer release()
	g.release("a") // a's slot goes to a fetch held in the store
	<-held
	before := st.fetches()
	g.release("b") // b's slot goes to a second fetch: the queue is empty, it comes back short
	st.waitCounts(t, "the second fetch to come back", func(calls, inFlight int) bool { return calls > before && inFlight <= 1 })
	// Two jobs arrive without a wake-up; the held fetch takes one.
	for _, name := range []string{"c", "d"} {
		args, _ := json.Marshal(Msg{Text: name})
		if _, err := st.Store.JobEnqueueMany(context.Background(), &store.JobEnqueueManyParams{
			Jobs: []*store.NewJob{{Kind: "msg", Queue: "default", Args: args, Priority: 2, MaxAttempts: 25}}, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	release()
	g.waitStarted(t, "c", "d")
	g.release("c")
	g.release("d")
}

// A wake-up that comes while a fetch is out is not lost when that fetch
// comes back short: the job it announced starts without waiting for the
// poll (an hour here).
func TestWakeDuringShortFetchIsKept(t *testing.T) {
	t.Parallel()
	st := newSlowFetchStore(t)
	workers, g := newGatedWorkers()
	c := newClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}, PollInterval: time.Hour})
	held, release := st.holdNextAnswer()
	defer release()
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	<-held // the first fetch found nothing; its answer is on its way
	mustEnqueue(t, c, Msg{Text: "woken"}, nil)
	release()
	g.waitStarted(t, "woken")
	g.release("woken")
}

// Short jobs behind slow claims: the producer claims ahead of its workers,
// so they do not wait a round trip for each job, but never more than twice
// its workers; a queue with a limit is claimed for free workers only. Every
// job runs once either way.
func TestClaimAhead(t *testing.T) {
	t.Parallel()
	for _, limited := range []bool{false, true} {
		t.Run(fmt.Sprintf("limited=%v", limited), func(t *testing.T) {
			t.Parallel()
			st := newSlowFetchStore(t)
			st.delay = 2 * time.Millisecond
			const jobs, maxWorkers = 600, 4
			var ran atomic.Int64
			var seen sync.Map
			all := make(chan struct{})
			workers := sortie.NewWorkers()
			sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
				if _, again := seen.LoadOrStore(job.ID, true); again {
					t.Errorf("job %d ran twice", job.ID)
				}
				if ran.Add(1) == jobs {
					close(all)
				}
				return nil
			}), nil)
			qc := sortie.QueueConfig{MaxWorkers: maxWorkers}
			if limited {
				qc.Settings = &sortie.QueueSettings{MaxRunning: 100}
			}
			c := newClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": qc}})
			batch := make([]sortie.EnqueueParams, jobs)
			for i := range batch {
				batch[i] = sortie.EnqueueParams{Args: Msg{Text: strconv.Itoa(i)}}
			}
			if _, err := c.EnqueueMany(t.Context(), batch); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = c.Stop(ctx)
			}()
			select {
			case <-all:
			case <-time.After(20 * time.Second):
				t.Fatalf("%d of %d jobs ran", ran.Load(), jobs)
			}
			_, asked := st.peaks()
			switch {
			case asked > 2*maxWorkers:
				t.Errorf("fetches asked for %d jobs at once, more than twice the %d workers", asked, maxWorkers)
			case !limited && asked <= maxWorkers:
				t.Errorf("fetches asked for at most %d jobs at once: nothing claimed ahead of %d workers", asked, maxWorkers)
			case limited && asked > maxWorkers:
				t.Errorf("fetches asked for %d jobs at once from a limited queue, more than the %d workers", asked, maxWorkers)
			}
		})
	}
}

// A queue that keeps up has one fetch out at a time: with the last fetch
// short, a worker freed while the next is out sends no second one. A job
// enqueued meanwhile is not lost to that: the fetch out comes back, and
// the producer fetches again for the wake-up, without waiting for the poll
// (an hour here).
func TestKeepingUpFetchesOneAtATime(t *testing.T) {
	t.Parallel()
	st := newSlowFetchStore(t)
	workers, g := newGatedWorkers()
	c := startClient(t, st, &sortie.Config{Workers: workers, PollInterval: time.Hour,
		Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 2}}})
	mustEnqueue(t, c, Msg{Text: "a"}, nil)
	g.waitStarted(t, "a") // claimed by a fetch for two: short

	held, release := st.holdNextAnswer()
	defer release()
	mustEnqueue(t, c, Msg{Text: "b"}, nil)
	<-held // the fetch for the free slot has b; its answer waits
	finished := make(chan struct{}, 4)
	unsubscribe := c.Subscribe(func(e *sortie.Event) {
		if e.Kind == sortie.EventJobFinished {
			finished <- struct{}{}
		}
	})
	defer unsubscribe()
	g.release("a")
	<-finished // a's worker is free while the fetch for b is out
	mustEnqueue(t, c, Msg{Text: "c"}, nil)
	release()
	g.waitStarted(t, "b", "c")
	g.release("b")
	g.release("c")
	if flight, _ := st.peaks(); flight != 1 {
		t.Errorf("%d fetches were in flight at once, want 1 while the queue keeps up", flight)
	}
}

// countingWaits counts a waitingStore's waiting fetches, and signals each
// one that starts to wait.
type countingWaits struct {
	waitingStore
	waits   atomic.Int32
	waiting chan struct{}
}

func (c *countingWaits) JobFetchWait(ctx context.Context, p *store.JobFetchParams, wait time.Duration) (*store.JobFetchResult, error) {
	c.waits.Add(1)
	select {
	case c.waiting <- struct{}{}:
	default:
	}
	return c.waitingStore.JobFetchWait(ctx, p, wait)
}

// Workers of one queue on a store that can wait spend their idle time in
// a waiting fetch: a job enqueued then starts without a poll, and Stop
// ends the wait at once instead of waiting it out.
func TestIdleWorkersWaitInTheirFetch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inner := memstore.New()
		t.Cleanup(func() { _ = inner.Close() })
		st := &countingWaits{waitingStore: waitingStore{inner}, waiting: make(chan struct{}, 1)}
		workers := sortie.NewWorkers()
		ran := make(chan int64, 1)
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
			ran <- job.ID
			return nil
		}), nil)
		const poll = time.Hour
		c := newClient(t, st, &sortie.Config{Workers: workers, PollInterval: poll,
			Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 2}}})
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-st.waiting
		synctest.Wait()
		begin := time.Now()
		id := mustEnqueue(t, c, Msg{}, nil)
		if got := <-ran; got != id {
			t.Fatalf("ran job %d, want %d", got, id)
		}
		if took := time.Since(begin); took >= poll {
			t.Errorf("the job started after %v, a poll interval: the wait did not end at the enqueue", took)
		}
		<-st.waiting
		synctest.Wait()
		begin = time.Now()
		if err := c.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took >= poll {
			t.Errorf("Stop took %v: it waited out the waiting fetch", took)
		}
		if n := st.waits.Load(); n < 2 {
			t.Errorf("%d waiting fetches, want one before the job and one after", n)
		}
	})
}
