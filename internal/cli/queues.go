package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sortiehq/sortie/internal/jobjson"
)

const queuesDescription = `
Queues lists every queue that holds jobs or has settings: whether it is
paused, its jobs per state (from the store's maintained counters, so it stays
fast with millions of jobs), and its limits.`

func runQueues(ctx context.Context, e *env, args []string) int {
	var a adminFlags
	fs := flagSet("queues", adminSynopsis, queuesDescription)
	a.register(fs)
	pos, code := parseInterleaved(e, fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		return usageError(e, fs, "unexpected arguments %q", pos)
	}
	c, closeStore, err := a.open(ctx)
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer closeStore()
	views, err := jobjson.ListQueues(ctx, c)
	if err != nil {
		return adminFail(e, fs, err)
	}
	if a.json {
		err = writeJSON(e.stdout, map[string]any{"queues": views})
	} else {
		err = writeQueueTable(e.stdout, views)
	}
	if err != nil {
		return adminFail(e, fs, err)
	}
	return exitOK
}

// writeQueueTable writes queues as a table: a column per job state.
func writeQueueTable(w io.Writer, qs []jobjson.Queue) error {
	if len(qs) == 0 {
		_, err := fmt.Fprintln(w, "no queues")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	head := []string{"QUEUE", "PAUSED"}
	for _, s := range jobjson.States {
		head = append(head, strings.ToUpper(string(s)))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "LIMITS"), "\t"))
	for _, q := range qs {
		cells := []string{q.Name, "no"}
		if q.Paused {
			cells[1] = "yes"
		}
		for _, s := range jobjson.States {
			cells = append(cells, strconv.FormatInt(q.Counts[string(s)], 10))
		}
		cells = append(cells, limits(q.Settings))
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// limits summarizes a queue's settings in one cell.
func limits(s *jobjson.Settings) string {
	if s == nil {
		return "-"
	}
	var parts []string
	if s.MaxRunning > 0 {
		parts = append(parts, fmt.Sprintf("max running %d", s.MaxRunning))
	}
	if s.RateLimit > 0 {
		parts = append(parts, fmt.Sprintf("%d per %s", s.RateLimit, s.RatePeriod))
	}
	if s.PartitionMaxRunning > 0 {
		parts = append(parts, fmt.Sprintf("max running %d per partition", s.PartitionMaxRunning))
	}
	if s.PartitionRateLimit > 0 {
		parts = append(parts, fmt.Sprintf("%d per %s per partition", s.PartitionRateLimit, s.PartitionRatePeriod))
	}
	if s.MaxDepth > 0 {
		parts = append(parts, fmt.Sprintf("max depth %d (%s)", s.MaxDepth, s.Overflow))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
