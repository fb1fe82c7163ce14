package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

var processCases = []testCase{
	{name: "BeatRegistersAndReplaces", run: testProcessBeat},
	{name: "CommandsSurviveBeats", run: testProcessCommands},
	{name: "DeadProcessesAgeOut", run: testProcessForget},
	{name: "DeleteAndUnknown", run: testProcessDelete},
	{name: "BadRowRefused", run: testProcessInvalid},
	{name: "Durable", durable: true, run: testProcessDurable},
	{name: "SeenByOtherHandles", shared: true, run: testProcessShared},
}

// procAt is a process row as a client would send it.
func procAt(id string, started time.Time, busy int) store.ProcessRow {
	return store.ProcessRow{ID: id, Host: "host-a", PID: 4242, Version: "v1.2.3", Busy: busy, StartedAt: started,
		Queues: []store.ProcessQueue{{Queue: "default", Workers: 10}, {Queue: "mail", Workers: 2}},
		Periodic: []store.ProcessSchedule{{Name: "nightly", Spec: "0 3 * * *", Misfire: "run_once", Next: started.Add(time.Hour),
			MissedAt: started, Missed: 4, Enqueued: 1}}}
}

func beat(t testing.TB, st store.Store, p *store.ProcessBeatParams) *store.ProcessRow {
	t.Helper()
	row, err := st.ProcessBeat(t.Context(), p)
	if err != nil {
		t.Fatalf("ProcessBeat(%q) error: %v", p.Process.ID, err)
	}
	return row
}

func processes(t testing.TB, st store.Store) []*store.ProcessRow {
	t.Helper()
	rows, err := st.ProcessList(t.Context(), &store.ProcessListParams{})
	if err != nil {
		t.Fatalf("ProcessList error: %v", err)
	}
	return rows
}

// sameInstant compares times by instant, at the microsecond every store
// keeps.
var sameInstant = cmp.Comparer(func(a, b time.Time) bool { return a.Truncate(time.Microsecond).Equal(b.Truncate(time.Microsecond)) })

// A beat creates the row with LastBeat = Now; the next replaces what the
// process sends (busy count, queues) and moves LastBeat. List is by ID.
func testProcessBeat(t *testing.T, e *env) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b := procAt("b-proc", now, 3)
	got := beat(t, e.st, &store.ProcessBeatParams{Process: b, Now: now})
	want := b
	want.LastBeat = now
	if diff := cmp.Diff(&want, got, sameInstant); diff != "" {
		t.Errorf("first beat returned (-want +got):\n%s", diff)
	}
	beat(t, e.st, &store.ProcessBeatParams{Process: procAt("a-proc", now, 0), Now: now})
	b.Busy, b.Queues = 7, []store.ProcessQueue{{Queue: "only", Workers: 1}}
	later := now.Add(10 * time.Second)
	beat(t, e.st, &store.ProcessBeatParams{Process: b, Now: later})
	rows := processes(t, e.st)
	if len(rows) != 2 || rows[0].ID != "a-proc" || rows[1].ID != "b-proc" {
		t.Fatalf("ProcessList = %v, want a-proc then b-proc", rows)
	}
	want = b
	want.LastBeat = later
	if diff := cmp.Diff(&want, rows[1], sameInstant); diff != "" {
		t.Errorf("row after the second beat (-want +got):\n%s", diff)
	}
}

// Quiet and Stop stay set across the process's beats, which return them,
// until its row is deleted; a command for an unknown process is
// ErrNotFound.
func testProcessCommands(t *testing.T, e *env) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := procAt("worker-1", now, 0)
	beat(t, e.st, &store.ProcessBeatParams{Process: p, Now: now})
	row, err := e.st.ProcessCommand(t.Context(), &store.ProcessCommandParams{ID: "worker-1", Command: store.ProcessQuiet})
	if err != nil || !row.Quiet || row.Stop {
		t.Fatalf("ProcessCommand(quiet) = %+v, %v; want Quiet", row, err)
	}
	if got := beat(t, e.st, &store.ProcessBeatParams{Process: p, Now: now.Add(time.Second)}); !got.Quiet || got.Stop {
		t.Errorf("beat after quiet = %+v, want Quiet kept", got)
	}
	if _, err := e.st.ProcessCommand(t.Context(), &store.ProcessCommandParams{ID: "worker-1", Command: store.ProcessStop}); err != nil {
		t.Fatal(err)
	}
	if got := beat(t, e.st, &store.ProcessBeatParams{Process: p, Now: now.Add(2 * time.Second)}); !got.Quiet || !got.Stop {
		t.Errorf("beat after stop = %+v, want Quiet and Stop", got)
	}
	if _, err := e.st.ProcessCommand(t.Context(), &store.ProcessCommandParams{ID: "nobody", Command: store.ProcessStop}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ProcessCommand(unknown) error = %v, want ErrNotFound", err)
	}
	if _, err := e.st.ProcessCommand(t.Context(), &store.ProcessCommandParams{ID: "worker-1", Command: "pause"}); err == nil {
		t.Errorf("ProcessCommand(pause) succeeded, want an error naming the command")
	}
	if err := e.st.ProcessDelete(t.Context(), &store.ProcessDeleteParams{ID: "worker-1"}); err != nil {
		t.Fatal(err)
	}
	if got := beat(t, e.st, &store.ProcessBeatParams{Process: p, Now: now.Add(3 * time.Second)}); got.Quiet || got.Stop {
		t.Errorf("a new row after delete kept the old commands: %+v", got)
	}
}

// A beat deletes the rows of other processes not heard from since
// ForgetBefore, never its own.
func testProcessForget(t *testing.T, e *env) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	beat(t, e.st, &store.ProcessBeatParams{Process: procAt("dead", now, 0), Now: now})
	beat(t, e.st, &store.ProcessBeatParams{Process: procAt("alive", now, 0), Now: now.Add(90 * time.Second)})
	later := now.Add(2 * time.Minute)
	beat(t, e.st, &store.ProcessBeatParams{Process: procAt("self", now, 0), Now: later, ForgetBefore: later.Add(-time.Minute)})
	var ids []string
	for _, r := range processes(t, e.st) {
		ids = append(ids, r.ID)
	}
	if diff := cmp.Diff([]string{"alive", "self"}, ids); diff != "" {
		t.Errorf("processes after forgetting those silent for a minute (-want +got):\n%s", diff)
	}
	beat(t, e.st, &store.ProcessBeatParams{Process: procAt("self", now, 0), Now: later.Add(time.Hour), ForgetBefore: later.Add(time.Hour)})
	if rows := processes(t, e.st); len(rows) != 1 || rows[0].ID != "self" {
		t.Errorf("a beat forgot its own row: %v", rows)
	}
}

// Delete removes the row; deleting an unknown process is not an error.
func testProcessDelete(t *testing.T, e *env) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	beat(t, e.st, &store.ProcessBeatParams{Process: procAt("p", now, 0), Now: now})
	for range 2 {
		if err := e.st.ProcessDelete(t.Context(), &store.ProcessDeleteParams{ID: "p"}); err != nil {
			t.Fatalf("ProcessDelete error: %v", err)
		}
	}
	if rows := processes(t, e.st); len(rows) != 0 {
		t.Errorf("ProcessList after delete = %v", rows)
	}
}

// A row without an ID, or with a negative busy count, is refused and
// stores nothing.
func testProcessInvalid(t *testing.T, e *env) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, p := range []store.ProcessRow{{}, {ID: "x", Busy: -1}} {
		if _, err := e.st.ProcessBeat(t.Context(), &store.ProcessBeatParams{Process: p, Now: now}); err == nil {
			t.Errorf("ProcessBeat(%+v) succeeded, want an error", p)
		}
	}
	if rows := processes(t, e.st); len(rows) != 0 {
		t.Errorf("refused beats stored %v", rows)
	}
}

// Rows and commands survive a restart.
func testProcessDurable(t *testing.T, e *env) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	beat(t, e.st, &store.ProcessBeatParams{Process: procAt("p", now, 2), Now: now})
	if _, err := e.st.ProcessCommand(t.Context(), &store.ProcessCommandParams{ID: "p", Command: store.ProcessQuiet}); err != nil {
		t.Fatal(err)
	}
	e.reopen(t)
	rows := processes(t, e.st)
	if len(rows) != 1 || rows[0].Busy != 2 || !rows[0].Quiet || !rows[0].LastBeat.Equal(now) {
		t.Errorf("processes after reopen = %+v", rows)
	}
}

// A command given through one handle reaches the process's beat through
// another, as it does across processes.
func testProcessShared(t *testing.T, e *env) {
	other := e.share(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	beat(t, e.st, &store.ProcessBeatParams{Process: procAt("p", now, 0), Now: now})
	if _, err := other.ProcessCommand(t.Context(), &store.ProcessCommandParams{ID: "p", Command: store.ProcessStop}); err != nil {
		t.Fatal(err)
	}
	if got := beat(t, e.st, &store.ProcessBeatParams{Process: procAt("p", now, 0), Now: now.Add(time.Second)}); !got.Stop {
		t.Errorf("beat after a stop given through another handle = %+v", got)
	}
	if rows := processes(t, other); len(rows) != 1 || rows[0].ID != "p" {
		t.Errorf("the other handle lists %v", rows)
	}
}
