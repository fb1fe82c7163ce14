package chaos

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

// A journal is one worker process's record of the runs of its handler: a
// line when a run starts, written before the handler does its work, and a
// line when it ends, written before the handler returns (so before the
// outcome can be acknowledged). Each line goes to the file in one write(2),
// unbuffered: a process killed with SIGKILL loses nothing the kernel
// received, and a line cut short by the kill is ignored when read.
//
//	start <job> <attempt> <claim token> <process> <started at>
//	end <job> <attempt> <claim token> <process> <ended at> <ok|cancelled>
//
// Times are Unix nanoseconds of the wall clock; every process runs on one
// machine, so they compare.
type journal struct {
	proc string
	mu   sync.Mutex // one line, one write
	f    *os.File
}

func openJournal(path, proc string) (*journal, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &journal{proc: proc, f: f}, nil
}

func (j *journal) write(line string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err := j.f.WriteString(line)
	return err
}

// start records that a run of row's claim begins now.
func (j *journal) start(row *store.JobRow) error {
	return j.write(fmt.Sprintf("start %d %d %d %s %d\n", row.ID, row.Attempt, row.ClaimToken, j.proc, time.Now().UnixNano()))
}

// end records that the run ended now; cancelled says its context was
// cancelled first (lease lost, or the stop deadline).
func (j *journal) end(row *store.JobRow, cancelled bool) error {
	how := "ok"
	if cancelled {
		how = "cancelled"
	}
	return j.write(fmt.Sprintf("end %d %d %d %s %d %s\n", row.ID, row.Attempt, row.ClaimToken, j.proc, time.Now().UnixNano(), how))
}

func (j *journal) close() error { return j.f.Close() }

// A run is one run of a handler, as a journal tells it.
type run struct {
	proc    string
	job     int64
	attempt int
	token   int64
	start   time.Time
	end     time.Time // zero when the journal has no end line
	// cancelled: the handler's context was cancelled before it finished.
	cancelled bool
}

func (r *run) String() string {
	end := "no end"
	if !r.end.IsZero() {
		end = "ended " + r.end.Format("15:04:05.000")
		if r.cancelled {
			end += " (cancelled)"
		}
	}
	return fmt.Sprintf("job %d attempt %d (claim %d) in %s: started %s, %s",
		r.job, r.attempt, r.token, r.proc, r.start.Format("15:04:05.000"), end)
}

// readJournal parses the journal at path. A last line without its newline
// (the process was killed while writing it) is ignored; anything else
// malformed is an error, and so is a claim started twice in one journal.
func readJournal(path string) ([]*run, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil // the process was killed before its first run
	}
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(data, '\n'); i+1 < len(data) {
		data = data[:i+1]
	}
	type key struct {
		job, token int64
	}
	var out []*run
	open := make(map[key]*run)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		r, end, err := parseLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %q: %w", path, n, sc.Text(), err)
		}
		k := key{r.job, r.token}
		switch {
		case !end && open[k] != nil:
			return nil, fmt.Errorf("%s:%d: claim %d of job %d started twice", path, n, r.token, r.job)
		case !end:
			open[k] = r
			out = append(out, r)
		case open[k] == nil || !open[k].end.IsZero():
			return nil, fmt.Errorf("%s:%d: end of claim %d of job %d without its start", path, n, r.token, r.job)
		default:
			open[k].end, open[k].cancelled = r.end, r.cancelled
		}
	}
	return out, sc.Err()
}

// parseLine parses one journal line; end says it is an end line.
func parseLine(line string) (r *run, end bool, err error) {
	f := strings.Fields(line)
	switch {
	case len(f) == 6 && f[0] == "start":
	case len(f) == 7 && f[0] == "end":
		end = true
	default:
		return nil, false, fmt.Errorf("want start and 5 fields, or end and 6")
	}
	r = &run{proc: f[4]}
	job, err1 := strconv.ParseInt(f[1], 10, 64)
	attempt, err2 := strconv.Atoi(f[2])
	token, err3 := strconv.ParseInt(f[3], 10, 64)
	at, err4 := strconv.ParseInt(f[5], 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, false, err
	}
	r.job, r.attempt, r.token = job, attempt, token
	if !end {
		r.start = time.Unix(0, at)
		return r, false, nil
	}
	r.end, r.cancelled = time.Unix(0, at), f[6] == "cancelled"
	return r, true, nil
}

// runsByJob returns the runs of every journal of procs by job, each job's
// in the order they started.
func runsByJob(procs []*proc) (map[int64][]*run, error) {
	byJob := make(map[int64][]*run)
	for _, p := range procs {
		runs, err := readJournal(p.journal)
		if err != nil {
			return nil, err
		}
		for _, r := range runs {
			if r.proc != p.name {
				return nil, fmt.Errorf("journal of %s has a line of process %s", p.name, r.proc)
			}
			byJob[r.job] = append(byJob[r.job], r)
		}
	}
	for _, runs := range byJob {
		sort.Slice(runs, func(i, j int) bool { return runs[i].start.Before(runs[j].start) })
	}
	return byJob, nil
}
