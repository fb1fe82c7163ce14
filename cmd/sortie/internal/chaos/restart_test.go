package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
)

// A restarter is an outage that can crash the store's server and start it
// again.
type restarter interface {
	restart(t *testing.T, down time.Duration)
}

// The messages of a store outage in a worker's log (internal/health): one
// when it starts, one when it is over; msgFull and msgRoom for a store
// that has no room.
const (
	msgUnreachable = "store unreachable, backing off"
	msgReachable   = "store reachable again"
	msgFull        = "store full, backing off"
	msgRoom        = "store has room again"
)

const restartQueue = "restart"

// TestDatabaseRestart crashes the database server (immediate shutdown) and
// starts it again, twice, while three worker processes work through jobs:
// no job is lost, the workers recover, and each logs each outage once, not
// on every retry. No lease can expire (the server is back well within
// one), so no job may run twice.
func TestDatabaseRestart(t *testing.T) {
	t.Parallel()
	for _, b := range multiProcess() {
		for _, f := range b.faults {
			if f.kind != faultServer {
				continue
			}
			t.Run(b.name, func(t *testing.T) {
				t.Parallel()
				heavy(t)
				testDatabaseRestart(t, b, f)
			})
		}
	}
}

func testDatabaseRestart(t *testing.T, b *backend, f fault) {
	c := newCounts(t, "database restarts", b.name)
	tg := f.make(t, b)
	srv, ok := tg.outage.(restarter)
	if !ok {
		t.Fatalf("the outage of a %s fault of %s cannot restart the server", f.kind, b.name)
	}
	jobs := pick(1500, 20000)
	restarts := pick(2, 6)
	down := pick(time.Second, 3*time.Second)
	enqueueSleeps(t, tg.st, restartQueue, jobs, func(i int) Sleep {
		if i%stormLongEvery == 0 {
			return Sleep{For: stormLongJob}
		}
		return Sleep{For: time.Duration(5+5*(i%4)) * time.Millisecond}
	})
	c.enqueued = jobs

	dir := t.TempDir()
	env := workerEnv(tg, b.lease, fmt.Sprintf("%s:%d", restartQueue, stormWorkers))
	var procs []*proc
	for i := range stormProcs {
		procs = append(procs, startProc(t, dir, childWorker, fmt.Sprintf("restart-p%d", i), env))
	}
	diag := func() string { return describe(tg.st, procs, restartQueue) }
	completedAtLeast := func(n int) func() (bool, error) {
		return func() (bool, error) {
			done, err := completedCount(t.Context(), tg.st, restartQueue)
			return done >= n, err
		}
	}
	// Each restart waits for the workers to have made progress since the
	// last: they recovered from it, and the outages are apart.
	c.faults = 0
	for i := 1; i <= restarts; i++ {
		at := i * jobs / (restarts + 1)
		testkit.WaitFor(t, time.Minute, fmt.Sprintf("%d jobs completed", at), childproc.Watched(procs), diag, completedAtLeast(at))
		srv.restart(t, down)
		c.faults++
	}
	testkit.WaitFor(t, 3*b.lease+pick(time.Minute, 10*time.Minute), fmt.Sprintf("all %d jobs completed", jobs), childproc.Watched(procs), diag, completedAtLeast(jobs))
	for _, p := range procs {
		p.Stop(t, 30*time.Second)
	}
	account(t, c, tg.st, restartQueue, procs)
	for _, p := range procs {
		t.Logf("warnings of %s: %s", p.Name, warningList(p))
		down, up := len(logLines(p.Log, msgUnreachable)), len(logLines(p.Log, msgReachable))
		if down < 1 || up != down {
			t.Errorf("process %s logged %q %d times and %q %d times through %d restarts, want each once per restart (or once for restarts that ran together)",
				p.Name, msgUnreachable, down, msgReachable, up, restarts)
		}
		// Any report not about one job is about the store: once per
		// outage, not on every retry.
		msgs, count := warnings(p, false)
		for _, m := range msgs {
			if count[m] > restarts {
				t.Errorf("process %s logged %s %d times through %d restarts, want at most once per restart; its log:\n%s",
					p.Name, m, count[m], restarts, childproc.Tail(p.Log, 40))
			}
		}
	}
}
