package childproc

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/store"
	"go.uber.org/goleak"
)

// The roles of this package's own children.
var roles = map[string]func() int{
	// journal writes two whole runs, one run without its end and a line
	// cut short, says "ready", and exits 0 on SIGTERM.
	"journal": func() int {
		j, err := OpenJournal()
		if err != nil {
			fmt.Println(err)
			return 1
		}
		claimed := time.Unix(100, 0)
		rows := []*store.JobRow{
			{ID: 7, Attempt: 1, ClaimToken: 70, AttemptedAt: claimed},
			{ID: 8, Attempt: 2, ClaimToken: 80, AttemptedAt: claimed},
			{ID: 9, Attempt: 1, ClaimToken: 90, AttemptedAt: claimed},
		}
		err = errorsOf(j.Start(rows[0]), j.Start(rows[1]), j.End(rows[1], true), j.End(rows[0], false), j.Start(rows[2]))
		if err == nil {
			err = appendFile(JournalPath(), "start 10 1 100 "+Name())
		}
		if err != nil {
			fmt.Println(err)
			return 1
		}
		return readyUntilTerm()
	},
	// wait says "ready" and exits 0 on SIGTERM.
	"wait": readyUntilTerm,
	// fail exits with status 3.
	"fail": func() int { return 3 },
}

func errorsOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	return errorsOf(err, f.Close())
}

func readyUntilTerm() int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	fmt.Println("ready")
	<-term
	return 0
}

func TestMain(m *testing.M) {
	Main(roles)
	goleak.VerifyTestMain(m)
}

// waitReady waits until p says it is ready.
func waitReady(t *testing.T, p *Proc) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, p.Name+" is ready", []testkit.Watched{p}, nil, func() (bool, error) {
		data, err := os.ReadFile(p.Log)
		return strings.Contains(string(data), "ready\n"), err
	})
}

func TestJournalRoundTrip(t *testing.T) {
	p := Start(t, t.TempDir(), "journal", "j0")
	waitReady(t, p)
	p.Stop(t, 10*time.Second)
	byJob, err := RunsByJob([]*Proc{p})
	if err != nil {
		t.Fatal(err)
	}
	if len(byJob) != 3 {
		t.Fatalf("runs of %d jobs, want 3 (the line cut short ignored): %v", len(byJob), byJob)
	}
	for _, want := range []struct {
		job, token int64
		attempt    int
		ended      bool
		cancelled  bool
	}{{7, 70, 1, true, false}, {8, 80, 2, true, true}, {9, 90, 1, false, false}} {
		runs := byJob[want.job]
		if len(runs) != 1 {
			t.Fatalf("job %d: runs %v, want one", want.job, runs)
		}
		r := runs[0]
		if r.Proc != "j0" || r.Attempt != want.attempt || r.Token != want.token ||
			!r.Claimed.Equal(time.Unix(100, 0)) || r.Start.Before(p.Started) ||
			r.End.IsZero() == want.ended || r.Cancelled != want.cancelled ||
			want.ended && r.End.Before(r.Start) {
			t.Errorf("job %d: %v, want attempt %d, claim %d, claimed at 100 s, ended %v, cancelled %v",
				want.job, r, want.attempt, want.token, want.ended, want.cancelled)
		}
	}
}

func TestReadJournalRejects(t *testing.T) {
	for _, tt := range []struct{ name, text, want string }{
		{"started twice", "start 1 1 5 p 10 11\nstart 1 1 5 p 10 12\n", "claim 5 of job 1 started twice"},
		{"end without start", "end 1 1 5 p 10 ok\n", "end of claim 5 of job 1 without its start"},
		{"ended twice", "start 1 1 5 p 10 11\nend 1 1 5 p 12 ok\nend 1 1 5 p 13 ok\n", "without its start"},
		{"short line", "start 1 1 5 p 10\n", "want start or end and 6 fields"},
		{"bad number", "start 1 x 5 p 10 11\n", "invalid syntax"},
	} {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.journal")
			if err := os.WriteFile(path, []byte(tt.text), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadJournal(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReadJournal(%q) = %v, want an error saying %q", tt.text, err, tt.want)
			}
		})
	}
}

func TestRunsByJobRejectsAnotherProcessLine(t *testing.T) {
	p := Start(t, t.TempDir(), "wait", "w0")
	waitReady(t, p)
	if err := appendFile(p.Journal, "start 1 1 5 other 10 11\n"); err != nil {
		t.Fatal(err)
	}
	p.Stop(t, 10*time.Second)
	if _, err := RunsByJob([]*Proc{p}); err == nil || !strings.Contains(err.Error(), "journal of w0 has a line of process other") {
		t.Errorf("RunsByJob = %v, want an error naming the other process", err)
	}
}

func TestKillIsAFaultNotAFailure(t *testing.T) {
	p := Start(t, t.TempDir(), "wait", "k0")
	waitReady(t, p)
	p.Pause(t)
	p.Resume(t)
	p.Kill(t)
	if !p.Exited() || !p.Killed() || p.ExitedBadly() || p.Failure() != nil {
		t.Errorf("after Kill: exited %v, killed %v, exited badly %v, failure %v; want killed, not a failure",
			p.Exited(), p.Killed(), p.ExitedBadly(), p.Failure())
	}
	faults := p.Faults()
	if len(faults) != 2 || faults[0].What != "stopped" || faults[1].What != "killed" || faults[1].At.Before(faults[0].At) {
		t.Errorf("faults %v, want stopped, then killed", faults)
	}
}

func TestFailureNamesTheExit(t *testing.T) {
	p := Start(t, t.TempDir(), "fail", "f0")
	testkit.WaitFor(t, 30*time.Second, "f0 exited", nil, nil, func() (bool, error) { return p.Exited(), nil })
	if err := p.Failure(); err == nil || !strings.Contains(err.Error(), "process f0 exited with exit status 3") {
		t.Errorf("Failure() = %v, want it to name the process and its exit status", err)
	}
}
