package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// processID is the client ID of process i of the run on queue; this
// process is 0, the helpers 1 and up.
func processID(queue string, i int) string { return fmt.Sprintf("%s/p%d", queue, i) }

// interval: preload a rate-limited queue, work it from Processes client
// processes for Duration and on until the measured periods have passed
// (workInterval), then measure the starts the store recorded.
func (r *run) interval(ctx context.Context) error {
	e, err := r.preload(ctx)
	if err != nil {
		return err
	}
	// The settings go to the store before any process starts, so that no
	// client works the queue unlimited.
	settings := sortie.QueueSettings{RateLimit: int(r.o.Rate), RatePeriod: r.o.Period}
	if _, err := r.client.QueueConfigure(ctx, r.queue, settings); err != nil {
		return fmt.Errorf("bench: %w", err)
	}

	// A helper that hangs is killed after it had all the time it needs to
	// get ready, work (workInterval: at most twice Duration) and stop.
	hctx, cancel := context.WithTimeout(ctx, r.o.StallTimeout+2*r.o.Duration+stopTimeout)
	var helpers []*helperProcess
	defer func() {
		cancel() // kills the helpers still running
		for _, p := range helpers {
			<-p.done
		}
	}()
	for i := 1; i < r.o.Processes; i++ {
		args, err := r.o.HelperCommand(r.st)
		if err != nil {
			return fmt.Errorf("bench: interval with %d processes: %w", r.o.Processes, err)
		}
		// No Duration: a helper works until it is told to stop (SIGTERM).
		p, err := startHelper(hctx, args, HelperArgs{
			Queue: r.queue, Workers: r.o.Workers, Period: r.o.Period, ID: processID(r.queue, i),
		})
		if err != nil {
			return err
		}
		helpers = append(helpers, p)
	}
	for _, p := range helpers {
		if err := p.waitReady(ctx, r.o.StallTimeout); err != nil {
			return err
		}
	}

	if err := r.start(ctx); err != nil {
		return err
	}
	if err := r.workInterval(ctx); err != nil {
		return err
	}
	if err := r.stop(ctx); err != nil {
		return err
	}
	for _, p := range helpers {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}

	// Every process's handler calls, by sequence number.
	tally := r.rec.Tally(nil, nil)
	runs, stray := tally.Runs, tally.Stray
	for _, p := range helpers {
		rep, err := p.wait()
		if err != nil {
			if errors.Is(hctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%w (killed: still running %s after it started)", err, r.o.StallTimeout+2*r.o.Duration+stopTimeout)
			}
			return err
		}
		for _, seq := range rep.Ran {
			if seq >= 0 && seq < int64(r.n) {
				runs[seq]++
			} else {
				stray++
			}
		}
		stray += rep.Stray
	}
	return r.measureInterval(ctx, e, runs, stray)
}

// workInterval lets the run's processes work the queue for Duration, and
// on until the window measured from the first start (Duration in whole
// periods) has passed, at most Duration longer. The first start comes a
// claim's round trip and a reserved lead after the processes start, up to
// a second or more when claims are slow (a loaded machine, a cold
// connection); stopping at Duration would measure periods at the end of
// the window that no process worked, and report a rate the queue never
// ran at. A start is known before its time (a claim reserves it ahead), so
// once the window's end has passed, every start in it is recorded; the
// first start is read again then, since a claim put back unrun takes its
// start with it.
func (r *run) workInterval(ctx context.Context) error {
	began := time.Now()
	until, limit := began.Add(r.o.Duration), began.Add(2*r.o.Duration)
	for {
		if err := sleepUntil(ctx, until); err != nil {
			return err
		}
		first, err := r.firstStart(ctx)
		if err != nil || first.IsZero() {
			return err
		}
		end := first.Add(r.window())
		if !end.After(time.Now()) || !until.Before(limit) {
			return nil
		}
		until = end
		if until.After(limit) {
			until = limit
		}
	}
}

// window is how long interval measures from the first start: Duration in
// whole periods, so that a limit that lets each period's starts go at once
// is not read as too fast or too slow depending on where the window ends.
func (r *run) window() time.Duration { return r.o.Duration / r.o.Period * r.o.Period }

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// firstStart returns the earliest start the store recorded of the run's
// queue, zero when none.
func (r *run) firstStart(ctx context.Context) (time.Time, error) {
	var first time.Time
	err := r.eachJob(ctx, func(job *sortie.JobRow) {
		if started(job) && (first.IsZero() || job.AttemptedAt.Before(first)) {
			first = job.AttemptedAt
		}
	})
	return first, err
}

// started reports whether the store recorded a start of job: a job back
// to available on attempt 0 never started (or was put back unrun).
func started(job *sortie.JobRow) bool {
	return job.Attempt != 0 || job.State != store.JobStateAvailable
}

// eachJob calls fn with each job of the run's queue, in ID order.
func (r *run) eachJob(ctx context.Context, fn func(*sortie.JobRow)) error {
	var cursor int64
	for {
		page, err := r.client.JobList(ctx, &sortie.JobListParams{Queue: r.queue, Cursor: cursor, Limit: 1000})
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		for _, job := range page.Jobs {
			fn(job)
		}
		if page.NextCursor == 0 {
			return nil
		}
		cursor = page.NextCursor
	}
}

// holdJob is the work of an interval job: it keeps its worker busy for a
// tenth of the rate period (at most 100 ms). With idle workers the process
// that wins the store's lock first would start a whole period's jobs, one
// batch after another, and the other processes none; a busy worker makes
// room for them, as real work would. The limit leaves workers idle most of
// each period, so this does not slow the rate down.
func holdJob(period time.Duration) {
	time.Sleep(min(period/10, 100*time.Millisecond))
}

// start is one job start as the store recorded it.
type start struct {
	seq int
	at  time.Time
	by  string
}

// measureInterval reads the run's jobs from the store, deletes the surplus
// ones that never started, fills in the result from the starts and checks
// the run: the rate, the limit, the processes, and that each started job
// ran exactly once and completed.
func (r *run) measureInterval(ctx context.Context, e *enqueued, runs []int32, stray int64) error {
	seqOf := make(map[int64]int, r.n)
	for seq, id := range e.ids {
		seqOf[id] = seq
	}
	problems := r.problems
	var starts []start
	var surplus []int64
	unknown, ranUnstarted := 0, 0
	err := r.eachJob(ctx, func(job *sortie.JobRow) {
		seq, ok := seqOf[job.ID]
		switch {
		case !ok:
			unknown++
		case !started(job):
			surplus = append(surplus, job.ID)
			if runs[seq] > 0 {
				ranUnstarted++
			}
		default:
			starts = append(starts, start{seq: seq, at: job.AttemptedAt, by: job.AttemptedBy})
		}
	})
	if err != nil {
		return err
	}
	if unknown > 0 {
		problems = append(problems, fmt.Sprintf("the queue holds %d jobs the run never made", unknown))
	}
	if ranUnstarted > 0 {
		problems = append(problems, fmt.Sprintf("the handler ran %d jobs the store says never started", ranUnstarted))
	}
	for _, id := range surplus {
		if _, err := r.client.JobDelete(ctx, id); err != nil {
			return fmt.Errorf("bench: delete a surplus job: %w", err)
		}
	}

	limit, period, window := int(r.o.Rate), r.o.Period, r.window()
	times := make([]time.Time, len(starts))
	for i, s := range starts {
		times[i] = s.at
	}
	m := measureStarts(times, period, window)
	want := float64(limit) / period.Seconds()
	got := float64(m.inWindow) / window.Seconds()
	rateErr := rateErrorPct(got, want)
	if len(starts) == 0 {
		problems = append(problems, "no job started")
	}
	if m.maxInPeriod > limit {
		problems = append(problems, fmt.Sprintf("%d jobs started within %s, above the queue's RateLimit of %d", m.maxInPeriod, period, limit))
	}
	problems = append(problems, r.checkProcesses(starts)...)

	t := Tally{Runs: make([]int32, len(starts)), Stray: stray, Problems: problems}
	for i, s := range starts {
		t.Runs[i] = runs[s.seq]
	}
	counts, err := r.counts(ctx)
	if err != nil {
		return err
	}
	t.Counts = counts
	if err := Check(t); err != nil {
		return err
	}
	r.res.Jobs = m.inWindow
	r.res.Seconds = window.Seconds()
	r.res.JobsPerSec = got
	r.res.Workers, r.res.Processes = r.o.Workers, r.o.Processes
	r.res.Rate, r.res.RateLimit, r.res.RatePeriodSec = want, limit, period.Seconds()
	r.res.RateErrorPct, r.res.MaxInWindow = &rateErr, m.maxInPeriod
	return nil
}

// checkProcesses returns the problems with who started the jobs: a process
// of the run that started none, or a client that is not of the run.
func (r *run) checkProcesses(starts []start) []string {
	by := map[string]int{}
	for _, s := range starts {
		by[s.by]++
	}
	var problems, idle []string
	for i := range r.o.Processes {
		id := processID(r.queue, i)
		if by[id] == 0 {
			idle = append(idle, id)
		}
		delete(by, id)
	}
	if len(idle) > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d client processes started no job: %s",
			len(idle), r.o.Processes, strings.Join(idle, ", ")))
	}
	others := make([]string, 0, len(by))
	for id, n := range by {
		others = append(others, fmt.Sprintf("%q (%d)", id, n))
	}
	if len(others) > 0 {
		slices.Sort(others)
		problems = append(problems, "jobs were started by clients not of the run: "+strings.Join(others, ", "))
	}
	return problems
}

// startStats are what interval measures of its start times.
type startStats struct {
	// inWindow is the number of starts in [first, first+window).
	inWindow int
	// maxInPeriod is the most starts in any window [t, t+period).
	maxInPeriod int
}

// measureStarts measures starts, which it sorts.
func measureStarts(starts []time.Time, period, window time.Duration) startStats {
	var m startStats
	if len(starts) == 0 {
		return m
	}
	slices.SortFunc(starts, time.Time.Compare)
	end := starts[0].Add(window)
	i := 0
	for j, t := range starts {
		if t.Before(end) {
			m.inWindow++
		}
		// The window [starts[i], starts[i]+period) holding starts[j].
		for t.Sub(starts[i]) >= period {
			i++
		}
		m.maxInPeriod = max(m.maxInPeriod, j-i+1)
	}
	return m
}

// rateErrorPct returns how far got is from want, in percent of want.
func rateErrorPct(got, want float64) float64 {
	return math.Abs(got-want) / want * 100
}
