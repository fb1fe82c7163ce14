package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// jobArgs are the args of every benchmark job.
type jobArgs struct {
	// Seq numbers the job within its run, from 0.
	Seq int64 `json:"s"`
	// At is when its enqueue began, a reading of the run's Recorder.Now
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
	// rec is what the handler observed; jobArgs.At is a reading of rec.Now.
	rec     *Recorder
	started bool

	// problems found before the final check (main goroutine only).
	problems []string
	res      Result
}

func newRun(st store.Store, w Workload, o Options) (*run, error) {
	r := &run{
		st:    st,
		w:     w,
		o:     o,
		n:     o.Jobs,
		queue: randomQueue(),
		rec:   NewRecorder(o.Jobs, w == Latency),
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
	if r.rec.Record(job.Args.Seq, job.Args.At) && r.w == Interval {
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
	return Check(r.rec.Tally(counts, problems))
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
	allRan := r.rec.AllRan()
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
				if ran := r.rec.Ran(); ran != lastRan {
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
		if p := r.rec.Ran() + done; p != lastProgress {
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
		r.o.StallTimeout, r.rec.Ran(), r.n, done)
	return r.check(ctx, append(r.problems, problem))
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
	took, lat, err := EnqueueEach(ctx, r.n, r.o.Producers, func(ctx context.Context, seq int64) error {
		return r.enqueue(ctx, e, jobArgs{Seq: seq})
	})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	r.setThroughput(took)
	r.res.SetPercentiles(lat, LatencyEnqueueCall)
	r.res.Producers = r.o.Producers
	return r.checkEnqueued(ctx, e, true)
}

// enqueueBatch: Producers goroutines enqueue BatchSize jobs per call.
func (r *run) enqueueBatch(ctx context.Context) error {
	e := &enqueued{ids: make([]int64, r.n)}
	took, lat, err := EnqueueBatches(ctx, r.n, r.o.BatchSize, r.o.Producers, func(ctx context.Context, lo, hi int64) error {
		return r.enqueueRange(ctx, e, lo, hi)
	})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	r.setThroughput(took)
	r.res.SetPercentiles(lat, LatencyEnqueueCall)
	r.res.Producers, r.res.BatchSize = r.o.Producers, r.o.BatchSize
	return r.checkEnqueued(ctx, e, true)
}

// enqueue enqueues the job of a with one Enqueue call.
func (r *run) enqueue(ctx context.Context, e *enqueued, a jobArgs) error {
	res, err := r.client.Enqueue(ctx, a, nil)
	if err != nil {
		return err
	}
	e.record(a.Seq, res)
	return nil
}

// enqueueRange enqueues jobs lo to hi-1 with one EnqueueMany call.
func (r *run) enqueueRange(ctx context.Context, e *enqueued, lo, hi int64) error {
	params := make([]sortie.EnqueueParams, hi-lo)
	for i := range params {
		params[i].Args = jobArgs{Seq: lo + int64(i)}
	}
	res, err := r.client.EnqueueMany(ctx, params)
	if err != nil {
		return err
	}
	for i, rr := range res {
		e.record(lo+int64(i), rr)
	}
	return nil
}

// preload enqueues the run's jobs, untimed, and checks that the store
// holds them all, available.
func (r *run) preload(ctx context.Context) (*enqueued, error) {
	e := &enqueued{ids: make([]int64, r.n)}
	if err := Preload(ctx, r.n, func(ctx context.Context, lo, hi int64) error {
		return r.enqueueRange(ctx, e, lo, hi)
	}); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return e, r.checkEnqueued(ctx, e, true)
}

// drain: preload the jobs, then time a client working them all.
func (r *run) drain(ctx context.Context) error {
	if _, err := r.preload(ctx); err != nil {
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
	took, err := EnqueueOpenLoop(ctx, r.n, r.o.Rate, func(ctx context.Context, seq int64) error {
		return r.enqueue(ctx, e, jobArgs{Seq: seq, At: r.rec.Now()})
	})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := r.checkEnqueued(ctx, e, false); err != nil {
		return err
	}
	if _, err := r.waitFinished(ctx); err != nil {
		return err
	}
	r.setThroughput(took)
	r.res.SetPercentiles(r.rec.Latencies(), LatencyEnqueueStart)
	r.res.Workers, r.res.Rate = r.o.Workers, r.o.Rate
	return nil
}
