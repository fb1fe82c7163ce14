package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
)

// A proc is a process a scenario started: the test binary run again as a
// worker or as `sortie serve` (see child_test.go).
type proc struct {
	name    string
	journal string // its journal (workers)
	log     string // its stdout and stderr
	cmd     *exec.Cmd
	done    chan struct{} // closed once it exited and was reaped
	err     error         // cmd.Wait's result, once done is closed

	mu sync.Mutex // guards faults
	// faults are the SIGKILLs, SIGSTOPs and cuts it got, in order.
	faults []procFault
}

// A procFault is a SIGKILL or a SIGSTOP a process got.
type procFault struct {
	what string // "killed" or "stopped"
	// at is when the signal was sent: the process ran nothing after it
	// until resumed (a stop) or ever (a kill).
	at time.Time
}

// startProc starts the test binary as process name, with env (which sets
// envChild) added to this process's environment. The test's cleanup kills
// it by its PID if it still runs, and prints its log if the test failed.
func startProc(t *testing.T, dir, name string, env map[string]string) *proc {
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
	p.cmd.Env = append(os.Environ(), envName+"="+name, envJournal+"="+p.journal)
	if longForm() {
		p.cmd.Env = append(p.cmd.Env, envLong+"=long")
	}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start process %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			// A stopped process takes SIGKILL too; SIGCONT is for form.
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- log of process %s (%v):\n%s", p.name, p.err, tail(p.log, 40))
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

// exitedBadly reports whether p exited other than with status 0 and
// without being killed by a scenario.
func (p *proc) exitedBadly() bool {
	return p.exited() && p.err != nil && !p.killed()
}

func (p *proc) killed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.faults {
		if f.what == "killed" {
			return true
		}
	}
	return false
}

func (p *proc) signal(t *testing.T, what string, sig syscall.Signal) {
	t.Helper()
	p.mu.Lock()
	p.faults = append(p.faults, procFault{what: what, at: time.Now()})
	p.mu.Unlock()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v to process %s: %v", sig, p.name, err)
	}
}

// cutOff records that p's link to its store was cut (the proxy holds its
// bytes): like a SIGSTOP, it explains a second run of a job p had started.
func (p *proc) cutOff() {
	p.mu.Lock()
	p.faults = append(p.faults, procFault{what: "cut off", at: time.Now()})
	p.mu.Unlock()
}

// kill kills p with SIGKILL and waits until it is gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("process %s exited before it was killed (%v); its log:\n%s", p.name, p.err, tail(p.log, 30))
	}
	p.signal(t, "killed", syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("process %s still running 10s after SIGKILL", p.name)
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("process %s ended with %v before it was killed; its log:\n%s", p.name, p.err, tail(p.log, 30))
	}
}

// pause stops p with SIGSTOP.
func (p *proc) pause(t *testing.T) { t.Helper(); p.signal(t, "stopped", syscall.SIGSTOP) }

// resume continues p after pause.
func (p *proc) resume(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT to process %s: %v", p.name, err)
	}
}

// stop asks p to stop gracefully (SIGTERM), unless it exited already, and
// waits for it. It fails t unless the process exited with status 0.
func (p *proc) stop(t *testing.T, timeout time.Duration) {
	t.Helper()
	if !p.exited() {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("SIGTERM to process %s: %v", p.name, err)
		}
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("process %s did not exit within %s of SIGTERM; its log:\n%s", p.name, timeout, tail(p.log, 30))
	}
	if p.err != nil {
		t.Errorf("process %s exited with %v, want status 0; its log:\n%s", p.name, p.err, tail(p.log, 30))
	}
}

// explains reports whether a fault of p explains that run r, of p, ran
// again as next, so that r's lease could expire while r had not finished:
// p was killed before next started (every run of a killed process began
// before its death), or it was stopped after r started and before next
// started.
func (p *proc) explains(r, next *run) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.faults {
		switch {
		case !f.at.Before(next.start):
		case f.what == "killed", f.at.After(r.start):
			return true
		}
	}
	return false
}

// Failure returns why p exited badly (not by a kill the scenario sent), or
// nil: a wait on p gives up at once then (testkit.WaitFor).
func (p *proc) Failure() error {
	if !p.exitedBadly() {
		return nil
	}
	return fmt.Errorf("process %s exited with %v; its log:\n%s", p.name, p.err, tail(p.log, 30))
}

// watched returns procs as what testkit.WaitFor watches.
func watched(procs []*proc) []testkit.Watched {
	w := make([]testkit.Watched, len(procs))
	for i, p := range procs {
		w[i] = p
	}
	return w
}

// tail returns the last n lines of the file at path, for failure messages.
func tail(path string, n int) string {
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

// logLines returns the lines of the log at path whose message is msg.
func logLines(path, msg string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	want := "msg=" + quoteLogValue(msg)
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.Contains(line, want) {
			out = append(out, line)
		}
	}
	return out
}

// quoteLogValue quotes s as slog's text handler writes a value.
func quoteLogValue(s string) string {
	if strings.ContainsAny(s, " =\"") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// warnings returns the messages p logged at WARN or ERROR, in the order
// first logged, with how many times each was. perJob says to count only
// the lines about one job (with a job_id), or only the others.
func (p *proc) warnings(perJob bool) (msgs []string, count map[string]int) {
	data, _ := os.ReadFile(p.log)
	count = make(map[string]int)
	for line := range strings.SplitSeq(string(data), "\n") {
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") ||
			strings.Contains(line, " job_id=") != perJob {
			continue
		}
		msg := line
		if i := strings.Index(line, "msg="); i >= 0 {
			msg = line[i+len("msg="):]
			if s, err := strconv.QuotedPrefix(msg); err == nil {
				msg = s
			} else if j := strings.IndexByte(msg, ' '); j >= 0 {
				msg = msg[:j]
			}
		}
		if count[msg] == 0 {
			msgs = append(msgs, msg)
		}
		count[msg]++
	}
	return msgs, count
}

// warningList describes p's warnings, for logs and failure messages.
func (p *proc) warningList() string {
	var items []string
	for _, perJob := range []bool{false, true} {
		msgs, count := p.warnings(perJob)
		for _, m := range msgs {
			items = append(items, fmt.Sprintf("%s ×%d", m, count[m]))
		}
	}
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, "; ")
}
