package multiproc

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
	"github.com/sortiehq/sortie/store"
)

// TestRunSignals runs a worker process that works with Client.Run and
// stops it as an operator does, with real signals, one of each default
// kind: after the first (SIGINT, Ctrl-C in a terminal) it takes no new job
// and lets a running one finish; after the second (SIGTERM, as a
// supervisor sends), the jobs still running go back to available with
// their attempt not counted, and the process exits within a second.
func TestRunSignals(t *testing.T) {
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
			testRunSignals(t, st, url)
		})
	}
}

func testRunSignals(t *testing.T, st store.Store, url string) {
	const queue = "drain"
	// Two jobs run until cancelled, one finishes during the drain, two
	// wait behind them (lower priority) and are never claimed.
	ids := enqueue(t, st, []sortie.EnqueueParams{
		{Args: Sleep{For: time.Hour}, Opts: &sortie.EnqueueOpts{Queue: queue, Priority: 1}},
		{Args: Sleep{For: time.Hour}, Opts: &sortie.EnqueueOpts{Queue: queue, Priority: 1}},
		{Args: Sleep{For: 2 * time.Second}, Opts: &sortie.EnqueueOpts{Queue: queue, Priority: 1}},
		{Args: Sleep{For: time.Millisecond}, Opts: &sortie.EnqueueOpts{Queue: queue, Priority: 4}},
		{Args: Sleep{For: time.Millisecond}, Opts: &sortie.EnqueueOpts{Queue: queue, Priority: 4}},
	})
	long, finishing, waiting := ids[:2], ids[2], ids[3:]
	p := startProcEnv(t, t.TempDir(), url, "run-p0", []string{envRun + "=1m"}, queue+":3")
	procs := []*proc{p}
	diag := func() string { return describe(st, procs, queue) }
	// Running in the process, not only claimed: a job claimed but not
	// started when the first signal lands goes back unrun, by design.
	testkit.WaitFor(t, 30*time.Second, "three handlers running", childproc.Watched(procs), diag, func() (bool, error) {
		runs, err := childproc.ReadJournal(p.Journal)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		started := 0
		for _, r := range runs {
			if r.End.IsZero() {
				started++
			}
		}
		return started == 3, nil
	})

	p.Signal(t, syscall.SIGINT)
	testkit.WaitFor(t, 10*time.Second, "the process logs that it drains", childproc.Watched(procs), diag, func() (bool, error) {
		b, err := os.ReadFile(p.Log)
		return strings.Contains(string(b), "stopping: no new jobs"), err
	})
	testkit.WaitFor(t, 10*time.Second, "the running job finishes during the drain", childproc.Watched(procs), diag, func() (bool, error) {
		row, err := st.JobGet(t.Context(), &store.JobGetParams{ID: finishing})
		return err == nil && row.State == store.JobStateCompleted, err
	})
	if p.Exited() {
		t.Fatalf("the process exited (%v) during the drain, with jobs still running", p.Err())
	}

	sent := time.Now()
	p.Signal(t, syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the process still runs 10s after the second SIGTERM\n%s", diag())
	}
	if took := time.Since(sent); took > time.Second {
		t.Errorf("the process exited %s after the second SIGTERM, want within 1s", took)
	}
	if p.Err() != nil {
		t.Errorf("the process exited with %v, want status 0: every interrupted job was put back\n%s", p.Err(), diag())
	}
	for _, id := range append(long, waiting...) {
		row, err := st.JobGet(t.Context(), &store.JobGetParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if row.State != store.JobStateAvailable || row.Attempt != 0 {
			t.Errorf("job %d after the second SIGTERM: state %s attempt %d, want available on attempt 0", id, row.State, row.Attempt)
		}
	}
}
