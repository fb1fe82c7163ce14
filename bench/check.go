package bench

import (
	"fmt"
	"strings"

	"github.com/sortiehq/sortie/store"
)

// Tally is what a run observed, for Check.
type Tally struct {
	// Runs[i] is how many times the handler ran the job with sequence
	// number i; len(Runs) is the number of jobs the run made.
	Runs []int32
	// Stray counts handler calls for a sequence number outside Runs.
	Stray int64
	// Counts are the store's counts for the run's queue after the run.
	Counts []store.QueueStateCount
	// Problems found earlier in the run (an enqueue reported a duplicate,
	// the store held the wrong number of jobs after the enqueues).
	Problems []string
}

// CheckError reports a run whose jobs did not all run exactly once, or that
// left jobs behind. Its message lists every problem.
type CheckError struct {
	Problems []string
}

func (e *CheckError) Error() string {
	return "exactly-once check failed: " + strings.Join(e.Problems, "; ")
}

// maxListed is how many sequence numbers a problem lists before "...".
const maxListed = 10

// Check verifies a run: every job ran exactly once, the store counts every
// one of them completed and holds none in another state (pending, dead or
// cancelled). It returns nil or a *CheckError.
func Check(t Tally) error {
	problems := append([]string(nil), t.Problems...)
	var never, twice []string
	nNever, nTwice := 0, 0
	for seq, n := range t.Runs {
		switch {
		case n == 0:
			nNever++
			if len(never) < maxListed {
				never = append(never, fmt.Sprint(seq))
			}
		case n > 1:
			nTwice++
			if len(twice) < maxListed {
				twice = append(twice, fmt.Sprintf("%d (%d times)", seq, n))
			}
		}
	}
	if nNever > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d jobs never ran: seq %s", nNever, len(t.Runs), listed(never, nNever)))
	}
	if nTwice > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d jobs ran more than once: seq %s", nTwice, len(t.Runs), listed(twice, nTwice)))
	}
	if t.Stray > 0 {
		problems = append(problems, fmt.Sprintf("the handler ran %d jobs the run never made", t.Stray))
	}
	var completed int64
	var others []string
	for _, c := range t.Counts {
		if c.State == store.JobStateCompleted {
			completed += c.Count
			continue
		}
		if c.Count != 0 {
			others = append(others, fmt.Sprintf("%d %s", c.Count, c.State))
		}
	}
	if completed != int64(len(t.Runs)) {
		problems = append(problems, fmt.Sprintf("the store counts %d completed jobs, want %d", completed, len(t.Runs)))
	}
	if len(others) > 0 {
		problems = append(problems, "the store still holds jobs that are not completed: "+strings.Join(others, ", "))
	}
	if len(problems) == 0 {
		return nil
	}
	return &CheckError{Problems: problems}
}

func listed(items []string, total int) string {
	s := strings.Join(items, ", ")
	if total > len(items) {
		s += ", ..."
	}
	return s
}
