package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// SoakOptions tune Soak. A zero field means its default.
type SoakOptions struct {
	// Rate is the jobs enqueued per second. Defaults to 3,000.
	Rate float64
	// Duration is how long jobs are enqueued. Defaults to 30 minutes.
	Duration time.Duration
	// Window is the length of one reported window. Defaults to 5 minutes.
	Window time.Duration
	// Workers is the client's worker pool. Defaults to 100.
	Workers int
	// Retention is how long finished jobs are kept before the client's
	// maintenance prunes them (every one of the three retentions).
	// Defaults to 2 minutes.
	Retention time.Duration
	// Drain bounds the wait, after the last enqueue, for the jobs still
	// pending. Defaults to 2 minutes.
	Drain time.Duration
	// Sizes, when set, reads the store's size at the end of each window:
	// bytes by table, index or file name.
	Sizes func(ctx context.Context) (map[string]int64, error)
	// OnWindow, when set, is called with each window as it closes.
	OnWindow func(SoakWindow)
	// Logger receives the client's logs. Defaults to discarding them.
	Logger *slog.Logger
}

// The mix of Soak's jobs, by sequence number modulo 100.
const (
	soakDeadBelow  = 2  // 0-1: fail twice, dead (2%)
	soakRetryBelow = 10 // 2-9: fail once, then succeed (8%)
	// Every tenth job is scheduled a few seconds ahead (10%); of those,
	// the one at 10 modulo 100 holds a unique key that the next job (11)
	// asks for again while it is still scheduled: a conflict (1%).
	soakScheduledEvery = 10
	soakUniqueAt       = 10
	soakScheduleAhead  = 2 * time.Second
)

// SoakWindow is what one window of a soak saw.
type SoakWindow struct {
	// Index counts windows from 0; From and To are their bounds in seconds
	// since the start.
	Index    int     `json:"index"`
	From, To float64 `json:"-"`
	// Enqueued counts the enqueue calls made, Duplicates those refused as
	// a unique conflict; Started the first attempts started, Completed and
	// Dead the jobs finished so, Retried the attempts that failed and
	// will run again.
	Enqueued, Duplicates, Started, Completed, Dead, Retried int64
	// JobsPerSec is Completed+Dead over the window's length.
	JobsPerSec float64 `json:"jobs_per_sec"`
	// The percentiles in milliseconds of enqueue (or, for a scheduled
	// job, its RunAt) to the start of the first attempt, over the first
	// attempts started in the window.
	P50ms, P99ms, MaxMs float64
	// HeapMB is the Go heap in use after a collection, GoMB what the Go
	// runtime holds from the system (all it mapped less what it returned:
	// the heap with its free spans, stacks and its own structures), and
	// RSSMB the resident size of the process, at the window's end. GoMB
	// may exceed RSSMB, as address space the runtime mapped but never
	// touched counts in it; RSSMB growing past GoMB is memory outside the
	// Go runtime, such as SQLite's page caches.
	HeapMB, GoMB, RSSMB float64
	// StealPct is the share of the machine's CPU time the hypervisor gave
	// to others during the window (steal in /proc/stat), in percent; -1
	// where it cannot be read. A virtual machine whose CPUs are taken away
	// stalls whatever runs on it: this tells such a window apart.
	StealPct float64
	// Rows are the store's job counts by state at the window's end.
	Rows map[store.JobState]int64
	// Sizes are SoakOptions.Sizes at the window's end.
	Sizes map[string]int64
}

// SoakReport is what a soak found.
type SoakReport struct {
	Windows []SoakWindow
	// Enqueued counts the jobs stored, Duplicates the enqueues refused as
	// conflicts (expected: 1%).
	Enqueued, Duplicates int64
	// Lost are the jobs (sequence numbers) that never finished; Wrong the
	// ones that finished otherwise than their kind of job should
	// (completed for a job that always fails, or the reverse); Twice the
	// ones that finished more than once.
	Lost, Wrong, Twice []int64
	// CountsDiff describes where the store's counts disagree with its
	// listing at the end; empty when they agree.
	CountsDiff string
}

// Err returns an error describing what the soak got wrong, or nil.
func (r *SoakReport) Err() error {
	var problems []string
	for _, p := range []struct {
		what string
		seqs []int64
	}{{"never finished", r.Lost}, {"finished in the wrong state", r.Wrong}, {"finished twice", r.Twice}} {
		if len(p.seqs) > 0 {
			problems = append(problems, fmt.Sprintf("%d jobs %s (first: %v)", len(p.seqs), p.what, p.seqs[:min(5, len(p.seqs))]))
		}
	}
	if r.CountsDiff != "" {
		problems = append(problems, "counts disagree with the listing: "+r.CountsDiff)
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New("soak: " + strings.Join(problems, "; "))
}

// soakArgs are the arguments of a soak job.
type soakArgs struct {
	Seq int64 `json:"seq"`
	// Due is when the job is due, in nanoseconds of the soak's clock.
	Due int64 `json:"due"`
}

func (soakArgs) Kind() string { return "soak" }

// soak is one Soak run.
type soak struct {
	o      SoakOptions
	client *sortie.Client
	t0     time.Time
	n      int
	// final counts each job's finishing outcomes (completed or dead; -1
	// for a duplicate, which never runs), started its first starts.
	final   []atomic.Int32
	outcome []atomic.Int32 // 1 completed, 2 dead
	started []atomic.Bool

	mu  sync.Mutex // guards cur
	cur *soakCounts
}

// soakCounts are the counters of the open window.
type soakCounts struct {
	enqueued, duplicates, started, completed, dead, retried int64
	lat                                                     []time.Duration
}

// Soak holds a steady stream of jobs on st for o.Duration: at o.Rate jobs
// a second, 90% succeed, 8% fail once and then succeed, 2% fail twice and
// end dead; 10% are scheduled a few seconds ahead; 1% of the enqueues ask
// for a unique key a scheduled job holds. A client with o.Workers workers
// runs them, pruning finished jobs after o.Retention. Each window reports
// the throughput, the enqueue-to-start percentiles, the process's memory
// and the store's rows (and sizes). At the end it waits for the pending
// jobs, then checks that every job finished once, in the state its kind
// of job should, and that the store's counts agree with its listing.
func Soak(ctx context.Context, st store.Store, opts *SoakOptions) (*SoakReport, error) {
	o := soakDefaults(opts)
	s := &soak{o: o, n: int(o.Rate*o.Duration.Seconds() + 0.5), cur: &soakCounts{}}
	s.final, s.outcome, s.started = make([]atomic.Int32, s.n), make([]atomic.Int32, s.n), make([]atomic.Bool, s.n)
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(s.work), &sortie.WorkerOpts{})
	c, err := sortie.NewClient(st, &sortie.Config{
		Queues: map[string]sortie.QueueConfig{"soak": {MaxWorkers: o.Workers}}, Workers: workers, Logger: o.Logger,
		RetryPolicy:        sortie.RetryPolicyFunc(func(*sortie.JobRow) time.Duration { return time.Second }),
		CompletedRetention: o.Retention, CancelledRetention: o.Retention, DeadRetention: o.Retention,
		// A prune runs every twelfth rescue round: every three retentions
		// (every minute at most).
		RescueInterval: min(5*time.Second, max(o.Retention/4, 100*time.Millisecond)), ProcessBeat: -1,
	})
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	s.client = c
	unsubscribe := c.Subscribe(s.observe)
	defer unsubscribe()
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("soak: start client: %w", err)
	}
	var stopOnce sync.Once
	var stopErr error
	stop := func() error {
		stopOnce.Do(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			stopErr = c.Stop(stopCtx)
		})
		return stopErr
	}
	defer stop()
	rep := &SoakReport{}
	s.t0 = time.Now()
	windows := s.watch(ctx, st, rep)
	_, err = EnqueueOpenLoop(ctx, s.n, o.Rate, func(ctx context.Context, seq int64) error { return s.enqueue(ctx, seq, rep) })
	if err != nil {
		return rep, fmt.Errorf("soak: %w", err)
	}
	if err := s.drain(ctx); err != nil {
		return rep, err
	}
	<-windows(true)
	// Stopped, so that no prune runs between the counts and the listing.
	if err := stop(); err != nil {
		return rep, fmt.Errorf("soak: stop client: %w", err)
	}
	s.check(rep)
	rep.CountsDiff, err = countsAgainstListing(ctx, st)
	return rep, err
}

func soakDefaults(opts *SoakOptions) SoakOptions {
	var o SoakOptions
	if opts != nil {
		o = *opts
	}
	if o.Rate <= 0 {
		o.Rate = 3000
	}
	if o.Duration <= 0 {
		o.Duration = 30 * time.Minute
	}
	if o.Window <= 0 {
		o.Window = 5 * time.Minute
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Retention <= 0 {
		o.Retention = 2 * time.Minute
	}
	if o.Drain <= 0 {
		o.Drain = 2 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// enqueue makes job seq.
func (s *soak) enqueue(ctx context.Context, seq int64, rep *SoakReport) error {
	now := time.Since(s.t0)
	args := soakArgs{Seq: seq, Due: int64(now)}
	opts := &sortie.EnqueueOpts{Queue: "soak", MaxAttempts: 2}
	r := seq % 100
	if r%soakScheduledEvery == 0 {
		opts.RunAt = s.t0.Add(now + soakScheduleAhead)
		args.Due = int64(now + soakScheduleAhead)
	}
	if r == soakUniqueAt || r == soakUniqueAt+1 {
		opts.UniqueKey = "soak-" + strconv.FormatInt(seq-r+soakUniqueAt, 10)
	}
	res, err := s.client.Enqueue(ctx, args, opts)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cur.enqueued++
	if res.Duplicate {
		s.cur.duplicates++
	}
	s.mu.Unlock()
	if res.Duplicate {
		atomic.AddInt64(&rep.Duplicates, 1)
		s.final[seq].Store(-1) // never runs
		return nil
	}
	atomic.AddInt64(&rep.Enqueued, 1)
	return nil
}

// work is the soak's handler.
func (s *soak) work(ctx context.Context, job *sortie.Job[soakArgs]) error {
	seq := job.Args.Seq
	if seq < 0 || seq >= int64(s.n) {
		return sortie.Cancel(fmt.Errorf("soak: job with sequence number %d out of range", seq))
	}
	if job.Attempt == 1 && s.started[seq].CompareAndSwap(false, true) {
		lat := time.Since(s.t0) - time.Duration(job.Args.Due)
		s.mu.Lock()
		s.cur.started++
		s.cur.lat = append(s.cur.lat, max(lat, 0))
		s.mu.Unlock()
	}
	switch r := seq % 100; {
	case r < soakDeadBelow:
		return errors.New("soak: this job always fails")
	case r < soakRetryBelow && job.Attempt == 1:
		return errors.New("soak: first attempts of this job fail")
	}
	return nil
}

// observe counts the finished attempts the client announces.
func (s *soak) observe(e *sortie.Event) {
	if e.Kind != sortie.EventJobFinished || e.Job == nil {
		return
	}
	// By the args, not the ID: a job can finish before its Enqueue returns.
	var a soakArgs
	if e.Job.Kind != a.Kind() || json.Unmarshal(e.Job.Args, &a) != nil || a.Seq < 0 || a.Seq >= int64(s.n) {
		return
	}
	seq := a.Seq
	s.mu.Lock()
	switch e.Outcome {
	case sortie.OutcomeCompleted:
		s.cur.completed++
	case sortie.OutcomeDead:
		s.cur.dead++
	case sortie.OutcomeRetrying:
		s.cur.retried++
	}
	s.mu.Unlock()
	switch e.Outcome {
	case sortie.OutcomeCompleted:
		s.outcome[seq].Store(1)
		s.final[seq].Add(1)
	case sortie.OutcomeDead:
		s.outcome[seq].Store(2)
		s.final[seq].Add(1)
	}
}

// watch closes a window every o.Window until the returned function is
// called with true; that closes the last one and returns a channel closed
// once it is reported.
func (s *soak) watch(ctx context.Context, st store.Store, rep *SoakReport) func(bool) <-chan struct{} {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(s.o.Window)
		defer tick.Stop()
		from := 0.0
		cpu := readCPUTimes()
		for i := 0; ; i++ {
			last := false
			select {
			case <-tick.C:
			case <-stop:
				last = true
			}
			w := s.closeWindow(ctx, st, i, from)
			now := readCPUTimes()
			w.StealPct, cpu = stealPct(cpu, now), now
			from = w.To
			rep.Windows = append(rep.Windows, w)
			if s.o.OnWindow != nil {
				s.o.OnWindow(w)
			}
			if last {
				return
			}
		}
	}()
	var once sync.Once
	return func(bool) <-chan struct{} {
		once.Do(func() { close(stop) })
		return done
	}
}

// closeWindow reports window i, which began from seconds after the start.
func (s *soak) closeWindow(ctx context.Context, st store.Store, i int, from float64) SoakWindow {
	s.mu.Lock()
	c := s.cur
	s.cur = &soakCounts{lat: make([]time.Duration, 0, len(c.lat))}
	s.mu.Unlock()
	to := time.Since(s.t0).Seconds()
	w := SoakWindow{Index: i, From: from, To: to, Enqueued: c.enqueued, Duplicates: c.duplicates, Started: c.started,
		Completed: c.completed, Dead: c.dead, Retried: c.retried}
	if to > from {
		w.JobsPerSec = float64(c.completed+c.dead) / (to - from)
	}
	if len(c.lat) > 0 {
		slices.Sort(c.lat)
		at := func(q float64) float64 {
			return ms(c.lat[min(len(c.lat)-1, int(math.Ceil(q*float64(len(c.lat))))-1)])
		}
		w.P50ms, w.P99ms, w.MaxMs = at(0.5), at(0.99), ms(c.lat[len(c.lat)-1])
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w.HeapMB, w.GoMB, w.RSSMB = float64(m.HeapInuse)/(1<<20), float64(m.Sys-m.HeapReleased)/(1<<20), rssMB()
	if counts, err := st.JobCounts(ctx, &store.JobCountsParams{}); err == nil {
		w.Rows = make(map[store.JobState]int64)
		for _, qc := range counts {
			w.Rows[qc.State] += qc.Count
		}
	}
	if s.o.Sizes != nil {
		w.Sizes, _ = s.o.Sizes(ctx)
	}
	return w
}

// rssMB returns the resident size of this process in MiB, 0 where
// /proc is not there.
func rssMB() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return float64(pages*int64(os.Getpagesize())) / (1 << 20)
}

// drain waits until every stored job finished, or o.Drain passed.
func (s *soak) drain(ctx context.Context) error {
	deadline := time.Now().Add(s.o.Drain)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		pending := 0
		for i := range s.final {
			if s.final[i].Load() == 0 {
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return nil // check reports them lost
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// check fills in the report's lost, wrong and twice-finished jobs.
func (s *soak) check(rep *SoakReport) {
	for i := range s.final {
		seq := int64(i)
		switch f := s.final[i].Load(); {
		case f == -1:
		case f == 0:
			rep.Lost = append(rep.Lost, seq)
		case f > 1:
			rep.Twice = append(rep.Twice, seq)
		}
		want := int32(1)
		if seq%100 < soakDeadBelow {
			want = 2
		}
		if got := s.outcome[i].Load(); got != 0 && got != want {
			rep.Wrong = append(rep.Wrong, seq)
		}
	}
}

// countsAgainstListing compares the store's job counts with a listing of
// every job, by queue and state: "" when they agree.
func countsAgainstListing(ctx context.Context, st store.Store) (string, error) {
	counts, err := st.JobCounts(ctx, &store.JobCountsParams{})
	if err != nil {
		return "", fmt.Errorf("soak: count jobs: %w", err)
	}
	counted := make(map[string]int64)
	for _, c := range counts {
		counted[c.Queue+"/"+string(c.State)] += c.Count
	}
	listed := make(map[string]int64)
	var after int64
	for {
		rows, err := st.JobList(ctx, &store.JobListParams{AfterID: after, Limit: 1000})
		if err != nil {
			return "", fmt.Errorf("soak: list jobs: %w", err)
		}
		for _, r := range rows {
			listed[r.Queue+"/"+string(r.State)]++
		}
		if len(rows) < 1000 {
			break
		}
		after = rows[len(rows)-1].ID
	}
	var diffs []string
	for k, n := range counted {
		if listed[k] != n {
			diffs = append(diffs, fmt.Sprintf("%s counted %d, listed %d", k, n, listed[k]))
		}
	}
	for k, n := range listed {
		if _, ok := counted[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s counted 0, listed %d", k, n))
		}
	}
	slices.Sort(diffs)
	return strings.Join(diffs, "; "), nil
}
