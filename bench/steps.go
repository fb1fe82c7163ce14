package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// The steps workload measures durable steps in three parts, one after the
// other in each run (so that --repeat interleaves them):
//
//   - cost: StepCalls times, one StepRecord call (one step) and one
//     LeaseExtend call (one lease) on one running job, alternating which
//     goes first; the median time of each, and their ratio.
//   - drain: Jobs jobs of StepsPerJob steps each, against Jobs ×
//     StepsPerJob jobs of one step each, and as many plain jobs (one unit
//     of work each, done without a step), each set preloaded and drained
//     by Workers workers; the units of work per second of each, and the
//     ratios of the first to the others.
//   - fan-out: Rounds times, one parent spawns Children children, awaits
//     them, and resumes: the time from the last child's outcome to the
//     parent's handler starting again, counted from the commit of that
//     outcome (the return of the JobFinish call that recorded it) and from
//     the moment the runtime began recording it (its FinalizedAt: when a
//     hundred workers finish no-op children faster than the store records
//     them, their outcomes queue in the runtime first); and the time of
//     the Await that then returns the children's outcomes.
const (
	// StepsPerJob is the number of steps of a stepped job of the drain.
	StepsPerJob = 10
	// DefaultStepJobs is the steps workload's Jobs: stepped jobs of the
	// drain (and ten times as many plain jobs).
	DefaultStepJobs = 2000
	// DefaultChildren is the number of children each parent spawns.
	DefaultChildren = 10_000
	// DefaultRounds is the number of parents of the fan-out.
	DefaultRounds = 5
	// DefaultStepCalls is the number of calls of each kind the cost part
	// times.
	DefaultStepCalls = 2000
)

// StepsFigures are the figures of the steps workload (see above).
type StepsFigures struct {
	Calls       int     `json:"calls"`
	RecordMs    float64 `json:"record_ms"`
	HeartbeatMs float64 `json:"heartbeat_ms"`
	// RecordPerHeartbeat is RecordMs / HeartbeatMs.
	RecordPerHeartbeat float64 `json:"record_per_heartbeat"`

	StepsPerJob int `json:"steps_per_job"`
	// SteppedUnitsPerSec, OneStepUnitsPerSec and PlainUnitsPerSec are the
	// units of work per second of the drains of StepsPerJob-step jobs,
	// one-step jobs and plain jobs.
	SteppedUnitsPerSec float64 `json:"stepped_units_per_sec"`
	OneStepUnitsPerSec float64 `json:"one_step_units_per_sec"`
	PlainUnitsPerSec   float64 `json:"plain_units_per_sec"`
	// SteppedPerOneStep and SteppedPerPlain are SteppedUnitsPerSec over
	// the two others.
	SteppedPerOneStep float64 `json:"stepped_per_one_step"`
	SteppedPerPlain   float64 `json:"stepped_per_plain"`

	Children int `json:"children"`
	Rounds   int `json:"rounds"`
	// ResumeP50ms, ResumeP99ms and ResumeMaxMs are nearest-rank
	// percentiles, over the rounds, of the time from the commit of a
	// parent's last child's outcome to its handler starting again;
	// ResumeFinalizedP99ms the 99th percentile counted from the child's
	// FinalizedAt instead.
	ResumeP50ms          float64 `json:"resume_p50_ms"`
	ResumeP99ms          float64 `json:"resume_p99_ms"`
	ResumeMaxMs          float64 `json:"resume_max_ms"`
	ResumeFinalizedP99ms float64 `json:"resume_finalized_p99_ms"`
	// AwaitMs is the median time of the Await that returned the children.
	AwaitMs float64 `json:"await_ms"`
}

// runSteps runs the steps workload on st.
func runSteps(ctx context.Context, st store.Store, o Options) (Result, error) {
	f := &StepsFigures{Calls: o.StepCalls, StepsPerJob: StepsPerJob, Children: o.Children, Rounds: o.Rounds}
	if err := stepCost(ctx, st, o, f); err != nil {
		return Result{}, err
	}
	if err := stepDrains(ctx, st, o, f); err != nil {
		return Result{}, err
	}
	if err := fanOut(ctx, st, o, f); err != nil {
		return Result{}, err
	}
	res := Result{Jobs: o.Jobs, Workers: o.Workers, JobsPerSec: f.SteppedUnitsPerSec, Steps: f}
	res.Seconds = float64(o.Jobs*StepsPerJob) / f.SteppedUnitsPerSec
	return res, nil
}

// stepCost times StepRecord against LeaseExtend on one running job.
func stepCost(ctx context.Context, st store.Store, o Options, f *StepsFigures) error {
	q := randomQueue()
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: time.Now(),
		Jobs: []*store.NewJob{{Kind: "sortie_bench_cost", Queue: q, Args: []byte(`{}`)}}}); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	rows, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: q, Limit: 1, Now: time.Now(), Lease: time.Hour}))
	if err != nil || len(rows) != 1 {
		return fmt.Errorf("bench: claim the cost job: %v (%d jobs)", err, len(rows))
	}
	job := rows[0]
	ref := store.LeaseRef{ID: job.ID, ClaimToken: job.ClaimToken}
	record, beat := make([]time.Duration, 0, o.StepCalls), make([]time.Duration, 0, o.StepCalls)
	var problems []string
	for i := range o.StepCalls {
		rec := func() error {
			start := time.Now()
			res, err := st.StepRecord(ctx, &store.StepRecordParams{Now: start, Steps: []*store.StepRecord{
				{ID: ref.ID, ClaimToken: ref.ClaimToken, Name: "s" + strconv.Itoa(i), Result: []byte(`{"n":` + strconv.Itoa(i) + `}`)}}})
			record = append(record, time.Since(start))
			if err == nil && (!res[0].Applied || res[0].Exists) {
				problems = append(problems, fmt.Sprintf("step %d was not recorded: %+v", i, res[0]))
			}
			return err
		}
		ext := func() error {
			start := time.Now()
			res, err := st.LeaseExtend(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{ref}, Now: start, Lease: time.Hour})
			beat = append(beat, time.Since(start))
			if err == nil && !res[0].Held {
				problems = append(problems, "the cost job's lease was lost")
			}
			return err
		}
		first, second := rec, ext
		if i%2 == 1 {
			first, second = ext, rec
		}
		if err := first(); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if err := second(); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	f.RecordMs, f.HeartbeatMs = medianMs(record), medianMs(beat)
	f.RecordPerHeartbeat = f.RecordMs / f.HeartbeatMs
	if list, err := st.StepList(ctx, &store.StepListParams{ID: job.ID}); err != nil || len(list) != o.StepCalls {
		problems = append(problems, fmt.Sprintf("the cost job holds %d steps (%v), want %d", len(list), err, o.StepCalls))
	}
	if _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: job.ID, Now: time.Now()}); err == nil {
		problems = append(problems, "a running job was deleted")
	}
	if _, err := st.JobFinish(ctx, &store.JobFinishParams{Now: time.Now(), Reports: []*store.Report{
		{ID: ref.ID, ClaimToken: ref.ClaimToken, Kind: store.ReportCompleted}}}); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return problemsError(problems)
}

// medianMs returns the median of ds in milliseconds.
func medianMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ms(ds[len(ds)/2])
}

// stepArgs are the args of the drain's jobs.
type stepArgs struct {
	Seq int64 `json:"s"`
}

func (stepArgs) Kind() string { return "sortie_bench_step" }

// stepNames are the names of a stepped job's steps.
var stepNames = func() []string {
	out := make([]string, StepsPerJob)
	for i := range out {
		out[i] = "unit-" + strconv.Itoa(i)
	}
	return out
}()

// stepDrains drains plain jobs, one-step jobs and StepsPerJob-step jobs,
// the same work in all.
func stepDrains(ctx context.Context, st store.Store, o Options, f *StepsFigures) error {
	units := o.Jobs * StepsPerJob
	var took [3]time.Duration
	for i, d := range []struct{ jobs, steps int }{{units, 0}, {units, 1}, {o.Jobs, StepsPerJob}} {
		var err error
		if took[i], err = drainUnits(ctx, st, o, d.jobs, d.steps); err != nil {
			return err
		}
	}
	f.PlainUnitsPerSec = float64(units) / took[0].Seconds()
	f.OneStepUnitsPerSec = float64(units) / took[1].Seconds()
	f.SteppedUnitsPerSec = float64(units) / took[2].Seconds()
	f.SteppedPerPlain = f.SteppedUnitsPerSec / f.PlainUnitsPerSec
	f.SteppedPerOneStep = f.SteppedUnitsPerSec / f.OneStepUnitsPerSec
	return nil
}

// drainUnits preloads n jobs of steps steps each (0: a plain job, its
// unit of work done without a step) in a queue of its own, and times a
// client with o.Workers workers running them all. It checks that each
// unit ran exactly once and each job completed.
func drainUnits(ctx context.Context, st store.Store, o Options, n, steps int) (time.Duration, error) {
	q := randomQueue()
	ran := make([]atomic.Int32, n*max(steps, 1))
	workers := sortie.NewWorkers()
	err := sortie.RegisterWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[stepArgs]) error {
		if steps == 0 {
			ran[job.Args.Seq].Add(1)
			return nil
		}
		for i := range steps {
			if _, err := sortie.Step(ctx, stepNames[i], func(context.Context) (int, error) {
				ran[int(job.Args.Seq)*steps+i].Add(1)
				return i, nil
			}); err != nil {
				return err
			}
		}
		return nil
	}), &sortie.WorkerOpts{Queue: q})
	if err != nil {
		return 0, err
	}
	c, err := sortie.NewClient(st, &sortie.Config{Queues: map[string]sortie.QueueConfig{q: {MaxWorkers: o.Workers}},
		Workers: workers, Logger: o.Logger, ID: processID(q, 0)})
	if err != nil {
		return 0, err
	}
	if err := Preload(ctx, n, func(ctx context.Context, lo, hi int64) error {
		params := make([]sortie.EnqueueParams, hi-lo)
		for i := range params {
			params[i].Args = stepArgs{Seq: lo + int64(i)}
		}
		_, err := c.EnqueueMany(ctx, params)
		return err
	}); err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	runtime.GC()
	start := time.Now()
	took, err := runUntilCompleted(ctx, c, q, n, o.StallTimeout, start)
	if err != nil {
		return 0, err
	}
	var problems []string
	for i := range ran {
		if k := ran[i].Load(); k != 1 {
			problems = append(problems, fmt.Sprintf("unit %d of job %d ran %d times, want once", i%max(steps, 1), i/max(steps, 1), k))
			if len(problems) == 5 {
				break
			}
		}
	}
	return took, problemsError(problems)
}

// runUntilCompleted starts c, waits until the store counts n jobs of queue
// completed, stops c, and returns the time from start to the count.
func runUntilCompleted(ctx context.Context, c *sortie.Client, queue string, n int, stall time.Duration, start time.Time) (time.Duration, error) {
	if err := c.Start(ctx); err != nil {
		return 0, fmt.Errorf("bench: start client: %w", err)
	}
	took, werr := waitQueueCompleted(ctx, c, queue, n, stall, start)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if err := c.Stop(sctx); err != nil && werr == nil {
		werr = fmt.Errorf("bench: stop client: %w", err)
	}
	return took, werr
}

// waitQueueCompleted polls the store until it counts n jobs of queue completed,
// failing after stall without progress.
func waitQueueCompleted(ctx context.Context, c *sortie.Client, queue string, n int, stall time.Duration, start time.Time) (time.Duration, error) {
	last, lastAt := int64(-1), time.Now()
	for {
		done, err := completedIn(ctx, c, queue)
		if err != nil {
			return 0, err
		}
		now := time.Now()
		if done >= int64(n) {
			return now.Sub(start), nil
		}
		if done != last {
			last, lastAt = done, now
		} else if now.Sub(lastAt) > stall {
			return 0, problemsError([]string{fmt.Sprintf("no progress for %s: %d of %d jobs completed", stall, done, n)})
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// completedIn returns how many jobs of queue the store counts completed.
func completedIn(ctx context.Context, c *sortie.Client, queue string) (int64, error) {
	counts, err := c.JobCounts(ctx, queue)
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	for _, x := range counts {
		if x.State == store.JobStateCompleted {
			return x.Count, nil
		}
	}
	return 0, nil
}

// parentArgs and childArgs are the fan-out's jobs.
type (
	parentArgs struct{}
	childArgs  struct {
		N int `json:"n"`
	}
)

func (parentArgs) Kind() string { return "sortie_bench_parent" }
func (childArgs) Kind() string  { return "sortie_bench_child" }

// fanOut runs o.Rounds parents, one at a time, each spawning o.Children
// children and awaiting them, and measures each parent's resumption.
func fanOut(ctx context.Context, st store.Store, o Options, f *StepsFigures) error {
	parents, kids := randomQueue(), randomQueue()
	fo := &fanOutRun{children: o.Children, kids: kids, resumed: map[int64]time.Time{}, entered: map[int64]bool{}}
	clock := &finishClock{Store: st, at: map[int64]time.Time{}}
	c, err := fo.client(clock, o, parents)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("bench: start client: %w", err)
	}
	delays, stamped, err := fo.rounds(ctx, c, clock, o, parents)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if serr := c.Stop(sctx); serr != nil && err == nil {
		err = fmt.Errorf("bench: stop client: %w", serr)
	}
	if err != nil {
		return err
	}
	p := percentilesOf(delays)
	f.ResumeP50ms, f.ResumeP99ms, f.ResumeMaxMs = p.p50, p.p99, p.max
	f.ResumeFinalizedP99ms = percentilesOf(stamped).p99
	f.AwaitMs = medianMs(fo.awaits)
	return problemsError(fo.problems)
}

// fanOutRun is what the fan-out's handlers record.
type fanOutRun struct {
	children int
	kids     string

	mu       sync.Mutex
	entered  map[int64]bool      // parents that ran their first attempt
	resumed  map[int64]time.Time // when each parent's handler started again
	awaits   []time.Duration
	problems []string
}

// client returns the fan-out's client: one worker for the parents, and
// o.Workers for the children.
func (fo *fanOutRun) client(st store.Store, o Options, parents string) (*sortie.Client, error) {
	workers := sortie.NewWorkers()
	if err := sortie.RegisterWorker(workers, sortie.WorkFunc(fo.parent), &sortie.WorkerOpts{Queue: parents}); err != nil {
		return nil, err
	}
	if err := sortie.RegisterWorker(workers, sortie.WorkFunc(func(context.Context, *sortie.Job[childArgs]) error { return nil }),
		&sortie.WorkerOpts{Queue: fo.kids}); err != nil {
		return nil, err
	}
	return sortie.NewClient(st, &sortie.Config{Workers: workers, Logger: o.Logger, ID: processID(parents, 0),
		Queues: map[string]sortie.QueueConfig{parents: {MaxWorkers: 1}, fo.kids: {MaxWorkers: o.Workers}}})
}

// parent spawns the children, awaits them, and checks their outcomes.
func (fo *fanOutRun) parent(ctx context.Context, job *sortie.Job[parentArgs]) error {
	entered := time.Now()
	fo.mu.Lock()
	if fo.entered[job.ID] {
		fo.resumed[job.ID] = entered
	}
	fo.entered[job.ID] = true
	fo.mu.Unlock()
	kids := make([]sortie.EnqueueParams, fo.children)
	for i := range kids {
		kids[i] = sortie.EnqueueParams{Args: childArgs{N: i}}
	}
	if _, err := sortie.Spawn(ctx, "fan", kids, nil); err != nil {
		return err
	}
	start := time.Now()
	out, err := sortie.Await(ctx, "fan")
	if err != nil {
		return err
	}
	took := time.Since(start)
	fo.mu.Lock()
	defer fo.mu.Unlock()
	fo.awaits = append(fo.awaits, took)
	done := 0
	for _, ch := range out {
		if ch.State == sortie.JobStateCompleted {
			done++
		}
	}
	if done != fo.children {
		fo.problems = append(fo.problems, fmt.Sprintf("parent %d: Await returned %d children completed of %d", job.ID, done, fo.children))
	}
	return nil
}

// rounds runs the parents one at a time and returns each one's delay
// from its last child's outcome to its resumption: from the commit of
// that outcome, and from its FinalizedAt.
func (fo *fanOutRun) rounds(ctx context.Context, c *sortie.Client, clock *finishClock, o Options, parents string) (committed, stamped []time.Duration, _ error) {
	for round := range o.Rounds {
		res, err := c.Enqueue(ctx, parentArgs{}, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("bench: %w", err)
		}
		if _, err := waitQueueCompleted(ctx, c, parents, round+1, o.StallTimeout, time.Now()); err != nil {
			return nil, nil, err
		}
		last, lastCommit, err := lastChildEnd(ctx, c, clock, res.ID)
		if err != nil {
			return nil, nil, err
		}
		fo.mu.Lock()
		at, ok := fo.resumed[res.ID]
		fo.mu.Unlock()
		if !ok {
			fo.problems = append(fo.problems, fmt.Sprintf("parent %d completed without awaiting its children", res.ID))
			continue
		}
		committed, stamped = append(committed, at.Sub(lastCommit)), append(stamped, at.Sub(last))
	}
	return committed, stamped, nil
}

// lastChildEnd returns the latest FinalizedAt of job parent's children,
// and the latest time a JobFinish call that recorded one of their
// outcomes returned.
func lastChildEnd(ctx context.Context, c *sortie.Client, clock *finishClock, parent int64) (last, lastCommit time.Time, _ error) {
	var cursor int64
	for {
		page, err := c.JobList(ctx, &sortie.JobListParams{ParentID: parent, Cursor: cursor, Limit: 1000})
		if err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("bench: %w", err)
		}
		for _, j := range page.Jobs {
			if j.FinalizedAt.After(last) {
				last = j.FinalizedAt
			}
			if at := clock.take(j.ID); at.After(lastCommit) {
				lastCommit = at
			}
		}
		if page.NextCursor == 0 {
			return last, lastCommit, nil
		}
		cursor = page.NextCursor
	}
}

// finishClock notes when each JobFinish call returned, for each job it
// recorded an outcome of: the commit of that outcome.
type finishClock struct {
	store.Store
	mu sync.Mutex
	at map[int64]time.Time
}

func (f *finishClock) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	res, err := f.Store.JobFinish(ctx, p)
	now := time.Now()
	if err == nil {
		f.mu.Lock()
		for i, r := range res {
			if r.Applied {
				f.at[p.Reports[i].ID] = now
			}
		}
		f.mu.Unlock()
	}
	return res, err
}

// take returns and forgets the commit time of job id's outcome.
func (f *finishClock) take(id int64) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := f.at[id]
	delete(f.at, id)
	return at
}

// problemsError is the *CheckError of problems, nil for none.
func problemsError(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return &CheckError{Problems: problems}
}
