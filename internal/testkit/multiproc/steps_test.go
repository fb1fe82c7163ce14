package multiproc

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
)

// A worker process killed with SIGKILL after step 2 of 3 of a job: once
// the job is rescued and runs in another process, steps 1 and 2 return
// their recorded results without running again, and step 3 runs once. On
// every store worker processes share: SQLite, PostgreSQL, Redis and a
// Redis Cluster.
func TestStepsSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	cases := append(storeCases[:len(storeCases):len(storeCases)], struct {
		name string
		url  func(t testing.TB) string
	}{name: "redis-cluster", url: redistest.ClusterStoreURL})
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testStepsKill(t, tt.url(t))
		})
	}
}

func testStepsKill(t *testing.T, url string) {
	ctx := t.Context()
	st, closeStore, err := openStore(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeStore() })
	dir := t.TempDir()
	id := enqueue(t, st, []sortie.EnqueueParams{{Args: Stepped{}, Opts: &sortie.EnqueueOpts{Queue: "steps"}}})[0]

	victim := startProcEnv(t, dir, url, "steps-p0", []string{envHold + "=1"}, "steps:1")
	procs := []*proc{victim}
	diag := func() string { return describe(st, procs, "steps") }
	testkit.WaitFor(t, 30*time.Second, "step 2 recorded in "+victim.Name, childproc.Watched(procs), diag, func() (bool, error) {
		list, err := st.StepList(ctx, &store.StepListParams{ID: id})
		return len(list) == 2, err
	})
	victim.Kill(t)

	rescuer := startProc(t, dir, url, "steps-p1", "steps:1")
	procs = append(procs, rescuer)
	testkit.WaitFor(t, 60*time.Second, "the job completed after the rescue", childproc.Watched(procs[1:]), diag, func() (bool, error) {
		row, err := st.JobGet(ctx, &store.JobGetParams{ID: id})
		return err == nil && row.State == store.JobStateCompleted, err
	})
	rescuer.Stop(t, 30*time.Second)

	runs := map[string][]string{}
	for _, p := range procs {
		data, err := os.ReadFile(p.Journal + ".steps")
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if f := strings.Fields(line); len(f) == 4 {
				runs[f[1]] = append(runs[f[1]], "attempt "+f[2]+" in "+f[3])
			}
		}
	}
	want := map[string]string{"step-1": "attempt 1 in steps-p0", "step-2": "attempt 1 in steps-p0", "step-3": "attempt 2 in steps-p1"}
	for name, where := range want {
		if got := runs[name]; len(got) != 1 || got[0] != where {
			t.Errorf("%s ran %v, want once: %s", name, got, where)
		}
	}
	row, err := st.JobGet(ctx, &store.JobGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if row.Attempt != 2 || len(row.Errors) != 1 || row.Errors[0].Message != store.LeaseLostMessage || len(row.Steps) != 3 {
		t.Errorf("job after the rescue: attempt %d, errors %v, %d steps; want attempt 2, the lost lease, 3 steps", row.Attempt, row.Errors, len(row.Steps))
	}
}
