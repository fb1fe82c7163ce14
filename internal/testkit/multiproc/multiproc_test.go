package multiproc

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
)

// storeCases are the stores the test runs on. url returns the URL of a
// new, empty store (see openStore) that lives as long as t.
var storeCases = []struct {
	name string
	url  func(t testing.TB) string
}{
	{name: "sqlite", url: func(t testing.TB) string { return filepath.Join(t.TempDir(), "sortie.db") }},
	{name: "postgres", url: func(t testing.TB) string {
		u, err := pgtest.WithSchema(pgtest.URL(t), pgtest.Schema(t))
		if err != nil {
			t.Fatal(err)
		}
		return u
	}},
	{name: "redis", url: redistest.StoreURL},
}

// TestManyProcesses runs sortie's workers in three processes on one store:
// first it kills one of them with SIGKILL in the middle of a run, then it
// checks the queues' global limits across the three.
func TestManyProcesses(t *testing.T) {
	t.Parallel()
	for _, tt := range storeCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := tt.url(t)
			st, closeStore, err := openStore(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = closeStore() })
			// The phases run one after the other, not in parallel: each
			// wants the machine's cores for its three processes, whose
			// leases must not expire while they live.
			t.Run("kill", func(t *testing.T) { testKill(t, st, url) })
			t.Run("limits", func(t *testing.T) { testLimits(t, st, url) })
		})
	}
}

// The kill phase's workload.
const (
	killQueue = "work"
	killJobs  = 3000
	// killWorkers is each process's MaxWorkers. With more workers, or
	// shorter jobs, the three processes' writes keep SQLite's one write
	// lock busy, and a process can wait for it longer than a lease.
	killWorkers = 4
	shortJob    = 10 * time.Millisecond
	// Every longEvery-th job runs for longJob, so the killed process has
	// jobs in flight.
	longEvery = 50
	longJob   = 300 * time.Millisecond
)

// testKill enqueues killJobs jobs, runs them in three processes, kills one
// with SIGKILL once a third of them are done and it has a job running, and
// checks that every job completed, and ran exactly once unless the killed
// process held it: then it ran at most twice, the second time after the
// first attempt's lease expired.
func testKill(t *testing.T, st store.Store, url string) {
	ctx := t.Context()
	dir := t.TempDir()
	var batch []sortie.EnqueueParams
	for i := range killJobs {
		d := shortJob
		if i%longEvery == 0 {
			d = longJob
		}
		batch = append(batch, sortie.EnqueueParams{Args: Sleep{For: d}, Opts: &sortie.EnqueueOpts{Queue: killQueue}})
	}
	ids := enqueue(t, st, batch)
	long := make(map[int64]bool)
	for i, id := range ids {
		if i%longEvery == 0 {
			long[id] = true
		}
	}

	var procs []*proc
	for i := range 3 {
		procs = append(procs, startProc(t, dir, url, fmt.Sprintf("kill-p%d", i), fmt.Sprintf("%s:%d", killQueue, killWorkers)))
	}
	victim, live := procs[0], procs[1:]
	diag := func() string { return describe(st, procs, killQueue) }

	// Kill the victim once a third of the jobs completed and it has a long
	// job that started less than half a long job ago: that job is certainly
	// still running when the signal lands.
	testkit.WaitFor(t, 30*time.Second, "a third of the jobs completed while "+victim.Name+" runs a long job", childproc.Watched(procs), diag, func() (bool, error) {
		done, err := countState(ctx, st, killQueue, store.JobStateCompleted)
		if err != nil || done < killJobs/3 {
			return false, err
		}
		atts, err := childproc.ReadJournal(victim.Journal)
		if err != nil {
			return false, err
		}
		for _, a := range atts {
			if a.End.IsZero() && long[a.Job] && time.Since(a.Start) < longJob/2 {
				return true, nil
			}
		}
		return false, nil
	})
	killSent := time.Now()
	victim.Kill(t)
	killedAt := time.Now()
	t.Logf("killed %s %s after the workers started", victim.Name, killSent.Sub(procStart(procs)))

	testkit.WaitFor(t, 40*time.Second, fmt.Sprintf("all %d jobs completed after %s was killed", killJobs, victim.Name), childproc.Watched(live), diag, func() (bool, error) {
		done, err := countState(ctx, st, killQueue, store.JobStateCompleted)
		return done == killJobs, err
	})
	for _, p := range live {
		p.Stop(t, 20*time.Second)
	}
	t.Logf("all jobs completed %s after the kill", time.Since(killSent))

	byJob := readJournals(t, procs)
	rows := listJobs(t, st, killQueue)
	if len(rows) != killJobs {
		t.Fatalf("queue %q holds %d jobs, want %d", killQueue, len(rows), killJobs)
	}
	check := newChecker(t)
	inFlight := 0 // attempts the killed process had not finished
	for _, atts := range byJob {
		for _, a := range atts {
			if a.Proc == victim.Name {
				if a.End.IsZero() {
					inFlight++
				}
				if !a.Start.Before(killedAt) || (!a.End.IsZero() && !a.End.Before(killedAt)) {
					check.errorf("%v: in the killed process, after it was killed at %s", a, killedAt.Format("15:04:05.000000"))
				}
				continue
			}
			if a.End.IsZero() || a.Cancelled {
				check.errorf("%v: in a live process, stopped gracefully, want it ended and not cancelled", a)
			}
		}
	}
	rescued, claimedOnly := 0, 0
	for _, row := range rows {
		atts := byJob[row.ID]
		var lost []store.AttemptError
		for _, e := range row.Errors {
			if e.Message != store.LeaseLostMessage {
				check.errorf("job %d has error %q (attempt %d), want none but %q", row.ID, e.Message, e.Attempt, store.LeaseLostMessage)
				continue
			}
			lost = append(lost, e)
			if !e.At.After(killSent) {
				check.errorf("job %d was rescued at %s, before %s was killed at %s: a lease expired while its process lived",
					row.ID, e.At.Format("15:04:05.000000"), victim.Name, killSent.Format("15:04:05.000000"))
			}
		}
		if row.State != store.JobStateCompleted {
			check.errorf("job %d is %s, want completed", row.ID, row.State)
		}
		if len(lost) > 1 {
			check.errorf("job %d lost its lease %d times, want at most once (one process was killed)", row.ID, len(lost))
		}
		if row.Attempt != 1+len(lost) {
			check.errorf("job %d made %d attempts with %d lease(s) lost, want %d", row.ID, row.Attempt, len(lost), 1+len(lost))
		}
		switch len(atts) {
		case 0:
			check.errorf("job %d (%s, attempt %d by %s) never started in any journal", row.ID, row.State, row.Attempt, row.AttemptedBy)
		case 1:
			a := atts[0]
			if a.Proc == victim.Name {
				// It ran once, in the killed process: it must have
				// finished there and been recorded before the kill.
				if len(lost) > 0 || a.End.IsZero() {
					check.errorf("%v: the job ran only in the killed process yet has %d lease(s) lost; want it finished there, or run again elsewhere", a, len(lost))
				}
			} else if len(lost) > 0 {
				// The killed process claimed it but had not started it.
				claimedOnly++
			}
			if a.Attempt != row.Attempt || a.Token != row.ClaimToken || a.Proc != row.AttemptedBy {
				check.errorf("%v: the store's last attempt is %d (token %d) by %s, want the journal's", a, row.Attempt, row.ClaimToken, row.AttemptedBy)
			}
		case 2:
			rescued++
			first, second := atts[0], atts[1]
			switch {
			case first.Proc != victim.Name || second.Proc == victim.Name:
				check.errorf("job %d ran twice: %v; then %v; want the first in the killed process %s and the second elsewhere", row.ID, first, second, victim.Name)
			case len(lost) != 1 || lost[0].Attempt != first.Attempt:
				check.errorf("job %d ran twice (%v; then %v) with lease-lost errors %v, want one for attempt %d", row.ID, first, second, lost, first.Attempt)
			case second.Attempt != first.Attempt+1 || second.Token == first.Token ||
				second.Attempt != row.Attempt || second.Token != row.ClaimToken || second.Proc != row.AttemptedBy:
				check.errorf("job %d ran twice (%v; then %v), store has attempt %d token %d by %s: want the second to be the store's next attempt with a new token",
					row.ID, first, second, row.Attempt, row.ClaimToken, row.AttemptedBy)
			case !second.Start.After(killSent):
				check.errorf("job %d ran again (%v) before the first process was killed at %s", row.ID, second, killSent.Format("15:04:05.000000"))
			case !second.Start.After(first.Claimed.Add(childLease)) || !second.Start.After(lost[0].At):
				// The first claim's lease lasted at least childLease, and
				// the job ran again only after a client rescued it.
				check.errorf("job %d ran again (%v) while the first attempt's lease (%v, rescued at %s) may have been valid",
					row.ID, second, first, lost[0].At.Format("15:04:05.000000"))
			}
		default:
			check.errorf("job %d started %d times, want at most 2: %v", row.ID, len(atts), atts)
		}
	}
	t.Logf("%s was killed with %d jobs in flight; %d jobs ran twice, %d ran once after it had claimed them",
		victim.Name, inFlight, rescued, claimedOnly)
	if inFlight == 0 {
		// Each job in flight must run again (checked above); without one
		// the kill proved little.
		check.errorf("%s had no job in flight when killed, want at least the long job it had just started", victim.Name)
	}
}

// The limits phase's workload.
const (
	cappedQueue      = "capped"
	cappedMaxRunning = 3
	cappedJobs       = 150
	cappedJob        = 20 * time.Millisecond
	// cappedWorkers is each process's MaxWorkers: below MaxRunning, so
	// only processes together can reach the cap.
	cappedWorkers = 2

	ratedQueue  = "rated"
	rateLimit   = 20
	ratePeriod  = 500 * time.Millisecond
	ratedJobs   = 120
	ratedJobDur = 50 * time.Millisecond
	// ratedWorkers is each process's MaxWorkers, few enough that no
	// process takes a whole window's starts.
	ratedWorkers = 3
)

// testLimits checks that a queue's global concurrency (MaxRunning) and rate
// limit hold across three processes.
func testLimits(t *testing.T, st store.Store, url string) {
	ctx := t.Context()
	dir := t.TempDir()
	for q, s := range map[string]store.QueueSettings{
		cappedQueue: {MaxRunning: cappedMaxRunning},
		ratedQueue:  {RateLimit: rateLimit, RatePeriod: ratePeriod},
	} {
		if _, err := st.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: q, Settings: s, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	var batch []sortie.EnqueueParams
	for range cappedJobs {
		batch = append(batch, sortie.EnqueueParams{Args: Sleep{For: cappedJob}, Opts: &sortie.EnqueueOpts{Queue: cappedQueue}})
	}
	for range ratedJobs {
		batch = append(batch, sortie.EnqueueParams{Args: Sleep{For: ratedJobDur}, Opts: &sortie.EnqueueOpts{Queue: ratedQueue}})
	}
	enqueue(t, st, batch)
	var procs []*proc
	for i := range 3 {
		procs = append(procs, startProc(t, dir, url, fmt.Sprintf("limits-p%d", i),
			fmt.Sprintf("%s:%d", cappedQueue, cappedWorkers), fmt.Sprintf("%s:%d", ratedQueue, ratedWorkers)))
	}
	testkit.WaitFor(t, 40*time.Second, "all jobs of the limited queues completed", childproc.Watched(procs), func() string { return describe(st, procs, cappedQueue, ratedQueue) }, func() (bool, error) {
		capped, err := countState(ctx, st, cappedQueue, store.JobStateCompleted)
		if err != nil {
			return false, err
		}
		rated, err := countState(ctx, st, ratedQueue, store.JobStateCompleted)
		return capped == cappedJobs && rated == ratedJobs, err
	})
	for _, p := range procs {
		p.Stop(t, 20*time.Second)
	}
	byJob := readJournals(t, procs)
	check := newChecker(t)

	// MaxRunning: a journal's attempt lies within the time its job was
	// running in the store (the start is written after the claim commits,
	// the end before the outcome is recorded), so attempts overlapping in
	// the journals were running at once in the store.
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	perProc := make(map[string]int)
	for _, row := range listJobs(t, st, cappedQueue) {
		atts := byJob[row.ID]
		if row.State != store.JobStateCompleted || len(atts) != 1 || atts[0].End.IsZero() {
			check.errorf("capped job %d is %s with attempts %v, want completed after one whole attempt", row.ID, row.State, atts)
			continue
		}
		a := atts[0]
		perProc[a.Proc]++
		edges = append(edges, edge{a.Start, +1}, edge{a.End, -1})
	}
	slices.SortFunc(edges, func(x, y edge) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return x.delta - y.delta // an end before a start at the same instant
	})
	running, peak := 0, 0
	for _, e := range edges {
		running += e.delta
		if running > peak {
			peak = running
		}
		if running > cappedMaxRunning {
			check.errorf("%d jobs of queue %q ran at once at %s across the processes, want at most MaxRunning %d",
				running, cappedQueue, e.at.Format("15:04:05.000000"), cappedMaxRunning)
		}
	}
	t.Logf("queue %q: at most %d jobs ran at once (MaxRunning %d); jobs per process: %v", cappedQueue, peak, cappedMaxRunning, perProc)

	// RateLimit: on the claim times the store recorded (a handler may begin
	// a little after its claim), no window of ratePeriod holds more than
	// rateLimit starts: any rateLimit+1 consecutive claims span at least
	// ratePeriod.
	var starts []time.Time
	clear(perProc)
	for _, row := range listJobs(t, st, ratedQueue) {
		if row.State != store.JobStateCompleted || row.Attempt != 1 || len(byJob[row.ID]) != 1 {
			check.errorf("rated job %d is %s after %d attempts with attempts %v, want completed after one", row.ID, row.State, row.Attempt, byJob[row.ID])
			continue
		}
		starts = append(starts, row.AttemptedAt)
		perProc[row.AttemptedBy]++
	}
	slices.SortFunc(starts, func(x, y time.Time) int { return x.Compare(y) })
	for i := 0; i+rateLimit < len(starts); i++ {
		if span := starts[i+rateLimit].Sub(starts[i]); span < ratePeriod {
			check.errorf("claims %d to %d of queue %q (%d claims) came within %s, want no more than RateLimit %d in any %s",
				i, i+rateLimit, ratedQueue, rateLimit+1, span, rateLimit, ratePeriod)
		}
	}
	for _, p := range procs {
		if perProc[p.Name] == 0 {
			check.errorf("process %s claimed none of the %d jobs of queue %q, want each process to get some (claims per process: %v)", p.Name, ratedJobs, ratedQueue, perProc)
		}
	}
	if len(starts) > 0 {
		t.Logf("queue %q: %d claims in %s; claims per process: %v", ratedQueue, len(starts), starts[len(starts)-1].Sub(starts[0]), perProc)
	}
}

// enqueue inserts batch into st and returns the new jobs' IDs, in order.
func enqueue(t *testing.T, st store.Store, batch []sortie.EnqueueParams) []int64 {
	t.Helper()
	c, err := sortie.NewClient(st, &sortie.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for chunk := range slices.Chunk(batch, 500) {
		res, err := c.EnqueueMany(t.Context(), chunk)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// procStart returns when the first of procs started.
func procStart(procs []*proc) time.Time {
	first := time.Now()
	for _, p := range procs {
		if p.Started.Before(first) {
			first = p.Started
		}
	}
	return first
}

// checker collects a test's failures and stops the test after too many, so
// a broken invariant does not print thousands of lines.
type checker struct {
	t *testing.T
	n int
}

func newChecker(t *testing.T) *checker { return &checker{t: t} }

func (c *checker) errorf(format string, args ...any) {
	c.t.Helper()
	c.n++
	c.t.Errorf(format, args...)
	if c.n >= 20 {
		c.t.Fatalf("stopping after %d failures", c.n)
	}
}
