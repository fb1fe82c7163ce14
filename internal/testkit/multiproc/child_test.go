package multiproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
	"github.com/sortiehq/sortie/store"
)

// The environment of a worker process.
const (
	// envStore is the store URL, for openStore.
	envStore = "SORTIE_MULTIPROC_STORE"
	// envQueues lists the queues the process works with their MaxWorkers,
	// comma-separated: "work:4,other:2".
	envQueues = "SORTIE_MULTIPROC_QUEUES"
	// envPoll, when set, is the process's Config.PollInterval, a duration
	// ("1h"; "0" for the library's default) instead of childPoll.
	envPoll = "SORTIE_MULTIPROC_POLL"
	// envIdle, when set, names a file where the process records each fetch
	// that came back with fewer jobs than it asked for (see idleRecorder);
	// the process then works until SIGTERM instead of stopping once its
	// queues are empty.
	envIdle = "SORTIE_MULTIPROC_IDLE"
	// envRun, when set, makes the process work with Client.Run, this
	// value its drain timeout ("10s"), until its signals, instead of
	// stopping once its queues are empty.
	envRun = "SORTIE_MULTIPROC_RUN"
	// envHold, when set, makes the process's Stepped handler stop after
	// its second step and wait until its context ends (or the process is
	// killed).
	envHold = "SORTIE_MULTIPROC_HOLD"
)

// The worker processes' timing: short leases so that a killed process's
// jobs are rescued within a few seconds.
const (
	// childLease is long enough for a live process to keep its leases while
	// its writes wait for SQLite's one write lock, which the other
	// processes hold most of the time: with two more processes spinning on
	// both cores, waits of up to 0.9 s were seen under -race. (While the
	// store left the waiting to SQLite's busy handler, which sleeps up to
	// 100 ms between tries, they reached 8 s there, and over 10 s once in
	// CI.) It matches the store's busy timeout (store.go), the longest a
	// write waits before it fails.
	childLease     = 10 * time.Second
	childHeartbeat = 500 * time.Millisecond
	childRescue    = 200 * time.Millisecond
	// childPoll is how often a worker looks for jobs without a wake-up
	// (both stores wake workers across processes; TestWakeAcrossProcesses
	// checks it with an hour).
	childPoll = 50 * time.Millisecond
	// childLifetime bounds a worker process that nobody stops, so a test
	// that dies leaves no process behind for long.
	childLifetime = 3 * time.Minute
)

// Sleep is the one kind of job of these tests: its handler records its start
// in the journal, sleeps For (or until its context ends), and records its end.
type Sleep struct {
	For time.Duration `json:"for"`
}

func (Sleep) Kind() string { return "sleep" }

// runChild is the main function of a worker process (roleWorker), named
// childproc.Name() ("kill-p0"), which is also its client ID, so the store's
// AttemptedBy names it. It works the queues in envQueues until SIGTERM or
// until they have no pending job left, then stops gracefully. It returns
// the exit code.
func runChild() int {
	name := childproc.Name()
	level := slog.LevelWarn
	if os.Getenv(envRun) != "" {
		level = slog.LevelInfo // Run's drain is logged at Info when no job is held yet
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("process", name)
	if err := child(name, logger); err != nil {
		logger.Error("worker process failed", "err", err)
		return 1
	}
	return 0
}

func child(name string, logger *slog.Logger) error {
	ctx := context.Background()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	// The handler stays until the process exits: a SIGTERM that comes
	// after the process stopped by itself must not kill it.

	st, closeStore, err := openStore(ctx, os.Getenv(envStore))
	if err != nil {
		return err
	}
	defer func() { _ = closeStore() }()
	j, err := childproc.OpenJournal()
	if err != nil {
		return err
	}
	defer func() { _ = j.Close() }()

	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Sleep]) error {
		if err := j.Start(job.JobRow); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		t := time.NewTimer(job.Args.For)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		if err := j.End(job.JobRow, ctx.Err() != nil); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		return context.Cause(ctx)
	}), nil)
	addStepped(workers, childproc.JournalPath()+".steps", os.Getenv(envHold) != "")
	var queues []string
	qc := make(map[string]sortie.QueueConfig)
	for _, f := range strings.Split(os.Getenv(envQueues), ",") {
		q, n, _ := strings.Cut(f, ":")
		mw, err := strconv.Atoi(n)
		if err != nil {
			return fmt.Errorf("%s=%q: %w", envQueues, os.Getenv(envQueues), err)
		}
		queues = append(queues, q)
		qc[q] = sortie.QueueConfig{MaxWorkers: mw}
	}
	st = stallLogger{Store: st, logger: logger}
	if fw, ok := st.(stallLogger).Store.(store.FetchWaiter); ok {
		st = waitingStore{st, fw}
	}
	poll := childPoll
	if v := os.Getenv(envPoll); v != "" {
		if poll, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("%s=%q: %w", envPoll, v, err)
		}
	}
	idle := os.Getenv(envIdle)
	if idle != "" {
		rec, err := newIdleRecorder(st, idle)
		if err != nil {
			return err
		}
		defer func() { _ = rec.f.Close() }()
		st = rec
		if fw, ok := rec.Store.(store.FetchWaiter); ok {
			st = waitingStore{rec, recordedWaits{rec, fw}}
		}
	}
	client, err := sortie.NewClient(st, &sortie.Config{
		ID:                name,
		Queues:            qc,
		Workers:           workers,
		Logger:            logger,
		Lease:             childLease,
		HeartbeatInterval: childHeartbeat,
		RescueInterval:    childRescue,
		PollInterval:      poll,
	})
	if err != nil {
		return err
	}
	if drain := os.Getenv(envRun); drain != "" {
		d, err := time.ParseDuration(drain)
		if err != nil {
			return fmt.Errorf("%s=%q: %w", envRun, drain, err)
		}
		// A process nobody stops drains after childLifetime.
		ctx, cancel := context.WithTimeout(ctx, childLifetime)
		defer cancel()
		return client.Run(ctx, &sortie.RunOpts{DrainTimeout: d})
	}
	if err := client.Start(ctx); err != nil {
		return err
	}

	why := waitChildDone(ctx, st, queues, term, idle == "")
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop after %s: %w", why, err)
	}
	if why == "lifetime" {
		return errors.New("nobody stopped this worker process within " + childLifetime.String())
	}
	return nil
}

// waitChildDone returns when the worker process should stop, saying why:
// "SIGTERM", "done" (no pending job left in queues, if whenEmpty) or
// "lifetime".
func waitChildDone(ctx context.Context, st store.Store, queues []string, term <-chan os.Signal, whenEmpty bool) string {
	lifetime := time.NewTimer(childLifetime)
	defer lifetime.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-term:
			return "SIGTERM"
		case <-lifetime.C:
			return "lifetime"
		case <-tick.C:
		}
		if !whenEmpty {
			continue
		}
		if pending, err := pendingJobs(ctx, st, queues...); err == nil && pending == 0 {
			return "done"
		}
	}
}

// pendingJobs returns the number of jobs of queues that are not finished.
func pendingJobs(ctx context.Context, st store.Store, queues ...string) (int64, error) {
	var n int64
	for _, q := range queues {
		counts, err := st.JobCounts(ctx, &store.JobCountsParams{Queue: q})
		if err != nil {
			return 0, err
		}
		for _, c := range counts {
			if !c.State.Finished() {
				n += c.Count
			}
		}
	}
	return n, nil
}

// stallLogger logs the store calls on which a worker's leases depend when
// they take longer than a quarter of the lease: writers of other processes
// holding the database can delay them, and a lease that expires while its
// process lives lets its job run twice. The log explains such a failure.
type stallLogger struct {
	store.Store
	logger *slog.Logger
}

func (s stallLogger) note(call string, now time.Time) {
	if d := time.Since(now); d > childLease/4 {
		s.logger.Warn("slow store call", "call", call, "since_now", d)
	}
}

func (s stallLogger) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	defer s.note("JobFetch", p.Now)
	return s.Store.JobFetch(ctx, p)
}

func (s stallLogger) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	defer s.note("JobFinish", p.Now)
	return s.Store.JobFinish(ctx, p)
}

func (s stallLogger) LeaseExtend(ctx context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error) {
	defer s.note("LeaseExtend", p.Now)
	return s.Store.LeaseExtend(ctx, p)
}

// idleRecorder appends a line to a file for each fetch that came back with
// fewer jobs than it asked for, after which the worker waits for a wake-up:
//
//	idle <queue> <fetch's clock reading>
//
// The reading (Unix nanoseconds of the wall clock) is taken before the
// fetch's transaction, so a line with a reading after a commit of another
// process comes from a fetch that saw that commit.
type idleRecorder struct {
	store.Store
	mu sync.Mutex // guards f: one line, one write
	f  *os.File
}

func newIdleRecorder(st store.Store, path string) (*idleRecorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &idleRecorder{Store: st, f: f}, nil
}

func (s *idleRecorder) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	res, err := s.Store.JobFetch(ctx, p)
	if err == nil && len(res.Jobs) < p.Limit {
		s.mu.Lock()
		_, err = fmt.Fprintf(s.f, "idle %s %d\n", p.Queue, p.Now.UnixNano())
		s.mu.Unlock()
	}
	return res, err
}

// waitingStore is a wrapped store whose workers wait in the store, as
// they would unwrapped (store.FetchWaiter): a wrapper of a store that can
// wait must be able to as well.
type waitingStore struct {
	store.Store
	fw store.FetchWaiter
}

func (s waitingStore) JobFetchWait(ctx context.Context, p *store.JobFetchParams, wait time.Duration) (*store.JobFetchResult, error) {
	return s.fw.JobFetchWait(ctx, p, wait)
}

// recordedWaits writes an idle line (see idleRecorder) as each waiting
// fetch begins, which is when the worker starts to wait: from its claim
// on, any commit ends the wait.
type recordedWaits struct {
	rec *idleRecorder
	fw  store.FetchWaiter
}

func (w recordedWaits) JobFetchWait(ctx context.Context, p *store.JobFetchParams, wait time.Duration) (*store.JobFetchResult, error) {
	w.rec.mu.Lock()
	_, err := fmt.Fprintf(w.rec.f, "idle %s %d\n", p.Queue, p.Now.UnixNano())
	w.rec.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return w.fw.JobFetchWait(ctx, p, wait)
}

// Stepped is the job of the steps test: its handler runs three durable
// steps, each of which appends a line to the process's steps file when its
// function runs.
type Stepped struct{}

func (Stepped) Kind() string { return "stepped" }

// addStepped registers the Stepped worker. Its steps append "<job> <step>
// <attempt> <process>" lines to path, one write each; with hold, the
// handler waits after the second step until its context ends.
func addStepped(workers *sortie.Workers, path string, hold bool) {
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Stepped]) error {
		for i := 1; i <= 3; i++ {
			name := fmt.Sprintf("step-%d", i)
			_, err := sortie.Step(ctx, name, func(context.Context) (int, error) {
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
				if err != nil {
					return 0, err
				}
				defer f.Close()
				_, err = fmt.Fprintf(f, "%d %s %d %s\n", job.ID, name, job.Attempt, childproc.Name())
				return i, err
			})
			if err != nil {
				return err
			}
			if i == 2 && hold {
				<-ctx.Done()
				return context.Cause(ctx)
			}
		}
		return nil
	}), nil)
}
