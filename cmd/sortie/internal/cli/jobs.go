package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

const jobsDescription = `
Jobs lists jobs, newest first like the dashboard (--desc=false for oldest
first), filtered by queue,
state and kind, a page at a time: a page that is not the last ends with the
--after value of the next. --parent lists the jobs a job spawned. With a
job ID it shows that job whole: args, meta, result, every attempt's error,
its durable steps and, for a sleeping or awaiting job, what it waits for.

States: waiting, scheduled, available, running, retrying, completed,
cancelled, dead.`

func runJobs(ctx context.Context, e *env, args []string) int {
	var (
		a                  adminFlags
		queue, state, kind string
		after, parent      int64
		limit              int
		desc               bool
		search             sortie.JobSearch
		argsMatch          []string
		createdAfter       string
		createdBefore      string
	)
	fs := flagSet("jobs", adminSynopsis+" [--queue Q] [--state S] [--kind K] [--tag T] [--args PATH=VALUE] [--error TEXT] [...] [--parent ID] [--limit N] [--after ID] [ID]", jobsDescription)
	a.register(fs)
	fs.StringVar(&queue, "queue", "", "only jobs of this `queue`")
	fs.StringVar(&state, "state", "", "only jobs in this `state`")
	fs.StringVar(&kind, "kind", "", "only jobs of this `kind`")
	fs.IntVar(&limit, "limit", 50, "the most jobs to list (1 to 1000)")
	fs.Int64Var(&after, "after", 0, "list from after this job `ID`: the cursor a page ends with")
	fs.Int64Var(&parent, "parent", 0, "only the jobs that job `ID` spawned (sortie.Spawn)")
	fs.BoolVar(&desc, "desc", true, "newest first, as the dashboard lists them; --desc=false for oldest first")
	fs.StringVar(&search.Tag, "tag", "", "only jobs with this `tag`")
	fs.StringVar(&search.UniqueKey, "unique-key", "", "only the job with this unique `key`")
	fs.StringVar(&search.ErrorContains, "error", "", "only jobs whose last error holds this `text` (any case)")
	fs.Func("args", "only jobs whose args hold `PATH=VALUE` (user.id=42, items.0.sku=A-1); repeatable", func(v string) error {
		argsMatch = append(argsMatch, v)
		return nil
	})
	fs.StringVar(&createdAfter, "created-after", "", "only jobs created at or after this `time` (RFC 3339)")
	fs.StringVar(&createdBefore, "created-before", "", "only jobs created before this `time` (RFC 3339)")
	fs.IntVar(&search.ScanMax, "scan-max", 10000, "the most jobs a search without an index looks at (1 to 100000)")
	pos, code := parseInterleaved(e, fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) > 1 {
		return usageError(e, fs, "at most one job ID, got %q", pos)
	}
	var id int64
	if len(pos) == 1 {
		var err error
		if id, err = parseJobID(pos[0]); err != nil {
			return usageError(e, fs, "%v", err)
		}
	}
	if state != "" && !jobjson.ValidState(store.JobState(state)) {
		return usageError(e, fs, "--state %q is not a job state: want one of %s", state, jobjson.StateNames())
	}
	if limit < 1 || limit > 1000 {
		return usageError(e, fs, "--limit must be 1 to 1000, got %d", limit)
	}
	if after < 0 {
		return usageError(e, fs, "--after must be a job ID, got %d", after)
	}
	if msg := searchFlags(&search, argsMatch, createdAfter, createdBefore); msg != "" {
		return usageError(e, fs, "%s", msg)
	}
	c, closeStore, err := a.open(ctx)
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer closeStore()
	if id != 0 {
		row, err := c.JobGet(ctx, id)
		if err != nil {
			return adminFail(e, fs, err)
		}
		if a.json {
			err = writeJSON(e.stdout, jobjson.FromRow(row))
		} else {
			err = writeJob(e.stdout, row)
		}
		if err != nil {
			return adminFail(e, fs, err)
		}
		return exitOK
	}
	search.JobListParams = sortie.JobListParams{Queue: queue, State: store.JobState(state), Kind: kind, ParentID: parent,
		Cursor: after, Desc: desc, Limit: limit}
	found, err := c.JobSearch(ctx, &search)
	if err != nil {
		return adminFail(e, fs, err)
	}
	res := &sortie.JobListResult{Jobs: found.Jobs, NextCursor: found.NextCursor}
	if found.Capped && !a.json {
		defer fmt.Fprintf(e.stdout, "searched %d jobs (--scan-max) without a full page; more: --after %d\n", found.Scanned, found.NextCursor)
	}
	if a.json {
		page := jobjson.Page{Jobs: make([]jobjson.Job, len(res.Jobs)), NextAfter: res.NextCursor}
		for i, r := range res.Jobs {
			page.Jobs[i] = jobjson.FromRow(r)
		}
		err = writeJSON(e.stdout, struct {
			jobjson.Page
			Scanned int  `json:"scanned"`
			Capped  bool `json:"capped"`
		}{page, found.Scanned, found.Capped})
	} else {
		err = writeJobTable(e.stdout, res, found.Capped)
	}
	if err != nil {
		return adminFail(e, fs, err)
	}
	return exitOK
}

// parseJobID parses a job ID argument.
func parseJobID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, fmt.Errorf("%q is not a job ID (a positive integer)", s)
	}
	return id, nil
}

// stamp formats a time for the text output, in UTC to the millisecond.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// writeJobTable writes a page of jobs as a table.
func writeJobTable(w io.Writer, res *sortie.JobListResult, capped bool) error {
	if len(res.Jobs) == 0 {
		_, err := fmt.Fprintln(w, "no jobs")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tQUEUE\tSTATE\tATTEMPT\tRUN AT\tLAST ERROR")
	for _, r := range res.Jobs {
		last := ""
		if n := len(r.Errors); n > 0 {
			last = oneLine(r.Errors[n-1].Message, 60)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", r.ID, r.Kind, r.Queue, r.State, r.Attempt, r.MaxAttempts, stamp(r.RunAt), last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.NextCursor != 0 && !capped {
		_, err := fmt.Fprintf(w, "more: --after %d\n", res.NextCursor)
		return err
	}
	return nil
}

// searchFlags fills the search's args and time range from their flags and
// returns what is wrong with them, or "".
func searchFlags(s *sortie.JobSearch, args []string, after, before string) string {
	for _, a := range args {
		m, err := sortie.ParseArgsMatch(a)
		if err != nil {
			return "--args " + err.Error()
		}
		s.Args = append(s.Args, m)
	}
	for _, f := range []struct {
		name, v string
		to      *time.Time
	}{{"--created-after", after, &s.CreatedAfter}, {"--created-before", before, &s.CreatedBefore}} {
		if f.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f.v)
		if err != nil {
			return fmt.Sprintf("%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", f.name, f.v)
		}
		*f.to = t
	}
	if s.ScanMax < 1 || s.ScanMax > 100_000 {
		return fmt.Sprintf("--scan-max must be 1 to 100000, got %d", s.ScanMax)
	}
	return ""
}

// writeJob writes one job whole.
func writeJob(w io.Writer, r *store.JobRow) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	line := func(name, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", name, value)
		}
	}
	line("id", strconv.FormatInt(r.ID, 10))
	line("kind", r.Kind)
	line("queue", r.Queue)
	line("state", string(r.State))
	line("priority", strconv.Itoa(r.Priority))
	line("attempt", fmt.Sprintf("%d of %d", r.Attempt, r.MaxAttempts))
	line("run at", stamp(r.RunAt))
	line("created at", stamp(r.CreatedAt))
	if !r.AttemptedAt.IsZero() {
		line("attempted at", stamp(r.AttemptedAt)+" by "+r.AttemptedBy)
	}
	if !r.LeaseUntil.IsZero() {
		line("lease until", stamp(r.LeaseUntil))
	}
	if !r.FinalizedAt.IsZero() {
		line("finalized at", stamp(r.FinalizedAt))
	}
	line("unique key", r.UniqueKey)
	line("tags", strings.Join(r.Tags, ", "))
	if r.Timeout > 0 {
		line("timeout", r.Timeout.String())
	}
	line("partition", r.PartitionKey)
	if r.WorkflowID != 0 {
		line("workflow", strconv.FormatInt(r.WorkflowID, 10))
	}
	if len(r.DependsOn) > 0 {
		deps := make([]string, len(r.DependsOn))
		for i, d := range r.DependsOn {
			deps[i] = strconv.FormatInt(d, 10)
		}
		line("depends on", strings.Join(deps, ", "))
	}
	if r.Progress != 0 {
		line("progress", strconv.FormatFloat(r.Progress, 'f', -1, 64))
	}
	if r.CancelRequested {
		line("cancel", "requested")
	}
	if r.ParentID != 0 {
		line("parent", fmt.Sprintf("%d (spawn step %q)", r.ParentID, r.SpawnStep))
	}
	line("waits for", waitsFor(r))
	line("args", compactJSON(r.Args))
	line("meta", compactJSON(r.Meta))
	line("result", compactJSON(r.Result))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Steps {
		fmt.Fprintf(w, "step %q, attempt %d at %s: %s\n", s.Name, s.Attempt, stamp(s.RecordedAt), stepSummary(s))
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error, attempt %d at %s: %s\n", e.Attempt, stamp(e.At), strings.ReplaceAll(e.Message, "\n", "\n  "))
		if e.Stack != "" {
			fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(strings.TrimRight(e.Stack, "\n"), "\n", "\n  "))
		}
	}
	return nil
}

// waitsFor says what a sleeping or awaiting job waits for; "" for others.
func waitsFor(r *store.JobRow) string {
	if r.WaitsFor == "" {
		return ""
	}
	for _, s := range r.Steps {
		if s.Name != r.WaitsFor {
			continue
		}
		switch s.Kind {
		case store.StepSleep:
			return fmt.Sprintf("sleep %q until %s", s.Name, stamp(s.Until))
		case store.StepSpawn:
			return fmt.Sprintf("the children of %q: %d of %d pending", s.Name, s.Pending, s.ChildCount)
		}
	}
	return fmt.Sprintf("step %q", r.WaitsFor)
}

// stepSummary describes a recorded step on one line.
func stepSummary(s store.JobStep) string {
	switch s.Kind {
	case store.StepSleep:
		return "sleep until " + stamp(s.Until)
	case store.StepSpawn:
		return fmt.Sprintf("spawned %d jobs, %d pending", s.ChildCount, s.Pending)
	}
	return fmt.Sprintf("result of %d bytes", s.Size)
}

// compactJSON returns b on one line; empty for no value.
func compactJSON(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}
