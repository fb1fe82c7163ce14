package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

var leaseCases = []testCase{
	{name: "RescueAfterExpiry", run: testRescueAfterExpiry},
	{name: "RescueOnlyExpired", run: testRescueOnlyExpired},
	{name: "RescueAtMaxAttemptsIsDead", run: testRescueDead},
	{name: "RescueCancelRequestedIsCancelled", run: testRescueCancelRequested},
	{name: "RescueLimit", run: testRescueLimit},
	{name: "AttemptsCountAtFetch", run: testAttemptsCountAtFetch},
	{name: "HeartbeatKeepsLease", run: testHeartbeatKeepsLease},
	{name: "ExtendResultsInOrder", run: testExtendResults},
}

// leaseLost is the error entry JobRescue records for a lost attempt.
func leaseLost(attempt int, now time.Time) store.AttemptError {
	return store.AttemptError{Attempt: attempt, At: now, Message: store.LeaseLostMessage}
}

// JobRescue leaves a job alone until its lease is over (LeaseUntil before
// Now); then the job is available again at once, with a "lease expired"
// error for the lost attempt, and can be claimed again.
func testRescueAfterExpiry(t *testing.T, e *env) {
	now := at(time.Hour)
	id := enqueueOne(t, e.st, now, newJob("lost"))
	row := fetchID(t, e.st, now, id)
	until := now.Add(lease)

	wantRescued(t, e.st, now.Add(lease/2), 10, 0)
	wantRescued(t, e.st, until, 10, 0) // LeaseUntil must be before Now
	if got := wantState(t, e.st, id, store.JobStateRunning); got.ClaimToken != row.ClaimToken {
		t.Errorf("job %d: ClaimToken = %d after a rescue that did nothing, want %d", id, got.ClaimToken, row.ClaimToken)
	}

	rescueAt := until.Add(time.Microsecond)
	wantRescued(t, e.st, rescueAt, 10, 1)
	got := wantState(t, e.st, id, store.JobStateAvailable)
	if got.Attempt != 1 || !got.LeaseUntil.IsZero() || !got.FinalizedAt.IsZero() {
		t.Errorf("rescued job %d: Attempt %d, LeaseUntil %v, FinalizedAt %v; want 1, zero, zero", id, got.Attempt, got.LeaseUntil, got.FinalizedAt)
	}
	if diff := cmp.Diff([]store.AttemptError{leaseLost(1, rescueAt)}, got.Errors); diff != "" {
		t.Errorf("rescued job %d: Errors mismatch (-want +got):\n%s", id, diff)
	}

	again := fetchID(t, e.st, rescueAt, id)
	if again.Attempt != 2 || again.ClaimToken == row.ClaimToken {
		t.Errorf("claim after rescue: Attempt %d, ClaimToken %d; want 2 and a token other than %d", again.Attempt, again.ClaimToken, row.ClaimToken)
	}
}

// Only running jobs whose lease is over are rescued.
func testRescueOnlyExpired(t *testing.T, e *env) {
	now := at(time.Hour)
	ids := enqueueN(t, e.st, now, 5, "mixed")
	short := fetch(t, e.st, &store.JobFetchParams{Limit: 2, Now: now, Lease: 10 * time.Second})
	long := fetch(t, e.st, &store.JobFetchParams{Limit: 1, Now: now, Lease: time.Hour})
	done := fetchOne(t, e.st, now)
	complete(t, e.st, now, done)
	// ids[4] stays available.
	wantRescued(t, e.st, now.Add(time.Minute), 100, 2)
	for _, r := range short {
		wantState(t, e.st, r.ID, store.JobStateAvailable)
	}
	wantState(t, e.st, long[0].ID, store.JobStateRunning)
	wantState(t, e.st, done.ID, store.JobStateCompleted)
	if got := wantState(t, e.st, ids[4], store.JobStateAvailable); got.Attempt != 0 || len(got.Errors) != 0 {
		t.Errorf("available job %d after rescue: Attempt %d, %d errors; want untouched", ids[4], got.Attempt, len(got.Errors))
	}
}

// A rescued job that has used all its attempts becomes dead, finalized at
// the rescue's Now, with the lost attempt's error.
func testRescueDead(t *testing.T, e *env) {
	now := at(time.Hour)
	j := newJob("fragile")
	j.MaxAttempts = 1
	id := enqueueOne(t, e.st, now, j)
	fetchID(t, e.st, now, id)
	rescueAt := now.Add(time.Hour)
	wantRescued(t, e.st, rescueAt, 10, 1)
	got := wantState(t, e.st, id, store.JobStateDead)
	if !got.FinalizedAt.Equal(rescueAt) || !got.LeaseUntil.IsZero() {
		t.Errorf("dead job %d: FinalizedAt %v, LeaseUntil %v; want %v, zero", id, got.FinalizedAt, got.LeaseUntil, rescueAt)
	}
	if diff := cmp.Diff([]store.AttemptError{leaseLost(1, rescueAt)}, got.Errors); diff != "" {
		t.Errorf("dead job %d: Errors mismatch (-want +got):\n%s", id, diff)
	}
	fetchNone(t, e.st, rescueAt.Add(time.Hour))
}

// JobRescue rescues at most Limit jobs per call.
func testRescueLimit(t *testing.T, e *env) {
	now := at(time.Hour)
	enqueueN(t, e.st, now, 5, "lost")
	fetch(t, e.st, &store.JobFetchParams{Limit: 5, Now: now})
	later := now.Add(time.Hour)
	for i, want := range []int{2, 2, 1, 0} {
		if got := rescue(t, e.st, later, 2); got != want {
			t.Fatalf("JobRescue(limit 2) call %d = %d, want %d", i+1, got, want)
		}
	}
	wantCounts(t, e.st, "", map[countKey]int64{{defaultQueue, store.JobStateAvailable}: 5})
}

// Attempts count at fetch: a job whose worker dies every time reaches dead
// after MaxAttempts claims, with one error per lost attempt.
func testAttemptsCountAtFetch(t *testing.T, e *env) {
	now := at(time.Hour)
	j := newJob("crasher")
	j.MaxAttempts = 3
	id := enqueueOne(t, e.st, now, j)
	var want []store.AttemptError
	for attempt := 1; attempt <= 3; attempt++ {
		row := fetchID(t, e.st, now, id)
		if row.Attempt != attempt {
			t.Fatalf("claim %d: Attempt = %d, want %d", attempt, row.Attempt, attempt)
		}
		now = now.Add(time.Hour)
		wantRescued(t, e.st, now, 10, 1)
		want = append(want, leaseLost(attempt, now))
		wantState := store.JobStateAvailable
		if attempt == 3 {
			wantState = store.JobStateDead
		}
		got := get(t, e.st, id)
		if got.State != wantState {
			t.Fatalf("after rescue %d: State = %q, want %q", attempt, got.State, wantState)
		}
		if diff := cmp.Diff(want, got.Errors); diff != "" {
			t.Fatalf("after rescue %d: Errors mismatch (-want +got):\n%s", attempt, diff)
		}
	}
	fetchNone(t, e.st, now)
}

// LeaseExtend moves LeaseUntil to Now + Lease, so a heartbeating job
// outlives its first lease while a silent one is rescued.
func testHeartbeatKeepsLease(t *testing.T, e *env) {
	now := at(time.Hour)
	enqueueN(t, e.st, now, 3, "long")
	rows := fetch(t, e.st, &store.JobFetchParams{Limit: 3, Now: now, Lease: lease})
	if len(rows) != 3 {
		t.Fatalf("JobFetch returned %d jobs, want 3", len(rows))
	}
	sortRows(rows)
	beat := now.Add(20 * time.Second)
	if held := extend(t, e.st, beat, lease, ref(rows[0]), ref(rows[1])); !held[0] || !held[1] {
		t.Fatalf("LeaseExtend of two live claims = %v, want [true true]", held)
	}
	for _, r := range rows[:2] {
		if got := get(t, e.st, r.ID); !got.LeaseUntil.Equal(beat.Add(lease)) {
			t.Errorf("job %d after LeaseExtend: LeaseUntil = %v, want %v", r.ID, got.LeaseUntil, beat.Add(lease))
		}
	}
	// Past the first lease, before the extended one: only the silent job goes.
	wantRescued(t, e.st, now.Add(40*time.Second), 10, 1)
	wantState(t, e.st, rows[0].ID, store.JobStateRunning)
	wantState(t, e.st, rows[1].ID, store.JobStateRunning)
	wantState(t, e.st, rows[2].ID, store.JobStateAvailable)
	// A second heartbeat keeps it going again; then it finishes normally.
	beat2 := now.Add(45 * time.Second)
	if held := extend(t, e.st, beat2, time.Hour, ref(rows[0])); !held[0] {
		t.Fatalf("second LeaseExtend = %v, want [true]", held)
	}
	wantRescued(t, e.st, now.Add(30*time.Minute), 10, 1) // rows[1] only
	complete(t, e.st, now.Add(30*time.Minute), rows[0])
}

// LeaseExtend answers per lease, in order: held only for a running job with
// the same token; lost leases are left untouched.
func testExtendResults(t *testing.T, e *env) {
	now := at(time.Hour)
	ids := enqueueN(t, e.st, now, 4, "beat")
	a := fetchID(t, e.st, now, ids[0])
	b := fetchID(t, e.st, now, ids[1])
	c := fetchID(t, e.st, now, ids[2])
	complete(t, e.st, now, c)
	// ids[3] is available, never claimed.
	beat := now.Add(10 * time.Second)
	refs := []store.LeaseRef{
		{ID: a.ID, ClaimToken: a.ClaimToken + 1000}, // wrong token
		ref(b),
		{ID: 1 << 60, ClaimToken: 1}, // unknown job
		ref(c),                       // finished
		{ID: ids[3], ClaimToken: 0},  // not running
		ref(a),
	}
	got := extend(t, e.st, beat, lease, refs...)
	want := []bool{false, true, false, false, false, true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LeaseExtend results mismatch (-want +got):\n%s", diff)
	}
	if row := get(t, e.st, c.ID); !row.LeaseUntil.IsZero() || row.State != store.JobStateCompleted {
		t.Errorf("finished job %d after LeaseExtend: State %q, LeaseUntil %v; want completed, zero", c.ID, row.State, row.LeaseUntil)
	}
	if row := get(t, e.st, ids[3]); !row.LeaseUntil.IsZero() || row.State != store.JobStateAvailable {
		t.Errorf("available job %d after LeaseExtend: State %q, LeaseUntil %v; want available, zero", ids[3], row.State, row.LeaseUntil)
	}
}

// A running job an operator asked to cancel whose worker then died is
// cancelled by the rescue, not run again, and its dependents are cancelled
// with it.
func testRescueCancelRequested(t *testing.T, e *env) {
	now := at(time.Hour)
	id := enqueueOne(t, e.st, now, newJob("doomed"))
	dependent := newJob("after")
	dependent.DependsOn = []int64{id}
	depID := enqueueOne(t, e.st, now, dependent)
	fetchID(t, e.st, now, id)
	if _, err := e.st.JobCancel(context.Background(), &store.JobCancelParams{ID: id, Now: now}); err != nil {
		t.Fatalf("JobCancel(running job %d) = %v", id, err)
	}
	rescueAt := now.Add(lease + time.Microsecond)
	wantRescued(t, e.st, rescueAt, 10, 1)
	got := wantState(t, e.st, id, store.JobStateCancelled)
	if !got.FinalizedAt.Equal(rescueAt) || got.CancelRequested {
		t.Errorf("rescued job %d: FinalizedAt %v CancelRequested %v; want %v and false", id, got.FinalizedAt, got.CancelRequested, rescueAt)
	}
	wantState(t, e.st, depID, store.JobStateCancelled)
	fetchNone(t, e.st, rescueAt)
}
