package multiproc

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sortiehq/sortie/internal/testkit/childproc"
	"github.com/sortiehq/sortie/store"
)

// A proc is a worker process a test started (childproc.Start).
type proc = childproc.Proc

// An attempt is one attempt as the journals tell it.
type attempt = childproc.Run

// roleWorker is the role of the worker processes (runChild).
const roleWorker = "worker"

// startProc starts the test binary as worker process name, working the
// store at url with queues ("queue:MaxWorkers", see envQueues). The test's
// cleanup kills it if it still runs, and prints its log if the test failed.
func startProc(t testing.TB, dir, url, name string, queues ...string) *proc {
	t.Helper()
	return startProcEnv(t, dir, url, name, nil, queues...)
}

// startProcEnv is startProc with more environment variables ("NAME=value")
// for the process.
func startProcEnv(t testing.TB, dir, url, name string, env []string, queues ...string) *proc {
	t.Helper()
	env = append([]string{
		envStore + "=" + url,
		envQueues + "=" + strings.Join(queues, ","),
		// A binary built with -race sleeps a second before it exits
		// (GORACE's atexit_sleep_ms): the tests time how soon a worker exits.
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"),
	}, env...)
	return childproc.Start(t, dir, roleWorker, name, env...)
}

// describe returns the job counts of queues and the tails of the
// processes' journals and logs, for failure messages.
func describe(st store.Store, procs []*proc, queues ...string) string {
	var b strings.Builder
	for _, q := range queues {
		counts, err := st.JobCounts(context.Background(), &store.JobCountsParams{Queue: q})
		fmt.Fprintf(&b, "JobCounts(%q) = %v, err %v\n", q, counts, err)
	}
	for _, p := range procs {
		state := "running"
		if p.Exited() {
			state = fmt.Sprintf("exited: %v", p.Err())
		}
		fmt.Fprintf(&b, "--- process %s (%s), journal tail:\n%s\n--- its log tail:\n%s\n",
			p.Name, state, childproc.Tail(p.Journal, 5), childproc.Tail(p.Log, 15))
	}
	return b.String()
}

// countState returns how many jobs of queue are in state.
func countState(ctx context.Context, st store.Store, queue string, state store.JobState) (int64, error) {
	counts, err := st.JobCounts(ctx, &store.JobCountsParams{Queue: queue})
	if err != nil {
		return 0, err
	}
	for _, c := range counts {
		if c.State == state {
			return c.Count, nil
		}
	}
	return 0, nil
}

// listJobs returns every job of queue, by ID.
func listJobs(t *testing.T, st store.Store, queue string) []*store.JobRow {
	t.Helper()
	var all []*store.JobRow
	var after int64
	for {
		rows, err := st.JobList(context.Background(), &store.JobListParams{Queue: queue, AfterID: after, Limit: 1000})
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

// readJournals returns the attempts in the journals of procs, by job,
// each job's in the order they started.
func readJournals(t *testing.T, procs []*proc) map[int64][]*attempt {
	t.Helper()
	byJob, err := childproc.RunsByJob(procs)
	if err != nil {
		t.Fatal(err)
	}
	return byJob
}
