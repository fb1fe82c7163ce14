package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
	"github.com/sortiehq/sortie/store"
)

const (
	fenceQueue = "fence"
	// fenceLease is the worker processes' lease in the fencing scenario:
	// the frozen process's jobs are rescued once it runs out.
	fenceLease = 3 * time.Second
	// fenceHeld is how many jobs the frozen process holds.
	fenceHeld = 3
	// msgDiscarded is what the runtime logs when the store refuses an
	// outcome whose claim is no longer the job's (execute.go).
	msgDiscarded = "job outcome discarded: lease lost, the job was rescued"
)

// TestSigstopFencing freezes a worker process with SIGSTOP while it runs
// jobs, until their leases run out and another process has rescued and
// completed them; then it lets it go on with SIGCONT. The frozen process's
// late outcomes are refused: the store keeps the newer attempts' outcomes.
func TestSigstopFencing(t *testing.T) {
	t.Parallel()
	for _, b := range multiProcess() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			heavy(t)
			testSigstopFencing(t, b)
		})
	}
}

func testSigstopFencing(t *testing.T, b *backend) {
	c := newCounts(t, "SIGSTOP fencing", b.name)
	tg := b.make(t)
	dir := t.TempDir()
	env := workerEnv(tg, fenceLease, fmt.Sprintf("%s:%d", fenceQueue, fenceHeld))
	var all []*proc
	c.enqueued, c.refused, c.faults = 0, 0, 0
	for round := 1; round <= pick(1, 5); round++ {
		frozen := startProc(t, dir, childWorker, fmt.Sprintf("fence-a%d", round), env)
		// The first attempt outlasts the freeze; the rescued one is quick.
		ids := enqueueSleeps(t, tg.st, fenceQueue, fenceHeld, func(int) Sleep {
			return Sleep{FirstFor: 4 * fenceLease, For: 50 * time.Millisecond}
		})
		c.enqueued += len(ids)
		diag := func() string { return describe(tg.st, append(all, frozen), fenceQueue) }
		testkit.WaitFor(t, 30*time.Second, frozen.Name+" runs every job", []testkit.Watched{frozen}, diag, func() (bool, error) {
			runs, err := childproc.ReadJournal(frozen.Journal)
			return len(runs) == len(ids), err
		})
		freeze(t, frozen, tg.st)
		c.faults++
		rescuer := startProc(t, dir, childWorker, fmt.Sprintf("fence-b%d", round), env)
		testkit.WaitFor(t, 3*fenceLease+30*time.Second, rescuer.Name+" completed every job", []testkit.Watched{rescuer}, diag, func() (bool, error) {
			return allCompletedBy(t.Context(), tg.st, ids, rescuer.Name)
		})
		frozen.Resume(t)
		testkit.WaitFor(t, 30*time.Second, frozen.Name+"'s late outcomes refused", []testkit.Watched{frozen, rescuer}, diag, func() (bool, error) {
			return len(logLines(frozen.Log, msgDiscarded)) == len(ids), nil
		})
		frozen.Stop(t, 30*time.Second)
		rescuer.Stop(t, 30*time.Second)
		all = append(all, frozen, rescuer)
		c.refused += len(logLines(frozen.Log, msgDiscarded))
		checkRescued(t, tg.st, ids, rescuer.Name)
	}
	account(t, c, tg.st, fenceQueue, all)
	if c.explained != c.enqueued {
		t.Errorf("%d runs were cut short by a freeze, want one per job (%d)", c.explained, c.enqueued)
	}
}

// freeze stops p with SIGSTOP. A process that shares its store with others
// through a lock (SQLite's write lock) may be frozen holding it, which
// would freeze every process: then freeze lets it go on a moment and tries
// again, until the store takes a write while p is stopped.
func freeze(t *testing.T, p *proc, st store.Store) {
	t.Helper()
	for try := 1; ; try++ {
		p.Pause(t)
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		err := probeWrite(ctx, st)
		cancel()
		if err == nil {
			return
		}
		if try == 10 {
			t.Fatalf("the store takes no write while %s is stopped: %v", p.Name, err)
		}
		t.Logf("the store takes no write while %s is stopped (%v); letting it go on a moment", p.Name, err)
		p.Resume(t)
		time.Sleep(50 * time.Millisecond)
	}
}

// allCompletedBy reports whether every job of ids completed, by process
// name.
func allCompletedBy(ctx context.Context, st store.Store, ids []int64, name string) (bool, error) {
	for _, id := range ids {
		row, err := st.JobGet(ctx, &store.JobGetParams{ID: id})
		if err != nil || row.State != store.JobStateCompleted {
			return false, err
		}
		if row.AttemptedBy != name {
			return false, fmt.Errorf("job %d completed by %s, want %s", id, row.AttemptedBy, name)
		}
	}
	return true, nil
}

// checkRescued checks that each job of ids kept the outcome of its rescue by
// process name: completed by the second attempt, with its result, and with
// only the first attempt's lease lost in its errors.
func checkRescued(t *testing.T, st store.Store, ids []int64, name string) {
	t.Helper()
	want, _ := json.Marshal(ranBy{By: name})
	for _, id := range ids {
		row, err := st.JobGet(t.Context(), &store.JobGetParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if row.State != store.JobStateCompleted || row.Attempt != 2 || row.AttemptedBy != name || string(row.Result) != string(want) {
			t.Errorf("job %d is %s after attempt %d by %s with result %s; want completed by attempt 2 by %s with result %s",
				id, row.State, row.Attempt, row.AttemptedBy, row.Result, name, want)
		}
		if len(row.Errors) != 1 || row.Errors[0].Message != store.LeaseLostMessage || row.Errors[0].Attempt != 1 {
			t.Errorf("job %d has errors %+v, want only the first attempt's %q", id, row.Errors, store.LeaseLostMessage)
		}
	}
}
