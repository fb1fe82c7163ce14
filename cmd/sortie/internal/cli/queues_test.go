package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// finishNow claims up to n jobs of queue and reports kind for each, now.
func finishNow(t *testing.T, st store.Store, queue string, n int, kind store.ReportKind) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	jobs, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: queue, Limit: n, Now: now, Lease: time.Minute}))
	if err != nil || len(jobs) != n {
		t.Fatalf("JobFetch(%q, %d) = %d jobs, %v", queue, n, len(jobs), err)
	}
	var reports []*store.Report
	for _, j := range jobs {
		r := &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: kind, RunAt: now.Add(time.Hour)}
		if kind == store.ReportFailed {
			r.Error = &store.AttemptError{Message: "no"}
		}
		reports = append(reports, r)
	}
	if _, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: reports, Now: now}); err != nil {
		t.Fatal(err)
	}
}

// sortie queues shows each queue's latency; --history the jobs finished
// per queue and outcome over the last hour, or --since; --json the same
// with the points per step.
func TestQueuesHistoryAndLatency(t *testing.T) {
	t.Parallel()
	a := sqliteAdminStore(t)
	ctx := context.Background()
	now := time.Now()
	var jobs []*store.NewJob
	for _, q := range []string{"mail", "mail", "mail", "media"} {
		jobs = append(jobs, &store.NewJob{Kind: "k", Queue: q, Args: []byte(`{}`), RunAt: now.Add(-90 * time.Second)})
	}
	if _, err := a.st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now}); err != nil {
		t.Fatal(err)
	}
	if out := a.ok(t, "queues"); !regexp.MustCompile(`(?m)^QUEUE .* LATENCY +LIMITS$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^mail +no +0 +0 +3 +0 .* 1m3\ds +-$`).MatchString(out) {
		t.Errorf("queues:\n%s\nwant mail's oldest due job waiting about 1m30s", out)
	}

	if out := a.ok(t, "queues", "--history"); !strings.Contains(out, "no job finished or failed in that period") {
		t.Errorf("queues --history before any outcome:\n%s", out)
	}
	finishNow(t, a.st, "mail", 2, store.ReportCompleted)
	finishNow(t, a.st, "mail", 1, store.ReportFailed)
	finishNow(t, a.st, "media", 1, store.ReportCancelled)
	out := a.ok(t, "queues", "--history", "--since", "24h")
	for _, re := range []string{`(?m)^last 24h: `, `(?m)^QUEUE +COMPLETED +CANCELLED +DEAD +RETRIED +FINISHED/MIN$`,
		`(?m)^mail +2 +0 +0 +1 +0\.0$`, `(?m)^media +0 +1 +0 +0 +0\.0$`, `(?m)^\(all\) +2 +1 +0 +1 +0\.0$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("queues --history --since 24h:\n%s\nwant a line matching %s", out, re)
		}
	}

	var h jobjson.History
	decode(t, a.ok(t, "queues", "--history", "--queue", "mail", "--json"), &h)
	want := jobjson.Outcomes{Completed: 2, Retried: 1}
	if h.Step != "1m0s" || h.Until.Sub(h.Since) != time.Hour || len(h.Queues) != 1 || h.Queues[0].Name != "mail" ||
		h.Queues[0].Totals != want || h.Totals != want || len(h.Points) == 0 {
		t.Errorf("queues --history --queue mail --json = %+v, want mail's last hour per minute: %+v", h, want)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"queues", "--history", "--since", "0s"}, "--since must be a positive duration like 1h, 24h or 7d"},
		{[]string{"queues", "--history", "--since", "400d"}, "at most 366d"},
		{[]string{"queues", "--since", "1h"}, "--since and --queue go with --history"},
	} {
		if code, _, stderr := a.cmd(t, tt.args...); code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("sortie %q: exit status %d, stderr %q; want %d and %q", tt.args, code, stderr, exitUsage, tt.want)
		}
	}
}

func TestQueueTypos(t *testing.T) { onAdminStores(t, testQueueTypos) }

// Pausing, resuming or configuring a queue nothing uses is refused with the
// known queues, unless --create makes it on purpose; queues --delete
// deletes an empty queue and refuses one with jobs.
func testQueueTypos(t *testing.T, a adminStore) {
	a.ok(t, "enqueue", "--kind", "k", "--queue", "mail")
	known := "(known queues: mail)"
	for _, args := range [][]string{{"pause", "mial"}, {"resume", "mial"}, {"configure", "--max-running", "2", "mial"}} {
		code, stdout, stderr := a.cmd(t, args...)
		want := `sortie ` + args[0] + `: unknown queue "mial": no job, setting, pause or running process uses it ` + known
		if code != exitError || stdout != "" || !strings.HasPrefix(stderr, want) {
			t.Errorf("sortie %q: exit status %d, stdout %q, stderr %q; want 1 and %q", args, code, stdout, stderr, want)
		}
		if args[0] != "resume" && !strings.HasSuffix(stderr, "; give --create to make it\n") {
			t.Errorf("sortie %q: stderr %q does not name --create", args, stderr)
		}
	}
	if rows, err := a.st.QueueList(t.Context(), &store.QueueListParams{}); err != nil || len(rows) != 1 {
		t.Fatalf("queues after the refusals: %+v, %v; want mail only", rows, err)
	}
	if out := a.ok(t, "pause", "--create", "mial"); out != "queue mial: paused\n" {
		t.Errorf("pause --create printed %q", out)
	}
	if out := a.ok(t, "configure", "--create", "--max-depth", "5", "new"); !strings.HasPrefix(out, "queue new: ") {
		t.Errorf("configure --create printed %q", out)
	}
	code, _, stderr := a.cmd(t, "queues", "--delete", "mail")
	if want := `sortie queues: queue is not empty: queue "mail" holds 1 job`; code != exitError || !strings.HasPrefix(stderr, want) {
		t.Errorf("queues --delete of a queue with a job: exit status %d, stderr %q; want 1 and %q", code, stderr, want)
	}
	for _, q := range []string{"mial", "new"} {
		if out := a.ok(t, "queues", "--delete", q); out != "queue "+q+": deleted\n" {
			t.Errorf("queues --delete %s printed %q", q, out)
		}
	}
	rows, err := a.st.QueueList(t.Context(), &store.QueueListParams{})
	if err != nil || len(rows) != 1 || rows[0].Name != "mail" {
		t.Errorf("queues after deleting mial and new: %+v, %v; want mail only", rows, err)
	}
}
