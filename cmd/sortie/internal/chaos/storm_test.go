package chaos

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
)

// The storm's workload.
const (
	stormQueue   = "storm"
	stormProcs   = 3
	stormWorkers = 4
	// Every stormLongEvery-th job runs for stormLongJob, so a killed
	// process has jobs in flight; the others run 5 to 20 ms.
	stormLongEvery = 25
	stormLongJob   = 400 * time.Millisecond
)

// TestKillStorm runs jobs in three worker processes while one of them is
// killed with SIGKILL every 1–3 s and started again, as a supervisor
// would. In the end every job completed exactly once in the store, every
// duplicate run belongs to a process killed while it ran, and no claim ran
// twice.
func TestKillStorm(t *testing.T) {
	t.Parallel()
	for _, b := range multiProcess() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			heavy(t)
			testKillStorm(t, b)
		})
	}
}

func testKillStorm(t *testing.T, b *backend) {
	c := newCounts(t, "kill -9 storm", b.name)
	tg := b.make(t)
	jobs := pick(3000, 30000)
	maxKills := pick(4, 1<<30)
	enqueueSleeps(t, tg.st, stormQueue, jobs, func(i int) Sleep {
		if i%stormLongEvery == 0 {
			return Sleep{For: stormLongJob}
		}
		return Sleep{For: time.Duration(5+5*(i%4)) * time.Millisecond}
	})
	c.enqueued = jobs

	dir := t.TempDir()
	env := workerEnv(tg, b.lease, fmt.Sprintf("%s:%d", stormQueue, stormWorkers))
	var all []*proc
	slots := make([]*proc, stormProcs)
	incarnation := make([]int, stormProcs)
	startSlot := func(i int) {
		incarnation[i]++
		slots[i] = startProc(t, dir, childWorker, fmt.Sprintf("storm-p%d.%d", i, incarnation[i]), env)
		all = append(all, slots[i])
	}
	for i := range slots {
		startSlot(i)
	}
	diag := func() string { return describe(tg.st, slots, stormQueue) }

	// The storm lasts until maxKills kills, or until nine jobs in ten
	// completed: the last ones are left to finish in peace.
	c.kills = 0
	for c.kills < maxKills {
		pause := time.NewTimer(time.Second + rand.N(2*time.Second))
		<-pause.C
		done, err := completedCount(t.Context(), tg.st, stormQueue)
		if err != nil {
			t.Fatal(err)
		}
		if done >= jobs*9/10 {
			break
		}
		for _, p := range slots {
			if p.ExitedBadly() {
				t.Fatalf("worker process %s exited with %v; its log:\n%s", p.Name, p.Err(), childproc.Tail(p.Log, 30))
			}
		}
		victim := rand.N(stormProcs)
		slots[victim].Kill(t)
		c.kills++
		startSlot(victim)
	}
	t.Logf("%d kills; waiting for the last jobs", c.kills)
	testkit.WaitFor(t, 3*b.lease+pick(time.Minute, 10*time.Minute), fmt.Sprintf("all %d jobs completed", jobs), childproc.Watched(slots), diag, func() (bool, error) {
		done, err := completedCount(t.Context(), tg.st, stormQueue)
		return done == jobs, err
	})
	for _, p := range slots {
		p.Stop(t, 30*time.Second)
	}
	account(t, c, tg.st, stormQueue, all)
	if c.kills > 0 && c.duplicates == 0 {
		t.Logf("no kill caught a job running")
	}
}
