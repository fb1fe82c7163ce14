package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
	"github.com/sortiehq/sortie/store"
)

// checker collects a scenario's failures and stops the test after too many,
// so a broken invariant does not print thousands of lines.
type checker struct {
	t *testing.T
	n int
}

func (c *checker) errorf(format string, args ...any) {
	c.t.Helper()
	c.n++
	c.t.Errorf(format, args...)
	if c.n >= 20 {
		c.t.Fatalf("stopping after %d failures", c.n)
	}
}

// account checks every job of queue, where every job should have completed
// exactly once, against the journals of procs, and puts the figures into c:
//
//   - every job completed, by a claim a journal shows running to its end
//     (lost counts the jobs that did not);
//   - no claim (job and claim token) ran twice;
//   - every other run of a job (a duplicate) is explained (proc.explains):
//     its process was killed or stopped before the job's next run
//     started, so the run's lease could expire while it had not finished.
func account(t *testing.T, c *counts, st store.Store, queue string, procs []*proc) {
	t.Helper()
	check := &checker{t: t}
	byJob, err := childproc.RunsByJob(procs)
	if err != nil {
		t.Fatal(err)
	}
	byName := make(map[string]*proc)
	for _, p := range procs {
		byName[p.Name] = p
	}
	c.completed, c.dead, c.cancelled, c.pending, c.lost = 0, 0, 0, 0, 0
	c.runs, c.duplicates, c.explained = 0, 0, 0
	unstarted := 0
	for _, row := range listJobs(t, st, queue) {
		runs := byJob[row.ID]
		delete(byJob, row.ID)
		c.runs += len(runs)
		switch row.State {
		case store.JobStateCompleted:
			c.completed++
		case store.JobStateDead:
			c.dead++
		case store.JobStateCancelled:
			c.cancelled++
		default:
			c.pending++
		}
		if row.State != store.JobStateCompleted {
			c.lost++
			check.errorf("job %d is %s after %d attempts (runs: %v), want completed", row.ID, row.State, row.Attempt, runs)
			continue
		}
		unstarted += unstartedClaims(row, runs)
		tokens := make(map[int64]bool)
		var recorded *run
		for _, r := range runs {
			if tokens[r.Token] {
				check.errorf("claim %d of job %d ran twice: %v", r.Token, row.ID, runs)
			}
			tokens[r.Token] = true
			if r.Token == row.ClaimToken && r.Proc == row.AttemptedBy {
				recorded = r
			}
		}
		switch {
		case recorded == nil:
			check.errorf("job %d completed by claim %d of %s, which no journal shows running (runs: %v)", row.ID, row.ClaimToken, row.AttemptedBy, runs)
		case recorded.End.IsZero() || recorded.Cancelled:
			check.errorf("job %d completed by %v, which did not run to its end", row.ID, recorded)
		}
		for i, r := range runs {
			if r == recorded {
				continue
			}
			c.duplicates++
			if i+1 < len(runs) && explains(byName[r.Proc], r, runs[i+1]) {
				c.explained++
				continue
			}
			check.errorf("job %d ran more than once with nothing to explain it: %v (its process got %v); all its runs: %v",
				row.ID, r, faultList(byName[r.Proc]), runs)
		}
	}
	for id, runs := range byJob {
		check.errorf("journals show runs of job %d, which queue %q does not hold: %v", id, queue, runs)
	}
	if unstarted > 0 {
		t.Logf("%d claims were rescued before their process started them (killed, or the reply lost to an outage)", unstarted)
	}
}

// unstartedClaims returns how many of row's rescued attempts no journal
// shows starting: claimed by a process that was killed before it started
// the job, or whose claim's reply was lost to an outage.
func unstartedClaims(row *store.JobRow, runs []*run) int {
	n := 0
	for _, e := range row.Errors {
		if e.Message == store.LeaseLostMessage && !slices.ContainsFunc(runs, func(r *run) bool { return r.Attempt == e.Attempt }) {
			n++
		}
	}
	return n
}

// faultList describes the faults p got, for failure messages.
func faultList(p *proc) string {
	faults := p.Faults()
	if len(faults) == 0 {
		return "no SIGKILL, SIGSTOP or cut"
	}
	var s []string
	for _, f := range faults {
		s = append(s, f.What+" at "+f.At.Format("15:04:05.000"))
	}
	return strings.Join(s, ", ")
}

// listJobs returns every job of queue, by ID.
func listJobs(t *testing.T, st store.Store, queue string) []*store.JobRow {
	t.Helper()
	var all []*store.JobRow
	var after int64
	for {
		rows, err := st.JobList(t.Context(), &store.JobListParams{Queue: queue, AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatalf("JobList(%q): %v", queue, err)
		}
		if len(rows) == 0 {
			return all
		}
		all = append(all, rows...)
		after = rows[len(rows)-1].ID
	}
}

// stateCounts returns the jobs of queue per state.
func stateCounts(ctx context.Context, st store.Store, queue string) (map[store.JobState]int, error) {
	counts, err := st.JobCounts(ctx, &store.JobCountsParams{Queue: queue})
	if err != nil {
		return nil, err
	}
	out := make(map[store.JobState]int)
	for _, c := range counts {
		out[c.State] += int(c.Count)
	}
	return out, nil
}

// completedCount returns how many jobs of queue completed; while the store
// is unreachable it returns the error.
func completedCount(ctx context.Context, st store.Store, queue string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	counts, err := stateCounts(ctx, st, queue)
	return counts[store.JobStateCompleted], err
}

// describe returns the job counts of queue and the tails of the processes'
// journals and logs, for failure messages.
func describe(st store.Store, procs []*proc, queue string) string {
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := stateCounts(ctx, st, queue)
	fmt.Fprintf(&b, "jobs of queue %q per state: %v (err %v)\n", queue, counts, err)
	for _, p := range procs {
		state := "running"
		if p.Exited() {
			state = fmt.Sprintf("exited: %v", p.Err())
		}
		fmt.Fprintf(&b, "--- process %s (%s, %s), journal tail:\n%s\n--- its log tail:\n%s\n",
			p.Name, state, faultList(p), childproc.Tail(p.Journal, 3), childproc.Tail(p.Log, 10))
	}
	return b.String()
}

// enqueueSleeps enqueues n Sleep jobs into queue, the i-th with args(i),
// and returns their IDs.
func enqueueSleeps(t *testing.T, st store.Store, queue string, n int, args func(i int) Sleep) []int64 {
	t.Helper()
	c, err := sortie.NewClient(st, &sortie.Config{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for start := 0; start < n; start += 500 {
		var batch []sortie.EnqueueParams
		for i := start; i < min(n, start+500); i++ {
			batch = append(batch, sortie.EnqueueParams{Args: args(i), Opts: &sortie.EnqueueOpts{Queue: queue}})
		}
		res, err := c.EnqueueMany(t.Context(), batch)
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	return ids
}
