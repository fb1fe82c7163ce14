package multiproc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sortiehq/sortie/store"
)

// A journal is one worker process's record of the attempts it ran: a line
// when an attempt starts, written before the handler does its work, and a
// line when it ends. Each line goes to the file in one write(2), unbuffered,
// so a process killed with SIGKILL loses nothing the kernel had received.
//
//	start <job> <attempt> <claim token> <process> <claimed at> <started at>
//	end <job> <attempt> <claim token> <process> <ended at> <ok|cancelled>
//
// Times are Unix nanoseconds of the wall clock; all processes run on one
// machine, so their clocks compare.
type journal struct {
	path string
	proc string
	mu   sync.Mutex // guards f: one line, one write
	f    *os.File
}

func openJournal(path, proc string) (*journal, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &journal{path: path, proc: proc, f: f}, nil
}

func (j *journal) write(line string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err := j.f.Write([]byte(line))
	return err
}

// start records that attempt row.Attempt of row.ID begins now.
func (j *journal) start(row *store.JobRow) error {
	return j.write(fmt.Sprintf("start %d %d %d %s %d %d\n",
		row.ID, row.Attempt, row.ClaimToken, j.proc, row.AttemptedAt.UnixNano(), time.Now().UnixNano()))
}

// end records that the attempt ended now; cancelled says its context was
// cancelled first (lease lost, or the stop deadline).
func (j *journal) end(row *store.JobRow, cancelled bool) error {
	how := "ok"
	if cancelled {
		how = "cancelled"
	}
	return j.write(fmt.Sprintf("end %d %d %d %s %d %s\n",
		row.ID, row.Attempt, row.ClaimToken, j.proc, time.Now().UnixNano(), how))
}

func (j *journal) close() error { return j.f.Close() }

// attempt is one attempt as the journals tell it.
type attempt struct {
	proc    string
	job     int64
	attempt int
	token   int64
	claimed time.Time // the store's AttemptedAt, as the fetch returned it
	start   time.Time
	end     time.Time // zero when the journal has no end line
	// cancelled: the handler's context was cancelled before it finished.
	cancelled bool
}

func (a *attempt) String() string {
	end := "no end"
	if !a.end.IsZero() {
		end = "ended " + a.end.Format("15:04:05.000000")
		if a.cancelled {
			end += " (cancelled)"
		}
	}
	return fmt.Sprintf("job %d attempt %d (token %d) in %s: claimed %s, started %s, %s",
		a.job, a.attempt, a.token, a.proc, a.claimed.Format("15:04:05.000000"), a.start.Format("15:04:05.000000"), end)
}

// readJournal parses the journal at path and returns its attempts in the
// order they started. A last line without its newline (the process was
// killed while writing it) is ignored; anything else malformed is an error.
func readJournal(path string) ([]*attempt, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(data, '\n'); i+1 < len(data) {
		data = data[:i+1]
	}
	type key struct {
		proc  string
		job   int64
		token int64
	}
	var out []*attempt
	open := make(map[key]*attempt)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		bad := func(err error) error { return fmt.Errorf("%s:%d: %q: %v", path, n, sc.Text(), err) }
		if len(f) < 7 || (f[0] != "start" && f[0] != "end") {
			return nil, bad(fmt.Errorf("want start or end and 6 fields"))
		}
		job, err1 := strconv.ParseInt(f[1], 10, 64)
		att, err2 := strconv.Atoi(f[2])
		tok, err3 := strconv.ParseInt(f[3], 10, 64)
		t1, err4 := strconv.ParseInt(f[5], 10, 64)
		if err := firstErr(err1, err2, err3, err4); err != nil {
			return nil, bad(err)
		}
		k := key{f[4], job, tok}
		switch f[0] {
		case "start":
			t2, err := strconv.ParseInt(f[6], 10, 64)
			if err != nil {
				return nil, bad(err)
			}
			if open[k] != nil {
				return nil, bad(fmt.Errorf("second start of one claim"))
			}
			a := &attempt{proc: f[4], job: job, attempt: att, token: tok, claimed: time.Unix(0, t1), start: time.Unix(0, t2)}
			open[k] = a
			out = append(out, a)
		case "end":
			a := open[k]
			if a == nil || !a.end.IsZero() {
				return nil, bad(fmt.Errorf("end without its start"))
			}
			a.end = time.Unix(0, t1)
			a.cancelled = f[6] == "cancelled"
		}
	}
	return out, sc.Err()
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
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
