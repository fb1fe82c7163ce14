package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sortiehq/sortie/store"
)

var outcomeCases = []testCase{
	{name: "Completed", run: testOutcomeCompleted},
	{name: "FailedRetries", run: testOutcomeFailedRetries},
	{name: "FailedLastAttemptIsDead", run: testOutcomeFailedDead},
	{name: "FailedWithoutError", run: testOutcomeFailedWithoutError},
	{name: "Cancelled", run: testOutcomeCancelled},
	{name: "SnoozedLater", run: testOutcomeSnoozedLater},
	{name: "SnoozedNow", run: testOutcomeSnoozedNow},
	{name: "Released", run: testOutcomeReleased},
	{name: "MixedBatch", run: testOutcomeMixedBatch},
}

// claimed enqueues a job of kind with maxAttempts at now and claims it.
func claimed(t *testing.T, st store.Store, now time.Time, kind string, maxAttempts int) *store.JobRow {
	t.Helper()
	j := newJob(kind)
	j.MaxAttempts = maxAttempts
	return fetchID(t, st, now, enqueueOne(t, st, now, j))
}

// wantRow fails the test unless job want.ID is stored as want.
func wantRow(t *testing.T, st store.Store, what string, want *store.JobRow, opts ...cmp.Option) {
	t.Helper()
	if diff := cmp.Diff(want, get(t, st, want.ID), append(opts, rowOpts)...); diff != "" {
		t.Errorf("job %d %s mismatch (-want +got):\n%s", want.ID, what, diff)
	}
}

// A completed job is finalized at Now, loses its lease, and is never
// claimed again.
func testOutcomeCompleted(t *testing.T, e *env) {
	now := at(time.Hour)
	row := claimed(t, e.st, now, "ok", 3)
	end := now.Add(5 * time.Second)
	complete(t, e.st, end, row)
	want := *row
	want.State = store.JobStateCompleted
	want.FinalizedAt = end
	want.LeaseUntil = time.Time{}
	wantRow(t, e.st, "after OutcomeCompleted", &want)
	fetchNone(t, e.st, end.Add(24*time.Hour))
}

// A failure with attempts left makes the job retrying at the outcome's
// RunAt, with the error (attempt, time, message, stack) appended.
func testOutcomeFailedRetries(t *testing.T, e *env) {
	now := at(time.Hour)
	row := claimed(t, e.st, now, "flaky", 3)
	end := now.Add(5 * time.Second)
	e1 := store.AttemptError{Attempt: 1, At: end, Message: "panic: runtime error: index out of range [3] with length 3", Stack: "goroutine 7 [running]:\nmain.handler(...)\n\t/app/main.go:42 +0x1d\n"}
	retryAt := end.Add(16 * time.Second)
	finishOne(t, e.st, end, &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportFailed, Error: &e1, RunAt: retryAt}, store.JobStateRetrying)
	want := *row
	want.State = store.JobStateRetrying
	want.RunAt = retryAt
	want.LeaseUntil = time.Time{}
	want.Errors = []store.AttemptError{e1}
	wantRow(t, e.st, "after OutcomeFailed", &want)

	// The second failure is appended after the first.
	row2 := fetchID(t, e.st, retryAt, row.ID)
	end2 := retryAt.Add(time.Second)
	e2 := store.AttemptError{Attempt: 2, At: end2, Message: "timeout"}
	finishOne(t, e.st, end2, &store.Report{ID: row.ID, ClaimToken: row2.ClaimToken, Kind: store.ReportFailed, Error: &e2, RunAt: end2.Add(time.Minute)}, store.JobStateRetrying)
	if diff := cmp.Diff([]store.AttemptError{e1, e2}, get(t, e.st, row.ID).Errors); diff != "" {
		t.Errorf("Errors after two failures mismatch (-want +got):\n%s", diff)
	}
}

// A failure whose outcome carries no error, or an error with only some
// fields, is recorded with the defaults filled in: the attempt's number,
// Now, and store.NoErrorMessage.
func testOutcomeFailedWithoutError(t *testing.T, e *env) {
	now := at(time.Hour)
	bare := claimed(t, e.st, now, "quiet", 3)
	empty := claimed(t, e.st, now, "quiet", 3)
	end := now.Add(time.Second)
	finish(t, e.st, end,
		&store.Report{ID: bare.ID, ClaimToken: bare.ClaimToken, Kind: store.ReportFailed, RunAt: end.Add(time.Minute)},
		&store.Report{ID: empty.ID, ClaimToken: empty.ClaimToken, Kind: store.ReportFailed, Error: &store.AttemptError{}, RunAt: end.Add(time.Minute)})
	want := []store.AttemptError{{Attempt: 1, At: end, Message: store.NoErrorMessage}}
	for _, id := range []int64{bare.ID, empty.ID} {
		if diff := cmp.Diff(want, get(t, e.st, id).Errors); diff != "" {
			t.Errorf("job %d: Errors after a failure without an error mismatch (-want +got):\n%s", id, diff)
		}
	}
}

// A failure of the last attempt makes the job dead, finalized at Now, with
// every attempt's error in order; it is never claimed again.
func testOutcomeFailedDead(t *testing.T, e *env) {
	now := at(time.Hour)
	row := claimed(t, e.st, now, "doomed", 2)
	e1 := store.AttemptError{Attempt: 1, At: now, Message: "first"}
	finishOne(t, e.st, now, &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportFailed, Error: &e1, RunAt: now.Add(time.Second)}, store.JobStateRetrying)
	now = now.Add(time.Second)
	row2 := fetchID(t, e.st, now, row.ID)
	end := now.Add(time.Second)
	e2 := store.AttemptError{Attempt: 2, At: end, Message: "second"}
	finishOne(t, e.st, end, &store.Report{ID: row.ID, ClaimToken: row2.ClaimToken, Kind: store.ReportFailed, Error: &e2, RunAt: end.Add(time.Minute)}, store.JobStateDead)
	want := *row2
	want.State = store.JobStateDead
	want.FinalizedAt = end
	want.LeaseUntil = time.Time{}
	want.Errors = []store.AttemptError{e1, e2}
	// Where a dead job's RunAt ends up is not part of the contract.
	wantRow(t, e.st, "after the last OutcomeFailed", &want, cmpopts.IgnoreFields(store.JobRow{}, "RunAt"))
	fetchNone(t, e.st, end.Add(24*time.Hour))
}

// A cancelled job is finalized at Now and never claimed again; its error
// is recorded when given.
func testOutcomeCancelled(t *testing.T, e *env) {
	now := at(time.Hour)
	withErr := claimed(t, e.st, now, "cancel", 5)
	bare := claimed(t, e.st, now, "cancel", 5)
	end := now.Add(time.Second)
	e1 := store.AttemptError{Attempt: 1, At: end, Message: "customer deleted"}
	finishOne(t, e.st, end, &store.Report{ID: withErr.ID, ClaimToken: withErr.ClaimToken, Kind: store.ReportCancelled, Error: &e1}, store.JobStateCancelled)
	finishOne(t, e.st, end, &store.Report{ID: bare.ID, ClaimToken: bare.ClaimToken, Kind: store.ReportCancelled}, store.JobStateCancelled)
	for _, c := range []struct {
		row    *store.JobRow
		errors []store.AttemptError
	}{{withErr, []store.AttemptError{e1}}, {bare, nil}} {
		want := *c.row
		want.State = store.JobStateCancelled
		want.FinalizedAt = end
		want.LeaseUntil = time.Time{}
		want.Errors = c.errors
		wantRow(t, e.st, "after OutcomeCancelled", &want)
	}
	fetchNone(t, e.st, end.Add(24*time.Hour))
}

// A snooze to a later time makes the job scheduled at that time without
// counting the attempt; it is claimed again when due.
func testOutcomeSnoozedLater(t *testing.T, e *env) {
	now := at(time.Hour)
	row := claimed(t, e.st, now, "snooze", 1)
	end := now.Add(time.Second)
	wake := end.Add(time.Minute)
	finishOne(t, e.st, end, &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportSnoozed, RunAt: wake}, store.JobStateScheduled)
	want := *row
	want.State = store.JobStateScheduled
	want.Attempt = 0
	want.RunAt = wake
	want.LeaseUntil = time.Time{}
	wantRow(t, e.st, "after OutcomeSnoozed", &want)
	fetchNone(t, e.st, wake.Add(-time.Microsecond))
	// MaxAttempts is 1: the snoozed attempt did not use it up.
	again := fetchID(t, e.st, wake, row.ID)
	if again.Attempt != 1 {
		t.Errorf("claim after snooze: Attempt = %d, want 1", again.Attempt)
	}
	complete(t, e.st, wake, again)
}

// A snooze to a time not after Now makes the job available at once.
func testOutcomeSnoozedNow(t *testing.T, e *env) {
	now := at(time.Hour)
	for _, runAt := range []time.Time{now.Add(-time.Second), now} {
		row := claimed(t, e.st, now, "snooze", 3)
		finishOne(t, e.st, now, &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportSnoozed, RunAt: runAt}, store.JobStateAvailable)
		got := wantState(t, e.st, row.ID, store.JobStateAvailable)
		if got.Attempt != 0 || !got.LeaseUntil.IsZero() {
			t.Errorf("job %d snoozed to %v at %v: Attempt %d, LeaseUntil %v; want 0, zero", row.ID, runAt, now, got.Attempt, got.LeaseUntil)
		}
		again := fetchID(t, e.st, now, row.ID)
		complete(t, e.st, now, again)
	}
}

// A released job is available at once with its RunAt unchanged and the
// attempt not counted.
func testOutcomeReleased(t *testing.T, e *env) {
	now := at(time.Hour)
	j := newJob("interrupted")
	j.RunAt = now.Add(-time.Minute)
	id := enqueueOne(t, e.st, now, j)
	// A first attempt fails, so the release takes Attempt from 2 back to 1.
	row := fetchID(t, e.st, now, id)
	retryAt := now.Add(time.Second)
	e1 := failure(row, now, "first")
	finishOne(t, e.st, now, &store.Report{ID: id, ClaimToken: row.ClaimToken, Kind: store.ReportFailed, Error: e1, RunAt: retryAt}, store.JobStateRetrying)
	row2 := fetchID(t, e.st, retryAt, id)
	end := retryAt.Add(time.Second)
	finishOne(t, e.st, end, &store.Report{ID: id, ClaimToken: row2.ClaimToken, Kind: store.ReportReleased}, store.JobStateAvailable)
	want := *row2
	want.State = store.JobStateAvailable
	want.Attempt = 1
	want.LeaseUntil = time.Time{}
	wantRow(t, e.st, "after OutcomeReleased", &want)
	again := fetchID(t, e.st, end, id)
	if again.Attempt != 2 {
		t.Errorf("claim after release: Attempt = %d, want 2", again.Attempt)
	}
	complete(t, e.st, end, again)
}

// One JobFinish call applies a batch of mixed outcomes and answers each in
// order, including refused ones.
func testOutcomeMixedBatch(t *testing.T, e *env) {
	now := at(time.Hour)
	enqueueN(t, e.st, now, 5, "mixed")
	rows := fetch(t, e.st, &store.JobFetchParams{Limit: 5, Now: now})
	if len(rows) != 5 {
		t.Fatalf("JobFetch returned %d jobs, want 5", len(rows))
	}
	sortRows(rows)
	end := now.Add(time.Second)
	// Outcomes in an order other than ID order, with refused ones between.
	outs := []*store.Report{
		outcomeFor(rows[3], store.ReportSnoozed, end),
		{ID: 1 << 60, ClaimToken: 1, Kind: store.ReportCompleted},
		outcomeFor(rows[0], store.ReportCompleted, end),
		outcomeFor(rows[4], store.ReportReleased, end),
		{ID: rows[1].ID, ClaimToken: rows[1].ClaimToken + 1000, Kind: store.ReportCompleted},
		outcomeFor(rows[2], store.ReportCancelled, end),
		outcomeFor(rows[1], store.ReportFailed, end),
	}
	want := []store.ReportResult{
		{Applied: true, State: store.JobStateScheduled},
		{Applied: false},
		{Applied: true, State: store.JobStateCompleted},
		{Applied: true, State: store.JobStateAvailable},
		{Applied: false},
		{Applied: true, State: store.JobStateCancelled},
		{Applied: true, State: store.JobStateRetrying},
	}
	got := finish(t, e.st, end, outs...)
	// State is only meaningful when Applied.
	for i := range got {
		if !got[i].Applied {
			got[i].State = ""
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JobFinish results mismatch (-want +got):\n%s", diff)
	}
	for i, s := range []store.JobState{store.JobStateCompleted, store.JobStateRetrying, store.JobStateCancelled, store.JobStateScheduled, store.JobStateAvailable} {
		if got := wantState(t, e.st, rows[i].ID, s); !got.LeaseUntil.IsZero() {
			t.Errorf("job %d after JobFinish: LeaseUntil = %v, want zero", rows[i].ID, got.LeaseUntil)
		}
	}
}
