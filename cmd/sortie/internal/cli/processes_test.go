package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

func TestProcesses(t *testing.T) { onAdminStores(t, testProcesses) }

// processes lists the registry, and quiets or stops a process by ID.
func testProcesses(t *testing.T, a adminStore) {
	ctx := context.Background()
	if out := a.ok(t, "processes"); out != "no processes registered\n" {
		t.Errorf("processes on an empty registry printed %q", out)
	}
	now := time.Now()
	_, err := a.st.ProcessBeat(ctx, &store.ProcessBeatParams{Now: now, Process: store.ProcessRow{ID: "web-1:42:abc", Host: "web-1", PID: 42,
		Version: "v0.4.0", Busy: 3, StartedAt: now.Add(-time.Hour), Queues: []store.ProcessQueue{{Queue: "mail", Workers: 5}}}})
	if err != nil {
		t.Fatal(err)
	}
	out := a.ok(t, "processes")
	for _, want := range []string{"web-1:42:abc", "web-1", "42", "v0.4.0", "mail:5", "3", "yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("processes output lacks %q:\n%s", want, out)
		}
	}
	if out := a.ok(t, "processes", "--quiet", "web-1:42:abc"); out != "process web-1:42:abc: quiet requested; it acts at its next beat\n" {
		t.Errorf("--quiet printed %q", out)
	}
	var list struct{ Processes []jobjson.Process }
	decode(t, a.ok(t, "processes", "--json"), &list)
	if len(list.Processes) != 1 || !list.Processes[0].Quiet || list.Processes[0].Stop || !list.Processes[0].Alive {
		t.Errorf("processes --json = %+v, want the process quiet and alive", list)
	}
	if code, _, stderr := a.cmd(t, "processes", "--stop", "gone"); code != exitError || !strings.Contains(stderr, "not found") {
		t.Errorf("--stop of an unknown process: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := a.cmd(t, "processes", "--stop", "a", "--quiet", "b"); code != exitUsage || !strings.Contains(stderr, "--quiet and --stop together") {
		t.Errorf("--stop with --quiet: exit %d, stderr %q", code, stderr)
	}
}

func TestJobsSearch(t *testing.T) { onAdminStores(t, testJobsSearch) }

// jobs searches by tag, args and error text, and says when it stopped at
// --scan-max.
func testJobsSearch(t *testing.T, a adminStore) {
	ctx := context.Background()
	jobs := []*store.NewJob{
		{Kind: "mail", Queue: "search", Args: []byte(`{"user":{"id":42}}`), Tags: []string{"vip"}, Priority: 2, MaxAttempts: 25},
		{Kind: "mail", Queue: "search", Args: []byte(`{"user":{"id":7}}`), Priority: 2, MaxAttempts: 25},
		{Kind: "mail", Queue: "search", Args: []byte(`{"user":{"id":8}}`), Priority: 2, MaxAttempts: 25},
	}
	res, err := a.st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Jobs    []jobjson.Job
		Scanned int
		Capped  bool
	}
	decode(t, a.ok(t, "jobs", "--queue", "search", "--tag", "vip", "--json"), &page)
	if len(page.Jobs) != 1 || page.Jobs[0].ID != res[0].ID {
		t.Errorf("jobs --tag vip = %+v, want job %d", page, res[0].ID)
	}
	decode(t, a.ok(t, "jobs", "--queue", "search", "--args", "user.id=7", "--json"), &page)
	if len(page.Jobs) != 1 || page.Jobs[0].ID != res[1].ID {
		t.Errorf("jobs --args user.id=7 = %+v, want job %d", page, res[1].ID)
	}
	out := a.ok(t, "jobs", "--queue", "search", "--tag", "vip", "--scan-max", "1")
	if !strings.Contains(out, "searched 1 jobs (--scan-max) without a full page; more: --after") {
		t.Errorf("a capped search printed:\n%s", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "--args", "user.id"}, `--args "user.id" is not PATH=VALUE`},
		{[]string{"jobs", "--created-after", "monday"}, "--created-after must be an RFC 3339 time"},
		{[]string{"jobs", "--scan-max", "0"}, "--scan-max must be 1 to 100000"},
	} {
		if code, _, stderr := a.cmd(t, c.args...); code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("sortie %q: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
