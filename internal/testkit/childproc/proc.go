package childproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
)

// A Proc is a child process a test started with Start.
type Proc struct {
	// Name is the name it was started under.
	Name string
	// Journal is the path of its journal (see Journal).
	Journal string
	// Log is the path of the file that takes its stdout and stderr.
	Log string
	// Started is when it was started.
	Started time.Time

	cmd  *exec.Cmd
	done chan struct{} // closed once it exited and was reaped
	err  error         // cmd.Wait's result, once done is closed

	mu     sync.Mutex // guards faults
	faults []Fault
}

// A Fault is something done to a process that may explain a run of a job
// it started running again elsewhere: a SIGKILL, a SIGSTOP, a cut link.
type Fault struct {
	// What it was: "killed" and "stopped" for Kill and Pause; what Note
	// was given otherwise.
	What string
	// At is when it was done: the process ran nothing after it until
	// resumed (a stop) or ever (a kill).
	At time.Time
}

// Start starts the test binary as a child in role, under name, with env
// ("NAME=value") added to this process's environment. Its journal and log
// are dir/name.journal (created empty here, so that a child that never ran
// a job has an empty one) and dir/name.log. The test's cleanup kills the
// child if it still runs, and prints its log if the test failed.
func Start(t testing.TB, dir, role, name string, env ...string) *Proc {
	t.Helper()
	p := &Proc{
		Name:    name,
		Journal: filepath.Join(dir, name+".journal"),
		Log:     filepath.Join(dir, name+".log"),
		done:    make(chan struct{}),
	}
	if err := os.WriteFile(p.Journal, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(exe)
	p.cmd.Env = append(os.Environ(), envRole+"="+role, envName+"="+name, envJournal+"="+p.Journal)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.Started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start process %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			// A stopped process takes SIGKILL too; SIGCONT is for form.
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- log of process %s (%v):\n%s", p.Name, p.err, Tail(p.Log, 40))
		}
	})
	return p
}

// Done is closed once the process exited and was reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err returns how the process exited (exec.Cmd.Wait's result) once Done is
// closed, and nil before.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Exited reports whether the process exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitedBadly reports whether the process exited other than with status 0
// and without being killed by Kill.
func (p *Proc) ExitedBadly() bool {
	return p.Exited() && p.err != nil && !p.Killed()
}

// Killed reports whether Kill killed the process.
func (p *Proc) Killed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.faults {
		if f.What == "killed" {
			return true
		}
	}
	return false
}

// Faults returns the faults done to the process, in order.
func (p *Proc) Faults() []Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Fault(nil), p.faults...)
}

// Note records a fault done to the process other than by a signal: that
// its link to its store was cut, say.
func (p *Proc) Note(what string) {
	p.mu.Lock()
	p.faults = append(p.faults, Fault{What: what, At: time.Now()})
	p.mu.Unlock()
}

// Signal sends sig to the process, failing t if it cannot.
func (p *Proc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v to process %s: %v", sig, p.Name, err)
	}
}

// fault records fault what and sends sig.
func (p *Proc) fault(t testing.TB, what string, sig syscall.Signal) {
	t.Helper()
	p.Note(what)
	p.Signal(t, sig)
}

// Kill kills the process with SIGKILL and waits until it is gone. It fails
// t if the process had exited before, or ended other than by the SIGKILL.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	if p.Exited() {
		t.Fatalf("process %s exited before it was killed (%v); its log:\n%s", p.Name, p.err, Tail(p.Log, 30))
	}
	p.fault(t, "killed", syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("process %s still running 10s after SIGKILL", p.Name)
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("process %s ended with %v before it was killed; its log:\n%s", p.Name, p.err, Tail(p.Log, 30))
	}
}

// Pause stops the process with SIGSTOP.
func (p *Proc) Pause(t testing.TB) {
	t.Helper()
	p.fault(t, "stopped", syscall.SIGSTOP)
}

// Resume continues the process after Pause.
func (p *Proc) Resume(t testing.TB) {
	t.Helper()
	p.Signal(t, syscall.SIGCONT)
}

// Stop asks the process to stop gracefully (SIGTERM), unless it exited
// already, and waits up to timeout for it. It fails t unless the process
// exited with status 0.
func (p *Proc) Stop(t testing.TB, timeout time.Duration) {
	t.Helper()
	if !p.Exited() {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("SIGTERM to process %s: %v", p.Name, err)
		}
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("process %s did not exit within %s of SIGTERM; its log:\n%s\nits journal:\n%s",
			p.Name, timeout, Tail(p.Log, 30), Tail(p.Journal, 10))
	}
	if p.err != nil {
		t.Errorf("process %s exited with %v, want status 0; its log:\n%s", p.Name, p.err, Tail(p.Log, 30))
	}
}

// Failure returns why the process exited badly (see ExitedBadly), or nil:
// a wait that watches it gives up at once then (testkit.WaitFor).
func (p *Proc) Failure() error {
	if !p.ExitedBadly() {
		return nil
	}
	return fmt.Errorf("process %s exited with %v; its log:\n%s", p.Name, p.err, Tail(p.Log, 30))
}

// Watched returns procs as what testkit.WaitFor watches.
func Watched(procs []*Proc) []testkit.Watched {
	w := make([]testkit.Watched, len(procs))
	for i, p := range procs {
		w[i] = p
	}
	return w
}

// Tail returns the last n lines of the file at path, for failure messages.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... %d lines before", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
