package chaos

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"
)

// na marks a count a scenario does not take.
const na = -1

// counts are one scenario's figures on one store: a line of the table every
// run prints. A count a scenario does not take is na.
type counts struct {
	scenario, store string
	// The jobs: enqueued (acknowledged), and where they are at the end.
	// lost are jobs that should have completed and did not.
	enqueued, completed, dead, cancelled, pending, lost int
	// runs are the handler runs the journals hold; duplicates are the runs
	// beyond one per job, and explained those of them that a fault
	// explains (their process was killed or stopped while they ran, or
	// their outcome could not be recorded).
	runs, duplicates, explained int
	// repeatedIDs are job IDs acknowledged twice, repeatedTokens claim
	// tokens handed out twice (the Redis server scenarios).
	repeatedIDs, repeatedTokens int
	// refused are stale outcomes the store refused (fencing).
	refused int
	// kills are the SIGKILLs sent; faults the other faults: the store's
	// outages and restarts, and SIGSTOPs.
	kills, faults int
	// requests are HTTP requests made; status5xx those answered 5xx, and
	// unanswered those that got no answer (the connection closed or reset
	// under them).
	requests, status5xx, unanswered int
	took                            time.Duration
	failed, skipped                 bool
}

var (
	tableMu sync.Mutex
	table   []*counts
)

// newCounts starts the counts of scenario on store; when t ends they go
// into the table, with how long t took and whether it failed.
func newCounts(t *testing.T, scenario, store string) *counts {
	c := &counts{scenario: scenario, store: store,
		enqueued: na, completed: na, dead: na, cancelled: na, pending: na, lost: na,
		runs: na, duplicates: na, explained: na, repeatedIDs: na, repeatedTokens: na, refused: na, kills: na, faults: na,
		requests: na, status5xx: na, unanswered: na}
	start := time.Now()
	t.Cleanup(func() {
		c.took = time.Since(start).Round(100 * time.Millisecond)
		c.failed, c.skipped = t.Failed(), t.Skipped()
		t.Logf("counts: %s", c)
		tableMu.Lock()
		table = append(table, c)
		tableMu.Unlock()
	})
	return c
}

// headers are the table's columns, in the order of counts.cells.
var headers = []string{"SCENARIO", "STORE", "ENQUEUED", "COMPLETED", "DEAD", "CANCELLED", "PENDING", "LOST",
	"RUNS", "DUPLICATES", "EXPLAINED", "REPEATED IDS", "REPEATED TOKENS", "REFUSED", "KILLS", "FAULTS", "REQUESTS", "5XX",
	"NO ANSWER", "TIME", "RESULT"}

func (c *counts) cells() []string {
	num := func(n int) string {
		if n == na {
			return "-"
		}
		return strconv.Itoa(n)
	}
	result := "ok"
	switch {
	case c.failed:
		result = "FAIL"
	case c.skipped:
		result = "SKIP"
	}
	return []string{c.scenario, c.store, num(c.enqueued), num(c.completed), num(c.dead), num(c.cancelled),
		num(c.pending), num(c.lost), num(c.runs), num(c.duplicates), num(c.explained), num(c.repeatedIDs),
		num(c.repeatedTokens), num(c.refused),
		num(c.kills), num(c.faults), num(c.requests), num(c.status5xx), num(c.unanswered), c.took.String(), result}
}

func (c *counts) String() string {
	cells := c.cells()
	s := ""
	for i, h := range headers {
		if cells[i] == "-" {
			continue
		}
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("%s=%s", strings.ReplaceAll(h, " ", "_"), cells[i])
	}
	return s
}

// printTable writes the counts of every scenario that ran, one line each.
func printTable(w io.Writer) {
	tableMu.Lock()
	defer tableMu.Unlock()
	if len(table) == 0 {
		return
	}
	form := "short"
	if longForm() {
		form = "long"
	}
	fmt.Fprintf(w, "\nchaos scenarios (%s form):\n", form)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(cells []string) {
		for _, c := range cells {
			fmt.Fprintf(tw, "%s\t", c)
		}
		fmt.Fprintln(tw)
	}
	line(headers)
	for _, c := range table {
		line(c.cells())
	}
	_ = tw.Flush()
}
