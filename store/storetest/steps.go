package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

var stepsCases = []testCase{
	{name: "RecordAndList", run: testStepsRecordAndList},
	{name: "RecordedOnce", run: testStepsRecordedOnce},
	{name: "RecordFenced", run: testStepsRecordFenced},
	{name: "RecordInvalid", run: testStepsRecordInvalid},
	{name: "KeptThroughEveryEnd", run: testStepsKeptThroughEveryEnd},
	{name: "Sleep", run: testStepsSleep},
	{name: "SleepAgainKeepsWakeTime", run: testStepsSleepAgain},
	{name: "SleepFencedOrCancelled", run: testStepsSleepFenced},
	{name: "SleepInvalid", run: testStepsSleepInvalid},
	{name: "SpawnOnce", run: testStepsSpawnOnce},
	{name: "SpawnFenced", run: testStepsSpawnFenced},
	{name: "SpawnInvalid", run: testStepsSpawnInvalid},
	{name: "AwaitNothingPending", run: testStepsAwaitNothingPending},
	{name: "AwaitReleasedByLastChild", run: testStepsAwaitReleased},
	{name: "AwaitChildrenEndAnyWay", run: testStepsAwaitAnyEnd},
	{name: "AwaitRetriedChild", run: testStepsAwaitRetriedChild},
	{name: "AwaitOneStepOfTwo", run: testStepsAwaitOneOfTwo},
	{name: "AwaitFencedOrInvalid", run: testStepsAwaitFenced},
	{name: "CancelParentMidAwait", run: testStepsCancelParentMidAwait},
	{name: "CancelRunningParent", run: testStepsCancelRunningParent},
	{name: "DeleteParentMidSleep", run: testStepsDeleteParentMidSleep},
	{name: "CancelParentMidSleep", run: testStepsCancelParentMidSleep},
	{name: "DeleteParentMidAwait", run: testStepsDeleteParentMidAwait},
	{name: "PruneKeepsChildrenOfParent", run: testStepsPruneChildren},
	{name: "TenThousandChildren", run: testStepsTenThousandChildren},
	{name: "Import", run: testStepsImport},
	{name: "ImportAwaitAcrossCalls", run: testStepsImportAwait},
	{name: "SurviveReopen", durable: true, run: testStepsSurviveReopen},
	{name: "AwaitAcrossHandles", shared: true, run: testStepsAwaitShared},
}

// stepsOn runs the step cases only on a store that has steps: a store
// whose Harness says NoSteps must return store.ErrUnsupported from every
// step method, and the case is skipped once that is checked.
func stepsOn(t *testing.T, e *env) {
	t.Helper()
	if !e.h.NoSteps {
		return
	}
	ctx := t.Context()
	now := at(0)
	calls := map[string]error{}
	_, calls["StepList"] = e.st.StepList(ctx, &store.StepListParams{ID: 1})
	_, calls["StepRecord"] = e.st.StepRecord(ctx, &store.StepRecordParams{Now: now,
		Steps: []*store.StepRecord{{ID: 1, ClaimToken: 1, Name: "s", Result: []byte(`1`)}}})
	_, calls["StepSleep"] = e.st.StepSleep(ctx, &store.StepSleepParams{ID: 1, ClaimToken: 1, Name: "s", Until: now, Now: now})
	_, calls["StepSpawn"] = e.st.StepSpawn(ctx, &store.StepSpawnParams{ID: 1, ClaimToken: 1, Name: "s", Jobs: []*store.NewJob{newJob("c")}, Now: now})
	_, calls["StepAwait"] = e.st.StepAwait(ctx, &store.StepAwaitParams{ID: 1, ClaimToken: 1, Name: "s", Now: now})
	_, calls["JobList(ParentID)"] = e.st.JobList(ctx, &store.JobListParams{ParentID: 1, Limit: 1})
	for name, err := range calls {
		if !errors.Is(err, store.ErrUnsupported) {
			t.Errorf("Harness.NoSteps is set but %s returned %v, want store.ErrUnsupported", name, err)
		}
	}
	t.Skip("Harness.NoSteps: this store returns store.ErrUnsupported for durable steps")
}

// record records steps at now and returns the results.
func record(t testing.TB, st store.Store, now time.Time, recs ...*store.StepRecord) []store.StepResult {
	t.Helper()
	res, err := st.StepRecord(t.Context(), &store.StepRecordParams{Steps: recs, Now: now})
	if err != nil {
		t.Fatalf("StepRecord(%d steps) error: %v", len(recs), err)
	}
	if len(res) != len(recs) {
		t.Fatalf("StepRecord(%d steps) returned %d results", len(recs), len(res))
	}
	return res
}

// stepRec is a step of row's attempt named name with result.
func stepRec(row *store.JobRow, name, result string) *store.StepRecord {
	return &store.StepRecord{ID: row.ID, ClaimToken: row.ClaimToken, Name: name, Result: []byte(result)}
}

// stepList returns job id's steps, whole.
func stepList(t testing.TB, st store.Store, id int64) []store.JobStep {
	t.Helper()
	list, err := st.StepList(t.Context(), &store.StepListParams{ID: id})
	if err != nil {
		t.Fatalf("StepList(job %d) error: %v", id, err)
	}
	return list
}

// stepNames returns the names of list, in order.
func stepNames(list []store.JobStep) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.Name
	}
	return out
}

// sleepAt ends row's attempt at sleep step name until until.
func sleepAt(t testing.TB, st store.Store, now time.Time, row *store.JobRow, name string, until time.Time) *store.StepResult {
	t.Helper()
	res, err := st.StepSleep(t.Context(), &store.StepSleepParams{ID: row.ID, ClaimToken: row.ClaimToken, Name: name, Until: until, Now: now})
	if err != nil {
		t.Fatalf("StepSleep(job %d, %q) error: %v", row.ID, name, err)
	}
	return res
}

// spawnAt spawns jobs as row's step name.
func spawnAt(t testing.TB, st store.Store, now time.Time, row *store.JobRow, name string, cancelWithParent bool, jobs ...*store.NewJob) *store.StepResult {
	t.Helper()
	res, err := st.StepSpawn(t.Context(), &store.StepSpawnParams{ID: row.ID, ClaimToken: row.ClaimToken, Name: name,
		Jobs: jobs, CancelWithParent: cancelWithParent, Now: now})
	if err != nil {
		t.Fatalf("StepSpawn(job %d, %q) error: %v", row.ID, name, err)
	}
	return res
}

// awaitAt ends row's attempt at an Await of spawn step name, unless none
// of its children is pending.
func awaitAt(t testing.TB, st store.Store, now time.Time, row *store.JobRow, name string) *store.StepResult {
	t.Helper()
	res, err := st.StepAwait(t.Context(), &store.StepAwaitParams{ID: row.ID, ClaimToken: row.ClaimToken, Name: name, Now: now})
	if err != nil {
		t.Fatalf("StepAwait(job %d, %q) error: %v", row.ID, name, err)
	}
	return res
}

// children returns n child jobs of kind in queue.
func children(n int, kind, queue string) []*store.NewJob {
	out := make([]*store.NewJob, n)
	for i := range out {
		out[i] = newJobIn(kind, queue)
		out[i].Args = fmt.Appendf(nil, `{"n":%d}`, i)
	}
	return out
}

// parentRunning enqueues and claims a parent job in the default queue.
func parentRunning(t testing.TB, st store.Store, now time.Time) *store.JobRow {
	t.Helper()
	id := enqueueOne(t, st, now, newJob("parent"))
	return fetchID(t, st, now, id)
}

// claimN claims n available jobs of queue at now.
func claimN(t testing.TB, st store.Store, now time.Time, queue string, n int) []*store.JobRow {
	t.Helper()
	var out []*store.JobRow
	for len(out) < n {
		rows := fetch(t, st, &store.JobFetchParams{Queue: queue, Limit: min(n-len(out), 500), Now: now, Lease: lease})
		if len(rows) == 0 {
			t.Fatalf("JobFetch(queue %q) found no more jobs after %d, want %d", queue, len(out), n)
		}
		out = append(out, rows...)
	}
	return out
}

// completeAll completes rows in batches of 500.
func completeAll(t testing.TB, st store.Store, now time.Time, rows []*store.JobRow) {
	t.Helper()
	for len(rows) > 0 {
		k := min(len(rows), 500)
		outs := make([]*store.Report, k)
		for i, r := range rows[:k] {
			outs[i] = &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted, Result: []byte(`"done"`)}
		}
		for i, r := range finish(t, st, now, outs...) {
			if !r.Applied {
				t.Fatalf("JobFinish(complete job %d) not applied", outs[i].ID)
			}
		}
		rows = rows[k:]
	}
}

// Steps are recorded under the attempt's claim, in order, with the
// attempt, time, size and result; StepList returns them whole, JobGet and
// JobList without results.
func testStepsRecordAndList(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	b := parentRunning(t, e.st, now)
	res := record(t, e.st, now, stepRec(a, "charge", `{"id":"ch_1"}`), stepRec(b, "charge", `42`), stepRec(a, "receipt", `null`))
	for i, r := range res {
		if !r.Applied || r.Exists {
			t.Errorf("StepRecord result %d = %+v, want Applied and not Exists", i, r)
		}
	}
	later := now.Add(time.Second)
	record(t, e.st, later, stepRec(a, "ledger", `[1,2]`))
	want := []store.JobStep{
		{Name: "charge", Kind: store.StepRun, Attempt: 1, RecordedAt: now, Size: 13, Result: []byte(`{"id":"ch_1"}`)},
		{Name: "receipt", Kind: store.StepRun, Attempt: 1, RecordedAt: now, Size: 4, Result: []byte(`null`)},
		{Name: "ledger", Kind: store.StepRun, Attempt: 1, RecordedAt: later, Size: 5, Result: []byte(`[1,2]`)},
	}
	if diff := cmp.Diff(want, stepList(t, e.st, a.ID), stepOpts); diff != "" {
		t.Errorf("StepList(job %d) (-want +got):\n%s", a.ID, diff)
	}
	if got := stepList(t, e.st, b.ID); len(got) != 1 || string(got[0].Result) != "42" {
		t.Errorf("StepList(job %d) = %+v, want one step with result 42", b.ID, got)
	}
	summary := make([]store.JobStep, len(want))
	for i, s := range want {
		s.Result = nil
		summary[i] = s
	}
	if diff := cmp.Diff(summary, get(t, e.st, a.ID).Steps, stepOpts); diff != "" {
		t.Errorf("JobGet(job %d).Steps (-want +got):\n%s", a.ID, diff)
	}
	for _, row := range list(t, e.st, store.JobListParams{Limit: 10}) {
		if row.ID == a.ID {
			if diff := cmp.Diff(summary, row.Steps, stepOpts); diff != "" {
				t.Errorf("JobList: job %d Steps (-want +got):\n%s", a.ID, diff)
			}
		}
	}
	if _, err := e.st.StepList(t.Context(), &store.StepListParams{ID: 9999}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("StepList(unknown job) error = %v, want ErrNotFound", err)
	}
	if got := stepList(t, e.st, enqueueOne(t, e.st, now, newJob("plain"))); len(got) != 0 {
		t.Errorf("StepList(job without steps) = %v, want none", got)
	}
}

// stepOpts compares steps: times with Equal, JSON results as bytes.
var stepOpts = rowOpts

// A name recorded once keeps its first result, in the same call or later.
func testStepsRecordedOnce(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	res := record(t, e.st, now, stepRec(a, "charge", `1`), stepRec(a, "charge", `2`))
	if !res[0].Applied || res[0].Exists || !res[1].Applied || !res[1].Exists {
		t.Errorf("StepRecord(charge twice in one call) = %+v, want the second Exists", res)
	}
	res = record(t, e.st, now.Add(time.Second), stepRec(a, "charge", `3`))
	if !res[0].Applied || !res[0].Exists {
		t.Errorf("StepRecord(charge again) = %+v, want Applied and Exists", res[0])
	}
	if got := stepList(t, e.st, a.ID); len(got) != 1 || string(got[0].Result) != "1" || !got[0].RecordedAt.Equal(now) {
		t.Errorf("StepList = %+v, want the first record of charge only", got)
	}
}

// A stale claim records nothing: after a rescue and a new claim, after an
// outcome, for an unknown job.
func testStepsRecordFenced(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	later := now.Add(time.Hour)
	wantRescued(t, e.st, later, 10, 1)
	b := fetchID(t, e.st, later, a.ID)
	res := record(t, e.st, later, stepRec(a, "stale", `1`), stepRec(b, "fresh", `2`),
		&store.StepRecord{ID: 9999, ClaimToken: 1, Name: "unknown", Result: []byte(`3`)})
	if res[0].Applied || !res[1].Applied || res[2].Applied {
		t.Errorf("StepRecord(stale, fresh, unknown) = %+v, want only the fresh one Applied", res)
	}
	complete(t, e.st, later, b)
	if res := record(t, e.st, later, stepRec(b, "after", `1`)); res[0].Applied {
		t.Errorf("StepRecord after the outcome: Applied = true, want false")
	}
	if got := stepNames(stepList(t, e.st, a.ID)); !cmp.Equal(got, []string{"fresh"}) {
		t.Errorf("steps = %v, want [fresh]", got)
	}
}

// Invalid steps fail the whole call with ErrInvalidArgument; nothing is
// recorded.
func testStepsRecordInvalid(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	for _, bad := range []*store.StepRecord{
		stepRec(a, "", `1`),
		stepRec(a, strings.Repeat("n", store.MaxStepNameLen+1), `1`),
		stepRec(a, "bad\xff", `1`),
		stepRec(a, "notjson", `{`),
		stepRec(a, "empty", ``),
	} {
		_, err := e.st.StepRecord(t.Context(), &store.StepRecordParams{Now: now, Steps: []*store.StepRecord{stepRec(a, "ok", `1`), bad}})
		if !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("StepRecord(name %.20q, result %q) error = %v, want ErrInvalidArgument", bad.Name, bad.Result, err)
		}
	}
	if got := stepList(t, e.st, a.ID); len(got) != 0 {
		t.Errorf("steps after refused calls = %v, want none", stepNames(got))
	}
	if res := record(t, e.st, now, stepRec(a, strings.Repeat("é", store.MaxStepNameLen/2), `1`)); !res[0].Applied {
		t.Errorf("StepRecord(a %d-byte name) not applied", store.MaxStepNameLen-1)
	}
}

// Recorded steps outlive every end of an attempt: a failure, a snooze, a
// release, a rescue; the next attempt lists them.
func testStepsKeptThroughEveryEnd(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	ends := []func(row *store.JobRow, now time.Time){
		func(row *store.JobRow, now time.Time) {
			finishOne(t, e.st, now, &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportFailed,
				Error: failure(row, now, "boom"), RunAt: now}, store.JobStateRetrying)
		},
		func(row *store.JobRow, now time.Time) {
			finishOne(t, e.st, now, &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportSnoozed, RunAt: now}, store.JobStateAvailable)
		},
		func(row *store.JobRow, now time.Time) {
			finishOne(t, e.st, now, &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportReleased}, store.JobStateAvailable)
		},
		func(row *store.JobRow, now time.Time) { wantRescued(t, e.st, now.Add(time.Hour), 10, 1) },
	}
	row := a
	var names []string
	for i, end := range ends {
		name := fmt.Sprintf("step-%d", i)
		record(t, e.st, now, stepRec(row, name, fmt.Sprint(i)))
		names = append(names, name)
		end(row, now)
		now = now.Add(2 * time.Hour)
		row = fetchID(t, e.st, now, a.ID)
		if got := stepNames(stepList(t, e.st, a.ID)); !cmp.Equal(got, names) {
			t.Fatalf("after end %d, steps = %v, want %v", i, got, names)
		}
	}
	if got := stepList(t, e.st, a.ID); got[0].Attempt != 1 {
		t.Errorf("first step's Attempt = %d, want 1", got[0].Attempt)
	}
}

// A sleep records its wake time and ends the attempt without counting it:
// the job is scheduled at the wake time, waiting at the step, its lease
// cleared; no fetch claims it before then, one claims it then and clears
// WaitsFor.
func testStepsSleep(t *testing.T, e *env) {
	stepsOn(t, e)
	w, watchable := watch(t, e.st, defaultQueue)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	record(t, e.st, now, stepRec(a, "charge", `1`))
	until := now.Add(72 * time.Hour)
	if watchable {
		drain(t, w)
	}
	res := sleepAt(t, e.st, now, a, "cool-off", until)
	if !res.Applied || !res.Suspended || res.Exists || res.State != store.JobStateScheduled {
		t.Errorf("StepSleep = %+v, want Applied, Suspended, state scheduled", res)
	}
	if watchable {
		waitSignal(t, w, "a sleep")
	}
	row := wantState(t, e.st, a.ID, store.JobStateScheduled)
	if row.Attempt != 0 || !row.RunAt.Equal(until) || !row.LeaseUntil.IsZero() || row.WaitsFor != "cool-off" {
		t.Errorf("sleeping job: Attempt %d, RunAt %v, LeaseUntil %v, WaitsFor %q; want 0, %v, zero, cool-off",
			row.Attempt, row.RunAt, row.LeaseUntil, row.WaitsFor, until)
	}
	want := []store.JobStep{
		{Name: "charge", Kind: store.StepRun, Attempt: 1, RecordedAt: now, Size: 1},
		{Name: "cool-off", Kind: store.StepSleep, Attempt: 1, RecordedAt: now, Until: until},
	}
	if diff := cmp.Diff(want, row.Steps, stepOpts); diff != "" {
		t.Errorf("sleeping job's Steps (-want +got):\n%s", diff)
	}
	fetchNone(t, e.st, until.Add(-time.Microsecond))
	b := fetchID(t, e.st, until, a.ID)
	if b.Attempt != 1 || b.WaitsFor != "" {
		t.Errorf("claim after the sleep: Attempt %d, WaitsFor %q; want 1 and empty", b.Attempt, b.WaitsFor)
	}
	if got := get(t, e.st, a.ID).WaitsFor; got != "" {
		t.Errorf("running job's WaitsFor = %q, want empty", got)
	}
}

// Sleeping again at a recorded step keeps its wake time; a wake time that
// has passed makes the job available at once.
func testStepsSleepAgain(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	until := now.Add(time.Hour)
	sleepAt(t, e.st, now, a, "nap", until)
	// The process died after the sleep was recorded and the job came back
	// early (an operator retried it): the recorded wake time holds.
	if _, err := e.st.JobRetry(t.Context(), &store.JobRetryParams{ID: a.ID, Now: now}); err != nil {
		t.Fatalf("JobRetry: %v", err)
	}
	if got := get(t, e.st, a.ID).WaitsFor; got != "" {
		t.Errorf("retried job's WaitsFor = %q, want empty", got)
	}
	b := fetchID(t, e.st, now.Add(time.Second), a.ID)
	res := sleepAt(t, e.st, now.Add(time.Second), b, "nap", now.Add(48*time.Hour))
	if !res.Exists || res.State != store.JobStateScheduled {
		t.Errorf("StepSleep again = %+v, want Exists and scheduled", res)
	}
	if row := get(t, e.st, a.ID); !row.RunAt.Equal(until) {
		t.Errorf("RunAt after sleeping again = %v, want the recorded %v", row.RunAt, until)
	}
	c := fetchID(t, e.st, until, a.ID)
	res = sleepAt(t, e.st, until.Add(time.Minute), c, "nap", until.Add(time.Hour))
	if !res.Exists || res.State != store.JobStateAvailable {
		t.Errorf("StepSleep past its wake time = %+v, want Exists and available", res)
	}
	if row := wantState(t, e.st, a.ID, store.JobStateAvailable); row.WaitsFor != "" {
		t.Errorf("available job's WaitsFor = %q, want empty", row.WaitsFor)
	}
	if got := stepList(t, e.st, a.ID); len(got) != 1 {
		t.Errorf("steps = %v, want the one sleep", stepNames(got))
	}
}

// A stale claim sleeps nothing; a job asked to stop is not suspended; a
// name recorded as another kind is refused.
func testStepsSleepFenced(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	stale := *a
	stale.ClaimToken = a.ClaimToken + 1000
	before := get(t, e.st, a.ID)
	if res := sleepAt(t, e.st, now, &stale, "nap", now.Add(time.Hour)); res.Applied || res.Suspended {
		t.Errorf("StepSleep with a stale claim = %+v, want nothing applied", res)
	}
	if _, err := e.st.JobCancel(t.Context(), &store.JobCancelParams{ID: a.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	before.CancelRequested = true
	if res := sleepAt(t, e.st, now, a, "nap", now.Add(time.Hour)); !res.Applied || !res.CancelRequested || res.Suspended {
		t.Errorf("StepSleep of a job asked to stop = %+v, want Applied and CancelRequested only", res)
	}
	if diff := diffRow(before, get(t, e.st, a.ID)); diff != "" {
		t.Errorf("refused sleeps changed the job (-before +after):\n%s", diff)
	}
	b := parentRunning(t, e.st, now)
	record(t, e.st, now, stepRec(b, "charge", `1`))
	_, err := e.st.StepSleep(t.Context(), &store.StepSleepParams{ID: b.ID, ClaimToken: b.ClaimToken, Name: "charge", Until: now.Add(time.Hour), Now: now})
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("StepSleep at a recorded step of another kind: error = %v, want ErrInvalidArgument", err)
	}
	wantState(t, e.st, b.ID, store.JobStateRunning)
}

// A sleep's name and wake time are checked.
func testStepsSleepInvalid(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	for _, p := range []store.StepSleepParams{
		{Name: "", Until: now},
		{Name: "nap", Until: store.LatestRunAt.Add(time.Hour)},
		{Name: "nap", Until: store.EarliestRunAt.Add(-time.Hour)},
	} {
		p.ID, p.ClaimToken, p.Now = a.ID, a.ClaimToken, now
		if _, err := e.st.StepSleep(t.Context(), &p); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("StepSleep(name %q, until %v) error = %v, want ErrInvalidArgument", p.Name, p.Until, err)
		}
	}
	wantState(t, e.st, a.ID, store.JobStateRunning)
}

// A spawn enqueues its children once, linked to the parent and its step,
// and records their IDs; the same spawn again enqueues nothing.
func testStepsSpawnOnce(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	kids := children(3, "thumb", "thumbs")
	kids[2].DependsOnIndex = []int{0}
	kids[1].RunAt = now.Add(time.Hour)
	res := spawnAt(t, e.st, now, a, "thumbnails", true, kids...)
	if !res.Applied || res.Exists || len(res.Children) != 3 {
		t.Fatalf("StepSpawn = %+v, want Applied with 3 children", res)
	}
	for i, id := range res.Children {
		c := get(t, e.st, id)
		if c.ParentID != a.ID || c.SpawnStep != "thumbnails" || !c.CancelWithParent || c.Kind != "thumb" || c.Queue != "thumbs" {
			t.Errorf("child %d: ParentID %d, SpawnStep %q, CancelWithParent %v, kind %q, queue %q; want %d, thumbnails, true, thumb, thumbs",
				id, c.ParentID, c.SpawnStep, c.CancelWithParent, c.Kind, c.Queue, a.ID)
		}
		if want := []store.JobState{store.JobStateAvailable, store.JobStateScheduled, store.JobStateWaiting}[i]; c.State != want {
			t.Errorf("child %d: State %q, want %q", id, c.State, want)
		}
	}
	if got := listIDs(t, e.st, store.JobListParams{ParentID: a.ID, Limit: 10}); !cmp.Equal(got, res.Children) {
		t.Errorf("JobList(ParentID %d) = %v, want %v", a.ID, got, res.Children)
	}
	want := []store.JobStep{{Name: "thumbnails", Kind: store.StepSpawn, Attempt: 1, RecordedAt: now, ChildCount: 3, Children: res.Children, Pending: 3}}
	if diff := cmp.Diff(want, stepList(t, e.st, a.ID), stepOpts); diff != "" {
		t.Errorf("StepList (-want +got):\n%s", diff)
	}
	again := spawnAt(t, e.st, now.Add(time.Second), a, "thumbnails", false, children(5, "thumb", "thumbs")...)
	if !again.Applied || !again.Exists || !cmp.Equal(again.Children, res.Children) {
		t.Errorf("StepSpawn again = %+v, want Exists with the recorded children %v", again, res.Children)
	}
	if got := counts(t, e.st, "thumbs"); got[countKey{"thumbs", store.JobStateAvailable}]+got[countKey{"thumbs", store.JobStateScheduled}]+got[countKey{"thumbs", store.JobStateWaiting}] != 3 {
		t.Errorf("counts of queue thumbs = %v, want the 3 children only", got)
	}
}

// A stale claim spawns nothing.
func testStepsSpawnFenced(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	complete(t, e.st, now, a)
	if res := spawnAt(t, e.st, now, a, "kids", false, children(2, "c", "kids")...); res.Applied || len(res.Children) != 0 {
		t.Errorf("StepSpawn with a stale claim = %+v, want nothing applied", res)
	}
	if got := counts(t, e.st, "kids"); len(got) != 0 {
		t.Errorf("counts of queue kids = %v, want none", got)
	}
	if got := stepList(t, e.st, a.ID); len(got) != 0 {
		t.Errorf("steps = %v, want none", stepNames(got))
	}
}

// Children with a unique key, none, an invalid one, or a name recorded as
// another kind fail the spawn with ErrInvalidArgument; nothing is enqueued.
func testStepsSpawnInvalid(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	record(t, e.st, now, stepRec(a, "charge", `1`))
	keyed := newJobIn("c", "kids")
	keyed.UniqueKey = "k"
	noKind := newJobIn("", "kids")
	for _, p := range []store.StepSpawnParams{
		{Name: "kids", Jobs: []*store.NewJob{newJobIn("c", "kids"), keyed}},
		{Name: "kids"},
		{Name: "kids", Jobs: []*store.NewJob{noKind}},
		{Name: "", Jobs: []*store.NewJob{newJobIn("c", "kids")}},
		{Name: "charge", Jobs: []*store.NewJob{newJobIn("c", "kids")}},
	} {
		p.ID, p.ClaimToken, p.Now = a.ID, a.ClaimToken, now
		if _, err := e.st.StepSpawn(t.Context(), &p); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("StepSpawn(%q, %d jobs) error = %v, want ErrInvalidArgument", p.Name, len(p.Jobs), err)
		}
	}
	if got := counts(t, e.st, "kids"); len(got) != 0 {
		t.Errorf("counts of queue kids = %v, want none", got)
	}
}

// An Await whose children all finished changes nothing.
func testStepsAwaitNothingPending(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	spawnAt(t, e.st, now, a, "kids", false, children(2, "c", "kids")...)
	completeAll(t, e.st, now, claimN(t, e.st, now, "kids", 2))
	before := get(t, e.st, a.ID)
	if res := awaitAt(t, e.st, now, a, "kids"); !res.Applied || res.Suspended {
		t.Errorf("StepAwait with no child pending = %+v, want Applied and not Suspended", res)
	}
	if diff := diffRow(before, get(t, e.st, a.ID)); diff != "" {
		t.Errorf("StepAwait with no child pending changed the job (-before +after):\n%s", diff)
	}
}

// An Await with children pending ends the attempt: the job waits at the
// step, uncounted, leaseless. Each child's end lowers Pending; the last
// one makes the parent available and signals its queue.
func testStepsAwaitReleased(t *testing.T, e *env) {
	stepsOn(t, e)
	w, watchable := watch(t, e.st, defaultQueue)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	spawnAt(t, e.st, now, a, "kids", false, children(3, "c", "kids")...)
	later := now.Add(time.Second)
	res := awaitAt(t, e.st, later, a, "kids")
	if !res.Applied || !res.Suspended || res.State != store.JobStateWaiting {
		t.Fatalf("StepAwait = %+v, want Suspended and waiting", res)
	}
	row := wantState(t, e.st, a.ID, store.JobStateWaiting)
	if row.Attempt != 0 || !row.LeaseUntil.IsZero() || row.WaitsFor != "kids" || !row.RunAt.Equal(later) {
		t.Errorf("awaiting job: Attempt %d, LeaseUntil %v, WaitsFor %q, RunAt %v; want 0, zero, kids, %v",
			row.Attempt, row.LeaseUntil, row.WaitsFor, row.RunAt, later)
	}
	kids := claimN(t, e.st, later, "kids", 3)
	for i, k := range kids[:2] {
		complete(t, e.st, later, k)
		if got := get(t, e.st, a.ID); got.State != store.JobStateWaiting || got.Steps[0].Pending != 2-i {
			t.Fatalf("after %d children completed: parent %s with Pending %d, want waiting with %d", i+1, got.State, got.Steps[0].Pending, 2-i)
		}
	}
	fetchNone(t, e.st, later)
	if watchable {
		drain(t, w)
	}
	complete(t, e.st, later, kids[2])
	if watchable {
		waitSignal(t, w, "the last child completed")
	}
	row = wantState(t, e.st, a.ID, store.JobStateAvailable)
	if row.WaitsFor != "" || row.Steps[0].Pending != 0 {
		t.Errorf("released parent: WaitsFor %q, Pending %d; want empty and 0", row.WaitsFor, row.Steps[0].Pending)
	}
	b := fetchID(t, e.st, later, a.ID)
	if b.Attempt != 1 {
		t.Errorf("resumed parent's Attempt = %d, want 1 (the await counted none)", b.Attempt)
	}
	if res := awaitAt(t, e.st, later, b, "kids"); !res.Applied || res.Suspended {
		t.Errorf("StepAwait after the children = %+v, want not Suspended", res)
	}
}

// A child ends in any way that leaves the pending states: dead, cancelled
// by its handler or an operator, deleted, rescued out of attempts, dropped
// by a full queue, or cancelled with its dependency. The parent is
// released by the last.
func testStepsAwaitAnyEnd(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	kids := children(7, "c", "kids")
	for _, k := range kids {
		k.MaxAttempts = 1
	}
	kids[6].DependsOnIndex = []int{5}
	ids := spawnAt(t, e.st, now, a, "kids", false, kids...).Children
	awaitAt(t, e.st, now, a, "kids")
	ends := []func(){
		func() { // dead
			r := fetchID2(t, e.st, now, "kids", ids[0])
			finishOne(t, e.st, now, &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportFailed, Error: failure(r, now, "x")}, store.JobStateDead)
		},
		func() { // cancelled by its handler
			r := fetchID2(t, e.st, now, "kids", ids[1])
			finishOne(t, e.st, now, &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCancelled}, store.JobStateCancelled)
		},
		func() { // cancelled by an operator
			if _, err := e.st.JobCancel(t.Context(), &store.JobCancelParams{ID: ids[2], Now: now}); err != nil {
				t.Fatal(err)
			}
		},
		func() { // deleted
			if _, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: ids[3], Now: now}); err != nil {
				t.Fatal(err)
			}
		},
		func() { // rescued out of attempts
			fetchID2(t, e.st, now, "kids", ids[4])
			wantRescued(t, e.st, now.Add(time.Hour), 10, 1)
		},
		func() { // dropped by a full queue; its dependent is cancelled with it
			if _, err := e.st.QueueConfigure(t.Context(), &store.QueueConfigureParams{Queue: "kids", Now: now,
				Settings: store.QueueSettings{MaxDepth: 2, Overflow: store.OverflowDropOldest}}); err != nil {
				t.Fatal(err)
			}
			enqueue(t, e.st, now, newJobIn("filler", "kids"))
		},
	}
	for i, end := range ends {
		wantState(t, e.st, a.ID, store.JobStateWaiting)
		end()
		if i < len(ends)-1 && get(t, e.st, a.ID).Steps[0].Pending != 6-i {
			t.Fatalf("after end %d: Pending = %d, want %d", i, get(t, e.st, a.ID).Steps[0].Pending, 6-i)
		}
	}
	wantState(t, e.st, ids[5], store.JobStateCancelled)
	wantState(t, e.st, ids[6], store.JobStateCancelled)
	wantState(t, e.st, a.ID, store.JobStateAvailable)
}

// fetchID2 claims job id from queue at now.
func fetchID2(t testing.TB, st store.Store, now time.Time, queue string, id int64) *store.JobRow {
	t.Helper()
	rows := fetch(t, st, &store.JobFetchParams{Queue: queue, Limit: 1, Now: now, Lease: lease})
	if len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("JobFetch(queue %q) = %v, want job %d", queue, ids(rows), id)
	}
	return rows[0]
}

// A finished child retried while its parent awaits is pending again: the
// parent waits for it too.
func testStepsAwaitRetriedChild(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	ids := spawnAt(t, e.st, now, a, "kids", false, children(2, "c", "kids")...).Children
	first := fetchID2(t, e.st, now, "kids", ids[0])
	complete(t, e.st, now, first)
	awaitAt(t, e.st, now, a, "kids")
	if _, err := e.st.JobRetry(t.Context(), &store.JobRetryParams{ID: ids[0], Now: now}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, e.st, a.ID).Steps[0].Pending; got != 2 {
		t.Fatalf("Pending after a child was retried = %d, want 2", got)
	}
	rows := claimN(t, e.st, now, "kids", 2)
	complete(t, e.st, now, rows[0])
	wantState(t, e.st, a.ID, store.JobStateWaiting)
	complete(t, e.st, now, rows[1])
	wantState(t, e.st, a.ID, store.JobStateAvailable)
}

// An Await waits for the children of its own step only.
func testStepsAwaitOneOfTwo(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	spawnAt(t, e.st, now, a, "first", false, children(1, "c", "one")...)
	spawnAt(t, e.st, now, a, "second", false, children(1, "c", "two")...)
	awaitAt(t, e.st, now, a, "second")
	complete(t, e.st, now, claimN(t, e.st, now, "one", 1)[0])
	wantState(t, e.st, a.ID, store.JobStateWaiting)
	complete(t, e.st, now, claimN(t, e.st, now, "two", 1)[0])
	wantState(t, e.st, a.ID, store.JobStateAvailable)
}

// An Await with a stale claim, of a job asked to stop, or of a step that
// is not one of its spawns changes nothing.
func testStepsAwaitFenced(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	spawnAt(t, e.st, now, a, "kids", false, children(1, "c", "kids")...)
	record(t, e.st, now, stepRec(a, "charge", `1`))
	stale := *a
	stale.ClaimToken += 1000
	if res := awaitAt(t, e.st, now, &stale, "kids"); res.Applied || res.Suspended {
		t.Errorf("StepAwait with a stale claim = %+v, want nothing applied", res)
	}
	for _, name := range []string{"charge", "nothing"} {
		_, err := e.st.StepAwait(t.Context(), &store.StepAwaitParams{ID: a.ID, ClaimToken: a.ClaimToken, Name: name, Now: now})
		if !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("StepAwait(%q) error = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := e.st.JobCancel(t.Context(), &store.JobCancelParams{ID: a.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	if res := awaitAt(t, e.st, now, a, "kids"); !res.CancelRequested || res.Suspended {
		t.Errorf("StepAwait of a job asked to stop = %+v, want CancelRequested and not Suspended", res)
	}
	wantState(t, e.st, a.ID, store.JobStateRunning)
}

// parentWithChildren returns a running parent that spawned linked
// children at step "linked" (CancelWithParent, in queue "linked") and one
// child at step "free" (not, in queue "free"), and their IDs.
func parentWithChildren(t testing.TB, st store.Store, now time.Time, linked int) (a *store.JobRow, linkedIDs, freeIDs []int64) {
	t.Helper()
	a = parentRunning(t, st, now)
	linkedIDs = spawnAt(t, st, now, a, "linked", true, children(linked, "c", "linked")...).Children
	freeIDs = spawnAt(t, st, now, a, "free", false, children(1, "c", "free")...).Children
	return a, linkedIDs, freeIDs
}

// cancelParent cancels parent job id, which waits (asleep or awaiting) or
// runs no longer: it ends cancelled, waiting for nothing.
func cancelParent(t testing.TB, st store.Store, id int64, now time.Time) {
	t.Helper()
	got, err := st.JobCancel(t.Context(), &store.JobCancelParams{ID: id, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.JobStateCancelled || got.WaitsFor != "" {
		t.Errorf("JobCancel(parent %d) = state %q, WaitsFor %q; want cancelled, empty", id, got.State, got.WaitsFor)
	}
}

// wantCancelledChild fails t unless child job id was cancelled with a last
// error that says why: its message holds why (the parent's ID, or
// "deleted").
func wantCancelledChild(t testing.TB, st store.Store, id int64, why string) {
	t.Helper()
	c := wantState(t, st, id, store.JobStateCancelled)
	if n := len(c.Errors); n == 0 || !strings.Contains(c.Errors[n-1].Message, why) {
		t.Errorf("cancelled child %d's errors = %v, want the last to say %q", id, c.Errors, why)
	}
}

// wantFreeChild fails t unless child job id, spawned without
// CancelWithParent, is still available with its ParentID kept.
func wantFreeChild(t testing.TB, st store.Store, id, parent int64) {
	t.Helper()
	f := wantState(t, st, id, store.JobStateAvailable)
	if f.ParentID != parent {
		t.Errorf("free child %d's ParentID = %d, want %d kept", id, f.ParentID, parent)
	}
}

// Cancelling a parent mid-await cancels its pending children spawned with
// CancelWithParent, and theirs, and leaves the others alone.
func testStepsCancelParentMidAwait(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a, linked, free := parentWithChildren(t, e.st, now, 2)
	// linked[0] is itself a parent of a linked grandchild.
	child := fetchID2(t, e.st, now, "linked", linked[0])
	grand := spawnAt(t, e.st, now, child, "grand", true, children(1, "g", "grand")...).Children
	awaitAt(t, e.st, now, child, "grand")
	done := fetchID2(t, e.st, now, "linked", linked[1])
	complete(t, e.st, now, done)
	awaitAt(t, e.st, now, a, "linked")
	cancelParent(t, e.st, a.ID, now)
	wantCancelledChild(t, e.st, linked[0], fmt.Sprint(a.ID))
	wantState(t, e.st, grand[0], store.JobStateCancelled)
	wantState(t, e.st, linked[1], store.JobStateCompleted)
	wantState(t, e.st, free[0], store.JobStateAvailable)
}

// Cancelling a running parent asks its running linked children to stop
// and cancels its queued ones.
func testStepsCancelRunningParent(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	ids := spawnAt(t, e.st, now, a, "kids", true, children(2, "c", "kids")...).Children
	running := fetchID2(t, e.st, now, "kids", ids[0])
	if _, err := e.st.JobCancel(t.Context(), &store.JobCancelParams{ID: a.ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, e.st, a.ID); !got.CancelRequested {
		t.Error("running parent: CancelRequested = false, want true")
	}
	if got := wantState(t, e.st, running.ID, store.JobStateRunning); !got.CancelRequested {
		t.Error("running child: CancelRequested = false, want true")
	}
	wantState(t, e.st, ids[1], store.JobStateCancelled)
}

// Deleting a parent mid-sleep cancels its linked pending children, deletes
// its steps, and leaves its other children alone.
func testStepsDeleteParentMidSleep(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a, linked, free := parentWithChildren(t, e.st, now, 1)
	sleepAt(t, e.st, now, a, "nap", now.Add(24*time.Hour))
	row, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: a.ID, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if row.WaitsFor != "nap" || len(row.Steps) != 3 {
		t.Errorf("JobDelete returned WaitsFor %q with %d steps, want nap and 3", row.WaitsFor, len(row.Steps))
	}
	if _, err := e.st.StepList(t.Context(), &store.StepListParams{ID: a.ID}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("StepList of the deleted job: error = %v, want ErrNotFound", err)
	}
	wantCancelledChild(t, e.st, linked[0], "deleted")
	wantFreeChild(t, e.st, free[0], a.ID)
}

// Cancelling a parent mid-sleep ends its sleep: it is cancelled, waits for
// nothing, keeps its steps, cancels its pending children spawned with
// CancelWithParent and leaves the others alone.
func testStepsCancelParentMidSleep(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a, linked, free := parentWithChildren(t, e.st, now, 1)
	record(t, e.st, now, stepRec(a, "charge", `1`))
	sleepAt(t, e.st, now, a, "nap", now.Add(24*time.Hour))
	cancelParent(t, e.st, a.ID, now)
	if steps := stepList(t, e.st, a.ID); len(steps) != 4 {
		t.Errorf("the cancelled parent keeps %d steps, want 4 (charge, linked, free, nap)", len(steps))
	}
	wantCancelledChild(t, e.st, linked[0], fmt.Sprint(a.ID))
	wantFreeChild(t, e.st, free[0], a.ID)
	if _, err := e.st.JobFetch(t.Context(), &store.JobFetchParams{Queue: "default", Limit: 10, Now: now.Add(48 * time.Hour), Lease: lease}); err != nil {
		t.Fatal(err)
	}
	wantState(t, e.st, a.ID, store.JobStateCancelled)
}

// Deleting a parent mid-await deletes it and its steps, cancels its linked
// pending children and leaves the others alone, their ParentID kept.
func testStepsDeleteParentMidAwait(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a, linked, free := parentWithChildren(t, e.st, now, 2)
	if res := awaitAt(t, e.st, now, a, "linked"); !res.Suspended {
		t.Fatalf("StepAwait = %+v, want Suspended", res)
	}
	row, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: a.ID, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if row.ID != a.ID || len(row.Steps) != 2 {
		t.Errorf("JobDelete returned job %d with %d steps, want %d with 2", row.ID, len(row.Steps), a.ID)
	}
	if _, err := e.st.JobGet(t.Context(), &store.JobGetParams{ID: a.ID}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("JobGet of the deleted parent: error = %v, want ErrNotFound", err)
	}
	if _, err := e.st.StepList(t.Context(), &store.StepListParams{ID: a.ID}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("StepList of the deleted job: error = %v, want ErrNotFound", err)
	}
	for _, id := range linked {
		wantCancelledChild(t, e.st, id, "deleted")
	}
	wantFreeChild(t, e.st, free[0], a.ID)
}

// A finished child is not pruned while its parent is stored; it is once
// the parent is gone.
func testStepsPruneChildren(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	ids := spawnAt(t, e.st, now, a, "kids", false, children(2, "c", "kids")...).Children
	completeAll(t, e.st, now, claimN(t, e.st, now, "kids", 2))
	plain := enqueueOne(t, e.st, now, newJobIn("plain", "kids"))
	complete(t, e.st, now, fetchID2(t, e.st, now, "kids", plain))
	prune := func() int {
		n, err := e.st.JobPrune(t.Context(), &store.JobPruneParams{CompletedBefore: now.Add(time.Hour), Limit: 100, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := prune(); n != 1 {
		t.Errorf("JobPrune with the parent stored deleted %d jobs, want 1 (the plain one)", n)
	}
	wantState(t, e.st, ids[0], store.JobStateCompleted)
	complete(t, e.st, now, a)
	total := 0
	for n := prune(); n > 0; n = prune() {
		total += n
	}
	if total != 3 {
		t.Errorf("JobPrune after the parent completed deleted %d jobs, want 3 (the parent, then its children)", total)
	}
	if _, err := e.st.JobGet(t.Context(), &store.JobGetParams{ID: ids[1]}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("child after its parent was pruned: JobGet error = %v, want ErrNotFound", err)
	}
	if _, err := e.st.StepList(t.Context(), &store.StepListParams{ID: a.ID}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("StepList of the pruned parent: error = %v, want ErrNotFound (its steps go with it)", err)
	}
}

// Ten thousand children: the parent is released by the last, not before.
func testStepsTenThousandChildren(t *testing.T, e *env) {
	stepsOn(t, e)
	const n = 10_000
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	ids := spawnAt(t, e.st, now, a, "fan", false, children(n, "c", "fan")...).Children
	if len(ids) != n {
		t.Fatalf("StepSpawn returned %d children, want %d", len(ids), n)
	}
	awaitAt(t, e.st, now, a, "fan")
	rows := claimN(t, e.st, now, "fan", n)
	completeAll(t, e.st, now, rows[:n-1])
	if got := get(t, e.st, a.ID); got.State != store.JobStateWaiting || got.Steps[0].Pending != 1 {
		t.Fatalf("parent with one child left: %s, Pending %d; want waiting, 1", got.State, got.Steps[0].Pending)
	}
	completeAll(t, e.st, now, rows[n-1:])
	wantState(t, e.st, a.ID, store.JobStateAvailable)
	if got := listAll(t, e.st, store.JobListParams{ParentID: a.ID, Limit: 1000}); len(got) != n {
		t.Errorf("JobList(ParentID) paged %d children, want %d", len(got), n)
	}
}

// exportWithSteps returns every job of st as an export carries it: rows
// with their steps whole.
func exportWithSteps(t testing.TB, st store.Store) []*store.JobRow {
	t.Helper()
	rows := listAll(t, st, store.JobListParams{Limit: 500})
	for _, r := range rows {
		if len(r.Steps) > 0 {
			r.Steps = stepList(t, st, r.ID)
		}
	}
	return rows
}

// Import writes each job's steps as they were, a spawn step's Pending
// counted anew; the imported jobs go on where they stopped.
func testStepsImport(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	src := e.h.New(t)
	a := parentRunning(t, src, now)
	record(t, src, now, stepRec(a, "charge", `{"ok":true}`))
	kids := spawnAt(t, src, now, a, "kids", false, children(2, "c", "kids")...).Children
	sleepAt(t, src, now, a, "nap", now.Add(time.Hour))
	complete(t, src, now, fetchID2(t, src, now, "kids", kids[0]))
	rows := exportWithSteps(t, src)
	importRows(t, e.st, rows, false)
	if diff := cmp.Diff(stepList(t, src, a.ID), stepList(t, e.st, a.ID), stepOpts); diff != "" {
		t.Errorf("imported steps (-exported +imported):\n%s", diff)
	}
	if diff := diffRow(get(t, src, a.ID), get(t, e.st, a.ID)); diff != "" {
		t.Errorf("imported parent (-exported +imported):\n%s", diff)
	}
	c := get(t, e.st, kids[1])
	if c.ParentID != a.ID || c.SpawnStep != "kids" {
		t.Errorf("imported child: ParentID %d, SpawnStep %q; want %d, kids", c.ParentID, c.SpawnStep, a.ID)
	}
	b := fetchID(t, e.st, now.Add(time.Hour), a.ID)
	if res := awaitAt(t, e.st, now.Add(time.Hour), b, "kids"); !res.Suspended {
		t.Fatalf("StepAwait in the new store = %+v, want Suspended (one child pending)", res)
	}
	complete(t, e.st, now, fetchID2(t, e.st, now.Add(time.Hour), "kids", kids[1]))
	wantState(t, e.st, a.ID, store.JobStateAvailable)
}

// An awaiting parent imported before its children (a batch boundary)
// keeps waiting until every child is in the store and none is pending.
func testStepsImportAwait(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	src := e.h.New(t)
	a := parentRunning(t, src, now)
	kids := spawnAt(t, src, now, a, "kids", false, children(3, "c", "kids")...).Children
	complete(t, src, now, fetchID2(t, src, now, "kids", kids[0]))
	awaitAt(t, src, now, a, "kids")
	complete(t, src, now, fetchID2(t, src, now, "kids", kids[1]))
	rows := exportWithSteps(t, src) // parent waiting, kids: completed, completed, available
	importRows(t, e.st, rows[:2], false)
	wantState(t, e.st, a.ID, store.JobStateWaiting)
	importRows(t, e.st, rows[2:3], false)
	wantState(t, e.st, a.ID, store.JobStateWaiting)
	importRows(t, e.st, rows[3:], false)
	wantState(t, e.st, a.ID, store.JobStateWaiting)
	complete(t, e.st, now, fetchID2(t, e.st, now, "kids", kids[2]))
	wantState(t, e.st, a.ID, store.JobStateAvailable)

	// All children finished before the export: the last call releases.
	other := e.h.New(t)
	importRows(t, other, append(rows[:3:3], exportWithSteps(t, e.st)[3]), false)
	wantState(t, other, a.ID, store.JobStateAvailable)
}

// Steps, a sleep and an await survive a restart.
func testStepsSurviveReopen(t *testing.T, e *env) {
	stepsOn(t, e)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	record(t, e.st, now, stepRec(a, "charge", `"ch_1"`))
	kids := spawnAt(t, e.st, now, a, "kids", false, children(1, "c", "kids")...).Children
	awaitAt(t, e.st, now, a, "kids")
	b := parentRunning(t, e.st, now)
	sleepAt(t, e.st, now, b, "nap", now.Add(time.Hour))
	want := stepList(t, e.st, a.ID)
	e.reopen(t)
	if diff := cmp.Diff(want, stepList(t, e.st, a.ID), stepOpts); diff != "" {
		t.Errorf("steps after reopen (-before +after):\n%s", diff)
	}
	if row := wantState(t, e.st, b.ID, store.JobStateScheduled); row.WaitsFor != "nap" {
		t.Errorf("sleeping job after reopen: WaitsFor %q, want nap", row.WaitsFor)
	}
	complete(t, e.st, now, fetchID2(t, e.st, now, "kids", kids[0]))
	wantState(t, e.st, a.ID, store.JobStateAvailable)
}

// A child finished through one handle releases a parent that awaits
// through another, and signals the other handle's watch.
func testStepsAwaitShared(t *testing.T, e *env) {
	stepsOn(t, e)
	other := e.share(t)
	w, watchable := watch(t, other, defaultQueue)
	now := at(time.Minute)
	a := parentRunning(t, e.st, now)
	kids := spawnAt(t, e.st, now, a, "kids", false, children(1, "c", "kids")...).Children
	awaitAt(t, e.st, now, a, "kids")
	if watchable {
		drain(t, w)
	}
	complete(t, other, now, fetchID2(t, other, now, "kids", kids[0]))
	if watchable {
		waitSignal(t, w, "a child finished through another handle")
	}
	b := fetchID(t, other, now, a.ID)
	if got := stepNames(stepList(t, other, b.ID)); !cmp.Equal(got, []string{"kids"}) {
		t.Errorf("steps through the other handle = %v, want [kids]", got)
	}
}
