package childproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sortiehq/sortie/store"
)

// A Journal is one worker child's record of the runs of its handler: a line
// when a run starts, written before the handler does its work, and a line
// when it ends, written before the handler returns (so before the outcome
// can be acknowledged). Each line goes to the file in one write(2),
// unbuffered: a process killed with SIGKILL loses nothing the kernel
// received, and a line cut short by the kill is ignored when read.
//
//	start <job> <attempt> <claim token> <process> <claimed at> <started at>
//	end <job> <attempt> <claim token> <process> <ended at> <ok|cancelled>
//
// Times are Unix nanoseconds of the wall clock; every process runs on one
// machine, so they compare. The claim time is the store's AttemptedAt, as
// the fetch returned it.
type Journal struct {
	proc string
	mu   sync.Mutex // one line, one write
	f    *os.File
}

// OpenJournal opens the journal of this child (JournalPath) for appending.
func OpenJournal() (*Journal, error) {
	f, err := os.OpenFile(JournalPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Journal{proc: Name(), f: f}, nil
}

func (j *Journal) write(line string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err := j.f.WriteString(line)
	return err
}

// Start records that a run of row's claim begins now.
func (j *Journal) Start(row *store.JobRow) error {
	return j.write(fmt.Sprintf("start %d %d %d %s %d %d\n",
		row.ID, row.Attempt, row.ClaimToken, j.proc, row.AttemptedAt.UnixNano(), time.Now().UnixNano()))
}

// End records that the run of row's claim ended now; cancelled says its
// context was cancelled first (lease lost, or the stop deadline).
func (j *Journal) End(row *store.JobRow, cancelled bool) error {
	how := "ok"
	if cancelled {
		how = "cancelled"
	}
	return j.write(fmt.Sprintf("end %d %d %d %s %d %s\n",
		row.ID, row.Attempt, row.ClaimToken, j.proc, time.Now().UnixNano(), how))
}

// Close closes the journal.
func (j *Journal) Close() error { return j.f.Close() }

// A Run is one run of a handler, as a journal tells it.
type Run struct {
	// Proc names the process that ran it.
	Proc string
	// Job, Attempt and Token are the job's ID, the attempt and its claim
	// token.
	Job     int64
	Attempt int
	Token   int64
	// Claimed is the store's AttemptedAt of the claim.
	Claimed time.Time
	// Start is when the handler began; End when it returned, zero when
	// the journal has no end line.
	Start, End time.Time
	// Cancelled says the handler's context was cancelled before it
	// finished.
	Cancelled bool
}

// String describes r, for failure messages.
func (r *Run) String() string {
	end := "no end"
	if !r.End.IsZero() {
		end = "ended " + r.End.Format("15:04:05.000000")
		if r.Cancelled {
			end += " (cancelled)"
		}
	}
	return fmt.Sprintf("job %d attempt %d (claim %d) in %s: claimed %s, started %s, %s",
		r.Job, r.Attempt, r.Token, r.Proc, r.Claimed.Format("15:04:05.000000"), r.Start.Format("15:04:05.000000"), end)
}

// ReadJournal parses the journal at path and returns its runs in the order
// they started. A last line without its newline (the process was killed
// while writing it) is ignored; anything else malformed is an error, and so
// is a claim started twice or ended without its start.
func ReadJournal(path string) ([]*Run, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(data, '\n'); i+1 < len(data) {
		data = data[:i+1]
	}
	type key struct {
		proc       string
		job, token int64
	}
	var out []*Run
	open := make(map[key]*Run)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		r, end, err := parseLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %q: %w", path, n, sc.Text(), err)
		}
		k := key{r.Proc, r.Job, r.Token}
		switch {
		case !end && open[k] != nil:
			return nil, fmt.Errorf("%s:%d: claim %d of job %d started twice", path, n, r.Token, r.Job)
		case !end:
			open[k] = r
			out = append(out, r)
		case open[k] == nil || !open[k].End.IsZero():
			return nil, fmt.Errorf("%s:%d: end of claim %d of job %d without its start", path, n, r.Token, r.Job)
		default:
			open[k].End, open[k].Cancelled = r.End, r.Cancelled
		}
	}
	return out, sc.Err()
}

// parseLine parses one journal line; end says it is an end line.
func parseLine(line string) (r *Run, end bool, err error) {
	f := strings.Fields(line)
	if len(f) != 7 || f[0] != "start" && f[0] != "end" {
		return nil, false, errors.New("want start or end and 6 fields")
	}
	end = f[0] == "end"
	r = &Run{Proc: f[4]}
	job, err1 := strconv.ParseInt(f[1], 10, 64)
	attempt, err2 := strconv.Atoi(f[2])
	token, err3 := strconv.ParseInt(f[3], 10, 64)
	at, err4 := strconv.ParseInt(f[5], 10, 64)
	var err5 error
	if end {
		r.End, r.Cancelled = time.Unix(0, at), f[6] == "cancelled"
	} else {
		var started int64
		started, err5 = strconv.ParseInt(f[6], 10, 64)
		r.Claimed, r.Start = time.Unix(0, at), time.Unix(0, started)
	}
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return nil, false, err
	}
	r.Job, r.Attempt, r.Token = job, attempt, token
	return r, end, nil
}

// RunsByJob returns the runs in the journals of procs by job, each job's in
// the order they started. A journal with a line of another process is an
// error.
func RunsByJob(procs []*Proc) (map[int64][]*Run, error) {
	byJob := make(map[int64][]*Run)
	for _, p := range procs {
		runs, err := ReadJournal(p.Journal)
		if err != nil {
			return nil, fmt.Errorf("journal of %s: %w", p.Name, err)
		}
		for _, r := range runs {
			if r.Proc != p.Name {
				return nil, fmt.Errorf("journal of %s has a line of process %s", p.Name, r.Proc)
			}
			byJob[r.Job] = append(byJob[r.Job], r)
		}
	}
	for _, runs := range byJob {
		sort.Slice(runs, func(i, j int) bool { return runs[i].Start.Before(runs[j].Start) })
	}
	return byJob, nil
}
