package multiproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/store"
)

// proc is a worker process started by a test.
type proc struct {
	name    string
	journal string
	log     string // the process's stdout and stderr
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process exited and was reaped
	err     error         // cmd.Wait's result, once done is closed
	started time.Time
}

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
	p := &proc{
		name:    name,
		journal: filepath.Join(dir, name+".journal"),
		log:     filepath.Join(dir, name+".log"),
		done:    make(chan struct{}),
	}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(exe)
	p.cmd.Env = append(os.Environ(),
		envChild+"="+name,
		envStore+"="+url,
		envJournal+"="+p.journal,
		envQueues+"="+strings.Join(queues, ","),
	)
	// A binary built with -race sleeps a second before it exits
	// (GORACE's atexit_sleep_ms): the tests time how soon a worker exits.
	p.cmd.Env = append(p.cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start worker process %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- log of worker process %s (%v):\n%s", p.name, p.err, tail(p.log, 40))
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks p to stop gracefully (SIGTERM), unless it exited already, and
// waits for it. It fails t unless the process exited with status 0.
func (p *proc) stop(t testing.TB, timeout time.Duration) {
	t.Helper()
	if !p.exited() {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("SIGTERM to worker process %s: %v", p.name, err)
		}
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("worker process %s did not exit within %s of SIGTERM; its log:\n%s\nits journal:\n%s",
			p.name, timeout, tail(p.log, 30), tail(p.journal, 10))
	}
	if p.err != nil {
		t.Errorf("worker process %s exited with %v, want status 0; its log:\n%s", p.name, p.err, tail(p.log, 30))
	}
}

// kill kills p with SIGKILL and waits until it is gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL to worker process %s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("worker process %s still running 10s after SIGKILL", p.name)
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("worker process %s ended with %v before it was killed; its log:\n%s", p.name, p.err, tail(p.log, 30))
	}
}

// Failure returns why p exited with an error, or nil: a wait on p gives
// up at once then (testkit.WaitFor).
func (p *proc) Failure() error {
	if !p.exited() || p.err == nil {
		return nil
	}
	return fmt.Errorf("worker process %s exited with %v", p.name, p.err)
}

// watched returns procs as what testkit.WaitFor watches.
func watched(procs []*proc) []testkit.Watched {
	w := make([]testkit.Watched, len(procs))
	for i, p := range procs {
		w[i] = p
	}
	return w
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
		if p.exited() {
			state = fmt.Sprintf("exited: %v", p.err)
		}
		fmt.Fprintf(&b, "--- process %s (%s), journal tail:\n%s\n--- its log tail:\n%s\n",
			p.name, state, tail(p.journal, 5), tail(p.log, 15))
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
	byJob := make(map[int64][]*attempt)
	for _, p := range procs {
		atts, err := readJournal(p.journal)
		if err != nil {
			t.Fatalf("read journal of %s: %v", p.name, err)
		}
		for _, a := range atts {
			if a.proc != p.name {
				t.Fatalf("journal of %s has a line of process %s", p.name, a.proc)
			}
			byJob[a.job] = append(byJob[a.job], a)
		}
	}
	for _, atts := range byJob {
		sort.Slice(atts, func(i, j int) bool { return atts[i].start.Before(atts[j].start) })
	}
	return byJob
}
