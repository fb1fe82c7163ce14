package chaos

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
	"github.com/sortiehq/sortie/internal/testkit/delayproxy"
)

// TestHostCutOff cuts a worker process off from its store, as a host whose
// link goes down, while it runs jobs: every byte between them waits in a
// proxy for longer than the process's lease. Another process rescues the
// jobs and completes them; when the link comes back, what the cut-off
// process sent meanwhile and afterwards (lease extensions, outcomes)
// reaches the store late and is refused by fencing. Nothing is lost and
// every job keeps its rescued attempt's outcome. Stores reached over the
// network only: a SQLite file has no link to cut.
func TestHostCutOff(t *testing.T) {
	t.Parallel()
	for _, b := range multiProcess() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			heavy(t)
			tg := b.make(t)
			u, err := url.Parse(tg.url)
			if err != nil || u.Host == "" {
				t.Skipf("the %s store is not reached over a network (%q): there is no link to cut", b.name, tg.url)
			}
			testHostCutOff(t, tg, u)
		})
	}
}

func testHostCutOff(t *testing.T, tg *target, u *url.URL) {
	c := newCounts(t, "host cut off", tg.b.name)
	p, err := delayproxy.Start(u.Host, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	far := *u
	far.Host = p.Addr()
	cutTarget := &target{b: tg.b, url: far.String(), st: tg.st}
	dir := t.TempDir()
	queues := fmt.Sprintf("%s:%d", fenceQueue, fenceHeld)
	cutOff := startProc(t, dir, childWorker, "cut-a", workerEnv(cutTarget, fenceLease, queues))
	// The first attempt outlasts the cut; the rescued one is quick.
	ids := enqueueSleeps(t, tg.st, fenceQueue, fenceHeld, func(int) Sleep {
		return Sleep{FirstFor: 4 * fenceLease, For: 50 * time.Millisecond}
	})
	c.enqueued = len(ids)
	var all []*proc
	diag := func() string { return describe(tg.st, append(all, cutOff), fenceQueue) }
	testkit.WaitFor(t, 30*time.Second, cutOff.Name+" runs every job", []testkit.Watched{cutOff}, diag, func() (bool, error) {
		runs, err := childproc.ReadJournal(cutOff.Journal)
		return len(runs) == len(ids), err
	})
	p.Cut()
	// Like a SIGSTOP, the cut explains a second run of a job cutOff had
	// started.
	cutOff.Note("cut off")
	c.faults++
	rescuer := startProc(t, dir, childWorker, "cut-b", workerEnv(tg, fenceLease, queues))
	testkit.WaitFor(t, 3*fenceLease+30*time.Second, rescuer.Name+" completed every job", []testkit.Watched{rescuer}, diag, func() (bool, error) {
		return allCompletedBy(t.Context(), tg.st, ids, rescuer.Name)
	})
	p.Restore()
	testkit.WaitFor(t, 30*time.Second, cutOff.Name+"'s late outcomes refused", []testkit.Watched{cutOff, rescuer}, diag, func() (bool, error) {
		return len(logLines(cutOff.Log, msgDiscarded)) == len(ids), nil
	})
	cutOff.Stop(t, 30*time.Second)
	rescuer.Stop(t, 30*time.Second)
	all = append(all, cutOff, rescuer)
	c.refused = len(logLines(cutOff.Log, msgDiscarded))
	checkRescued(t, tg.st, ids, rescuer.Name)
	account(t, c, tg.st, fenceQueue, all)
	if c.explained != c.enqueued {
		t.Errorf("%d runs were cut short by the cut, want one per job (%d)", c.explained, c.enqueued)
	}
}
