package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Flag values that are not valid UTF-8, and JSON with a key twice, are
// refused with a message naming the flag, and nothing is enqueued.
func TestEnqueueRefusesInvalidText(t *testing.T) {
	t.Parallel()
	a := sqliteAdminStore(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--kind", "k\xff"}, "--kind is not valid UTF-8"},
		{[]string{"--kind", "k", "--queue", "q\xff"}, "--queue is not valid UTF-8"},
		{[]string{"--kind", "k", "--unique-key", "u\xfe"}, "--unique-key is not valid UTF-8"},
		{[]string{"--kind", "k", "--partition", "p\xff"}, "--partition is not valid UTF-8"},
		{[]string{"--kind", "k", "--tag", "ok", "--tag", "t\xff"}, `--tag "t\xff" is not valid UTF-8`},
		{[]string{"--kind", "k", "--run-at", "2030\xff"}, "--run-at is not valid UTF-8"},
		{[]string{"--kind", "k", "--args", "{\"to\": \"ada\xc3\x28\"}"}, "--args: to is not valid UTF-8"},
		{[]string{"--kind", "k", "--args", `{"to": "\udc00"}`}, `--args: to is not valid Unicode: \udc00`},
		{[]string{"--kind", "k", "--args", `{"to": 1, "to": 2}`}, `--args: the JSON has the key "to" twice`},
		{[]string{"--kind", "k", "--meta", "{\"by\": \"\xff\"}"}, "--meta: by is not valid UTF-8"},
		{[]string{"--kind", "k", "--meta", `{"by": {"x": 1, "x": 1}}`}, `--meta: by has the key "x" twice`},
	} {
		args := append(append([]string{"enqueue"}, tt.args...), a.flags...)
		code, stdout, stderr := run(t, args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tt.want) {
			t.Errorf("sortie %q: exit status %d, stdout %q, stderr %q; want %d, nothing, and %q", args, code, stdout, stderr, exitUsage, tt.want)
		}
	}
	if counts, err := a.st.JobCounts(context.Background(), &store.JobCountsParams{}); err != nil || len(counts) != 0 {
		t.Errorf("JobCounts after the refused enqueues = %v, %v; want none", counts, err)
	}
}

// enqueue warns, as the HTTP API does, when registered processes exist and
// none works the job's queue; with no process registered it says nothing.
func TestEnqueueWarnsOfUnworkedQueue(t *testing.T) {
	t.Parallel()
	a := sqliteAdminStore(t)
	if code, _, stderr := a.cmd(t, "enqueue", "--kind", "k", "--queue", "emial"); code != exitOK || stderr != "" {
		t.Errorf("enqueue with no process registered: exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	now := time.Now()
	if _, err := a.st.ProcessBeat(t.Context(), &store.ProcessBeatParams{Now: now, Process: store.ProcessRow{ID: "w", StartedAt: now,
		Queues: []store.ProcessQueue{{Queue: "mail", Workers: 2}}}}); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := a.cmd(t, "enqueue", "--kind", "k", "--queue", "emial")
	if want := `enqueue: warning: no registered worker process works queue "emial": the job waits until one does`; code != exitOK || !strings.Contains(stderr, want) {
		t.Errorf("enqueue to an unworked queue: exit %d, stderr %q; want 0 and %q", code, stderr, want)
	}
	if code, _, stderr := a.cmd(t, "enqueue", "--kind", "k", "--queue", "mail"); code != exitOK || stderr != "" {
		t.Errorf("enqueue to a worked queue: exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	var res struct{ Warnings []string }
	decode(t, a.ok(t, "enqueue", "--kind", "k", "--queue", "other", "--json"), &res)
	if len(res.Warnings) != 1 || !strings.HasPrefix(res.Warnings[0], `no registered worker process works queue "other"`) {
		t.Errorf("enqueue --json to an unworked queue: warnings %q, want the warning", res.Warnings)
	}
}

// --args null is no args, as in the HTTP API: the job gets {}, which any
// worker's args type decodes.
func TestEnqueueNullArgsIsNone(t *testing.T) {
	t.Parallel()
	a := sqliteAdminStore(t)
	code, stdout, stderr := a.cmd(t, "enqueue", "--kind", "k", "--args", " null ")
	if code != exitOK {
		t.Fatalf("enqueue --args null: exit %d, stderr %q", code, stderr)
	}
	var id int64
	if _, err := fmt.Sscanf(stdout, "enqueued job %d", &id); err != nil {
		t.Fatalf("enqueue printed %q: %v", stdout, err)
	}
	row, err := a.st.JobGet(t.Context(), &store.JobGetParams{ID: id})
	if err != nil || string(row.Args) != "{}" {
		t.Fatalf("job %d's args = %q, %v; want {}", id, row.Args, err)
	}
}
