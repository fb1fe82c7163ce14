package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/jobjson"
)

const queuesDescription = `
Queues lists every queue that holds jobs or has settings: whether it is
paused, its jobs per state (from the store's maintained counters, so it stays
fast with millions of jobs), how long its oldest due job has waited
(LATENCY: from the head of the store's index, "-" when no job is due), and
its limits.

With --history it prints, per queue, the jobs that finished (completed,
cancelled, dead) and the failed attempts that will run again (retried) over
the period --since names (the last hour by default; 24h, 7d, ...), from the
per-minute counts every process keeps in the store. With --json it adds the
counts per step (a minute over an hour, 15 minutes over a day, an hour over
a week).

With --delete NAME it deletes queue NAME when it holds no job in any state
(delete its jobs, or let retention prune the finished ones, first): its
settings and pause go, and it is no longer listed.`

func runQueues(ctx context.Context, e *env, args []string) int {
	var a adminFlags
	var history bool
	var since, queue, del string
	fs := flagSet("queues", adminSynopsis+" [--history [--since 1h|24h|7d] [--queue NAME]] [--delete NAME]", queuesDescription)
	a.register(fs)
	fs.BoolVar(&history, "history", false, "print the jobs finished per queue and outcome over a period, instead")
	fs.StringVar(&del, "delete", "", "delete the empty `queue` NAME instead")
	fs.StringVar(&since, "since", "1h", "with --history, the `period` before now: a duration like 1h or 24h, or days like 7d")
	fs.StringVar(&queue, "queue", "", "with --history, only this `queue`")
	pos, code := parseInterleaved(e, fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		return usageError(e, fs, "unexpected arguments %q", pos)
	}
	period, err := jobjson.ParseHistoryPeriod(since)
	if err != nil {
		return usageError(e, fs, "--since %v", err)
	}
	if !history && (flagGiven(fs, "since") || queue != "") {
		return usageError(e, fs, "--since and --queue go with --history")
	}
	if history && flagGiven(fs, "delete") {
		return usageError(e, fs, "--delete and --history: choose one")
	}
	c, closeStore, err := a.open(ctx)
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer closeStore()
	if flagGiven(fs, "delete") {
		return deleteQueue(ctx, e, fs, c, del, a.json)
	}
	if history {
		h, err := readHistory(ctx, c, queue, period, jobjson.HistoryStep(period), time.Now())
		if err != nil {
			return adminFail(e, fs, err)
		}
		if a.json {
			err = writeJSON(e.stdout, h)
		} else {
			err = writeHistoryTable(e.stdout, h, since)
		}
		if err != nil {
			return adminFail(e, fs, err)
		}
		return exitOK
	}
	ov, err := c.QueueOverview(ctx)
	if err != nil {
		return adminFail(e, fs, err)
	}
	views := jobjson.Queues(ov.Queues, ov.Counts, ov.Latency)
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

// flagGiven reports whether the command line set flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
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
	fmt.Fprintln(tw, strings.Join(append(head, "LATENCY", "LIMITS"), "\t"))
	for _, q := range qs {
		cells := []string{q.Name, "no"}
		if q.Paused {
			cells[1] = "yes"
		}
		for _, s := range jobjson.States {
			cells = append(cells, strconv.FormatInt(q.Counts[string(s)], 10))
		}
		latency := "-"
		if q.Latency > 0 {
			latency = jobjson.Duration(time.Duration(q.Latency * float64(time.Second)))
		}
		cells = append(cells, latency, limits(q.Settings))
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// writeHistoryTable writes a history's totals as a table: a row per queue,
// a column per outcome, and the finished jobs per minute over the period.
func writeHistoryTable(w io.Writer, h *jobjson.History, since string) error {
	fmt.Fprintf(w, "last %s: %s to %s\n", since, h.Since.Format(time.RFC3339), h.Until.Format(time.RFC3339))
	if len(h.Queues) == 0 {
		_, err := fmt.Fprintln(w, "no job finished or failed in that period")
		return err
	}
	minutes := h.Until.Sub(h.Since).Minutes()
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tCOMPLETED\tCANCELLED\tDEAD\tRETRIED\tFINISHED/MIN")
	row := func(name string, o jobjson.Outcomes) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.1f\n", name, o.Completed, o.Cancelled, o.Dead, o.Retried, float64(o.Finished())/minutes)
	}
	for _, q := range h.Queues {
		row(q.Name, q.Totals)
	}
	if len(h.Queues) > 1 {
		row("(all)", h.Totals)
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

// deleteQueue deletes the empty queue name for sortie queues --delete.
func deleteQueue(ctx context.Context, e *env, fs *flag.FlagSet, c *sortie.Client, name string, asJSON bool) int {
	if unknownQueue(ctx, e, fs, c, name, false) {
		return exitError
	}
	if err := c.QueueDelete(ctx, name); err != nil {
		return adminFail(e, fs, err)
	}
	if asJSON {
		if err := writeJSON(e.stdout, map[string]string{"deleted": name}); err != nil {
			return adminFail(e, fs, err)
		}
		return exitOK
	}
	fmt.Fprintf(e.stdout, "queue %s: deleted\n", name)
	return exitOK
}

// readHistory reads c's history of the period before now, per step, of
// queue ("" for every queue), and shapes it (jobjson.HistoryOf).
func readHistory(ctx context.Context, c *sortie.Client, queue string, period, step time.Duration, now time.Time) (*jobjson.History, error) {
	since := now.Add(-period)
	rows, err := c.JobHistory(ctx, &sortie.JobHistoryParams{Queue: queue, Since: since, Until: now, Step: step})
	if err != nil {
		return nil, err
	}
	return jobjson.HistoryOf(rows, since, now, step), nil
}
