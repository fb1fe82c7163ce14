package chaos

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sortiehq/sortie/internal/testkit/childproc"
)

// A proc is a process a scenario started (childproc.Start): the test
// binary run again as a worker or as `sortie serve` (see child_test.go).
type proc = childproc.Proc

// A run is one run of a worker's handler, as its journal tells it.
type run = childproc.Run

// startProc starts the test binary as process name in role (childWorker or
// childServe), with env added to this process's environment. The test's
// cleanup kills it if it still runs, and prints its log if the test failed.
func startProc(t *testing.T, dir, role, name string, env map[string]string) *proc {
	t.Helper()
	var list []string
	if longForm() {
		list = append(list, envLong+"=long")
	}
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	return childproc.Start(t, dir, role, name, list...)
}

// explains reports whether a fault of p explains that run r, of p, ran
// again as next, so that r's lease could expire while r had not finished:
// p was killed before next started (every run of a killed process began
// before its death), or it was stopped after r started and before next
// started.
func explains(p *proc, r, next *run) bool {
	for _, f := range p.Faults() {
		switch {
		case !f.At.Before(next.Start):
		case f.What == "killed", f.At.After(r.Start):
			return true
		}
	}
	return false
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
func warnings(p *proc, perJob bool) (msgs []string, count map[string]int) {
	data, _ := os.ReadFile(p.Log)
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
func warningList(p *proc) string {
	var items []string
	for _, perJob := range []bool{false, true} {
		msgs, count := warnings(p, perJob)
		for _, m := range msgs {
			items = append(items, fmt.Sprintf("%s ×%d", m, count[m]))
		}
	}
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, "; ")
}
