package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// jobArgs are the args of every benchmark job.
type jobArgs struct {
	// Seq numbers the job within its run, from 0.
	Seq int64 `json:"s"`
	// At is when its enqueue began, in nanoseconds since the run's t0
	// (latency only).
	At int64 `json:"t,omitempty"`
}

// Kind names the benchmark's job kind.
func (jobArgs) Kind() string { return "sortie_bench" }

// stopTimeout bounds the client's Stop once every job finished.
const stopTimeout = 30 * time.Second

// run is one run of one workload: a client on its own queue, the per-job
// tallies its handler keeps, and the result being filled in.
type run struct {
	st     store.Store
	w      Workload
	o      Options
	n      int
	queue  string
	client *sortie.Client
	// t0 is the origin of jobArgs.At; time.Since(t0) reads the monotonic clock.
	t0      time.Time
	started bool

	// runs[seq] counts the handler calls of job seq.
	runs  []atomic.Int32
	stray atomic.Int64
	// ran counts handler calls of known jobs; allRan closes when it reaches n.
	ran    atomic.Int64
	allRan chan struct{}
	// startLat[seq] is job seq's enqueue → handler start, in nanoseconds
	// (latency only).
	startLat []atomic.Int64

	// problems found before the final check (main goroutine only).
	problems []string
	res      Result
}

func newRun(st store.Store, w Workload, o Options) (*run, error) {
	r := &run{
		st:     st,
		w:      w,
		o:      o,
		n:      o.Jobs,
		queue:  randomQueue(),
		t0:     time.Now(),
		runs:   make([]atomic.Int32, o.Jobs),
		allRan: make(chan struct{}),
	}
	if w == Latency {
		r.startLat = make([]atomic.Int64, o.Jobs)
	}
	workers := sortie.NewWorkers()
	if err := sortie.RegisterWorker(workers, sortie.WorkFunc(r.handle), &sortie.WorkerOpts{Queue: r.queue}); err != nil {
		return nil, err
	}
	c, err := sortie.NewClient(st, &sortie.Config{
		Queues:  map[string]sortie.QueueConfig{r.queue: {MaxWorkers: o.Workers}},
		Workers: workers,
		Logger:  o.Logger,
		ID:      processID(r.queue, 0),
	})
	if err != nil {
		return nil, err
	}
	r.client = c
	return r, nil
}

// handle is the benchmark's handler: it records that the job ran.
func (r *run) handle(_ context.Context, job *sortie.Job[jobArgs]) error {
	seq := job.Args.Seq
	if seq < 0 || seq >= int64(len(r.runs)) {
		r.stray.Add(1)
		return nil
	}
	if r.startLat != nil {
		r.startLat[seq].Store(int64(time.Since(r.t0)) - job.Args.At)
	}
	r.runs[seq].Add(1)
	if r.ran.Add(1) == int64(r.n) {
		close(r.allRan)
	}
	if r.w == Interval {
		holdJob(r.o.Period)
	}
	return nil
}

// run runs the workload's timed phase, then makes sure every job ran,
// stops the client and checks the tallies against the store.
func (r *run) run(ctx context.Context) (err error) {
	defer func() {
		if r.started {
			if serr := r.stop(ctx); serr != nil && err == nil {
				err = serr
			}
		}
	}()
	runtime.GC()
	switch r.w {
	case EnqueueSingle:
		err = r.enqueueSingle(ctx)
	case EnqueueBatch:
		err = r.enqueueBatch(ctx)
	case Drain:
		err = r.drain(ctx)
	case Latency:
		err = r.latency(ctx)
	case Interval:
		// Interval checks its own way: only the jobs that started.
		return r.interval(ctx)
	}
	if err != nil {
		return err
	}
	if !r.started {
		// The enqueue workloads run their jobs now, untimed, so that the
		// check covers each job from enqueue to completion.
		if err := r.start(ctx); err != nil {
			return err
		}
	}
	if _, err := r.waitFinished(ctx); err != nil {
		return err
	}
	if err := r.stop(ctx); err != nil {
		return err
	}
	return r.check(ctx, r.problems)
}

func (r *run) start(ctx context.Context) error {
	if err := r.client.Start(ctx); err != nil {
		return fmt.Errorf("bench: start client: %w", err)
	}
	r.started = true
	return nil
}

func (r *run) stop(ctx context.Context) error {
	r.started = false
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if err := r.client.Stop(ctx); err != nil {
		return fmt.Errorf("bench: stop client: %w", err)
	}
	return nil
}

// check runs Check on the tallies and the store's counts, with problems
// found so far.
func (r *run) check(ctx context.Context, problems []string) error {
	counts, err := r.counts(ctx)
	if err != nil {
		return err
	}
	t := Tally{Runs: make([]int32, r.n), Stray: r.stray.Load(), Counts: counts, Problems: problems}
	for i := range r.runs {
		t.Runs[i] = r.runs[i].Load()
	}
	return Check(t)
}

func (r *run) counts(ctx context.Context) ([]store.QueueStateCount, error) {
	counts, err := r.client.JobCounts(ctx, r.queue)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return counts, nil
}

// finished returns how many of the run's jobs the store counts finished
// (completed, cancelled or dead).
func (r *run) finished(ctx context.Context) (int64, error) {
	counts, err := r.counts(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range counts {
		switch c.State {
		case store.JobStateCompleted, store.JobStateCancelled, store.JobStateDead:
			n += c.Count
		}
	}
	return n, nil
}

// waitFinished waits until the store counts every job of the run finished
// and returns when it saw that. While handlers still run it does not read
// the store at all (it judges progress by the handlers), so the run is not
// slowed by the benchmark's own queries, as peerbench does for the peers;
// once every handler returned, it polls the store closely. A run where
// nothing happens for StallTimeout fails the check.
func (r *run) waitFinished(ctx context.Context) (time.Time, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	allRan := r.allRan
	closely := false
	lastRan, lastProgress, lastAt := int64(-1), int64(-1), time.Now()
	for {
		switch {
		case allRan != nil:
			select {
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			case <-allRan:
				allRan = nil
			case <-tick.C:
				now := time.Now()
				if ran := r.ran.Load(); ran != lastRan {
					lastRan, lastAt = ran, now
				} else if now.Sub(lastAt) > r.o.StallTimeout {
					return time.Time{}, r.stalled(ctx)
				}
				continue
			}
			lastAt = time.Now() // the store's progress is judged from here on
		case closely:
			if err := ctx.Err(); err != nil {
				return time.Time{}, err
			}
			time.Sleep(100 * time.Microsecond)
		default:
			closely = true
		}
		done, err := r.finished(ctx)
		if err != nil {
			return time.Time{}, err
		}
		now := time.Now()
		if done >= int64(r.n) {
			return now, nil
		}
		if p := r.ran.Load() + done; p != lastProgress {
			lastProgress, lastAt = p, now
		} else if now.Sub(lastAt) > r.o.StallTimeout {
			return time.Time{}, r.stalled(ctx)
		}
	}
}

// stalled reports a run where nothing happened for StallTimeout.
func (r *run) stalled(ctx context.Context) error {
	done, err := r.finished(ctx)
	if err != nil {
		return err
	}
	problem := fmt.Sprintf("no progress for %s: %d of %d jobs ran, the store counts %d finished",
		r.o.StallTimeout, r.ran.Load(), r.n, done)
	return r.check(ctx, append(r.problems, problem))
}

// firstError keeps the first error of several goroutines.
type firstError struct {
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func (f *firstError) set(err error) {
	f.once.Do(func() {
		f.err = err
		f.cancel()
	})
}

// enqueued records the results of the enqueues: ids[seq] is job seq's ID.
type enqueued struct {
	ids  []int64
	dups atomic.Int64
}

func (e *enqueued) record(seq int64, res sortie.EnqueueResult) {
	if res.Duplicate {
		e.dups.Add(1)
		return
	}
	e.ids[seq] = res.ID
}

// checkEnqueued notes problems with the enqueues: duplicates, missing or
// repeated IDs, and (before any job could run) a store that does not hold
// exactly the enqueued jobs, all available.
func (r *run) checkEnqueued(ctx context.Context, e *enqueued, countStore bool) error {
	if n := e.dups.Load(); n > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%d enqueues reported a duplicate (no job uses a unique key)", n))
	}
	ids := slices.Clone(e.ids)
	slices.Sort(ids)
	missing, repeated := 0, 0
	for i, id := range ids {
		switch {
		case id == 0:
			missing++
		case i > 0 && ids[i-1] == id:
			repeated++
		}
	}
	if missing > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%d enqueues returned no job ID", missing))
	}
	if repeated > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%d enqueues returned an ID another enqueue returned too", repeated))
	}
	if !countStore {
		return nil
	}
	counts, err := r.counts(ctx)
	if err != nil {
		return err
	}
	var available, other int64
	for _, c := range counts {
		if c.State == store.JobStateAvailable {
			available += c.Count
		} else {
			other += c.Count
		}
	}
	if available != int64(r.n) || other != 0 {
		r.problems = append(r.problems, fmt.Sprintf("after enqueueing %d jobs the store counts %d available and %d in other states", r.n, available, other))
	}
	return nil
}

func (r *run) setThroughput(took time.Duration) { r.res.SetThroughput(r.n, took) }

// enqueueSingle: Producers goroutines enqueue one job per call.
func (r *run) enqueueSingle(ctx context.Context) error {
	e := &enqueued{ids: make([]int64, r.n)}
	lat := make([]time.Duration, r.n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := &firstError{cancel: cancel}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range r.o.Producers {
		wg.Go(func() {
			for ctx.Err() == nil {
				seq := next.Add(1) - 1
				if seq >= int64(r.n) {
					return
				}
				t := time.Now()
				res, err := r.client.Enqueue(ctx, jobArgs{Seq: seq}, nil)
				lat[seq] = time.Since(t)
				if err != nil {
					fail.set(fmt.Errorf("bench: enqueue job %d: %w", seq, err))
					return
				}
				e.record(seq, res)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if fail.err != nil {
		return fail.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.setThroughput(took)
	r.res.SetPercentiles(lat, LatencyEnqueueCall)
	r.res.Producers = r.o.Producers
	return r.checkEnqueued(ctx, e, true)
}

// enqueueBatch: Producers goroutines enqueue BatchSize jobs per call.
func (r *run) enqueueBatch(ctx context.Context) error {
	e := &enqueued{ids: make([]int64, r.n)}
	size := r.o.BatchSize
	calls := (r.n + size - 1) / size
	lat := make([]time.Duration, calls)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := &firstError{cancel: cancel}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range r.o.Producers {
		wg.Go(func() {
			for ctx.Err() == nil {
				call := next.Add(1) - 1
				if call >= int64(calls) {
					return
				}
				lo := call * int64(size)
				hi := min(lo+int64(size), int64(r.n))
				t := time.Now()
				if err := r.enqueueRange(ctx, e, lo, hi); err != nil {
					fail.set(err)
					return
				}
				lat[call] = time.Since(t)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if fail.err != nil {
		return fail.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.setThroughput(took)
	r.res.SetPercentiles(lat, LatencyEnqueueCall)
	r.res.Producers, r.res.BatchSize = r.o.Producers, size
	return r.checkEnqueued(ctx, e, true)
}

// enqueueRange enqueues jobs lo to hi-1 with one EnqueueMany call.
func (r *run) enqueueRange(ctx context.Context, e *enqueued, lo, hi int64) error {
	params := make([]sortie.EnqueueParams, hi-lo)
	for i := range params {
		params[i].Args = jobArgs{Seq: lo + int64(i)}
	}
	res, err := r.client.EnqueueMany(ctx, params)
	if err != nil {
		return fmt.Errorf("bench: enqueue jobs %d to %d: %w", lo, hi-1, err)
	}
	for i, rr := range res {
		e.record(lo+int64(i), rr)
	}
	return nil
}

// drain: preload the jobs, then time a client working them all.
func (r *run) drain(ctx context.Context) error {
	e := &enqueued{ids: make([]int64, r.n)}
	for lo := int64(0); lo < int64(r.n); lo += DefaultBatchSize {
		if err := r.enqueueRange(ctx, e, lo, min(lo+DefaultBatchSize, int64(r.n))); err != nil {
			return err
		}
	}
	if err := r.checkEnqueued(ctx, e, true); err != nil {
		return err
	}
	runtime.GC()
	start := time.Now()
	if err := r.start(ctx); err != nil {
		return err
	}
	end, err := r.waitFinished(ctx)
	if err != nil {
		return err
	}
	r.setThroughput(end.Sub(start))
	r.res.Workers = r.o.Workers
	return nil
}

// latency: with the workers idle, enqueue open-loop at Rate for Duration
// and measure each job's enqueue → handler start.
func (r *run) latency(ctx context.Context) error {
	if err := r.start(ctx); err != nil {
		return err
	}
	e := &enqueued{ids: make([]int64, r.n)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := &firstError{cancel: cancel}
	interval := max(time.Duration(float64(time.Second)/r.o.Rate), time.Millisecond)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var wg sync.WaitGroup
	start := time.Now()
	// Open loop: job i is due at start + i/Rate whether or not earlier
	// enqueues returned, so a slow enqueue cannot hide behind a late send.
	for sent := 0; sent < r.n; {
		due := min(r.n, int(time.Since(start).Seconds()*r.o.Rate)+1)
		for ; sent < due; sent++ {
			seq := int64(sent)
			wg.Go(func() {
				at := time.Since(r.t0)
				res, err := r.client.Enqueue(ctx, jobArgs{Seq: seq, At: int64(at)}, nil)
				if err != nil {
					fail.set(fmt.Errorf("bench: enqueue job %d: %w", seq, err))
					return
				}
				e.record(seq, res)
			})
		}
		if sent == r.n {
			break
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	took := time.Since(start)
	if fail.err != nil {
		return fail.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.checkEnqueued(ctx, e, false); err != nil {
		return err
	}
	if _, err := r.waitFinished(ctx); err != nil {
		return err
	}
	lat := make([]time.Duration, r.n)
	for i := range r.startLat {
		lat[i] = time.Duration(r.startLat[i].Load())
	}
	r.setThroughput(took)
	r.res.SetPercentiles(lat, LatencyEnqueueStart)
	r.res.Workers, r.res.Rate = r.o.Workers, r.o.Rate
	return nil
}
