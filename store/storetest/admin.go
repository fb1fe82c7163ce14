package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

var cancelCases = []testCase{
	{name: "Pending", run: testCancelPending},
	{name: "RunningRequested", run: testCancelRunning},
	{name: "RunningOutcomeClearsRequest", run: testCancelRunningOutcome},
	{name: "FinishedUnchanged", run: testCancelFinished},
	{name: "UnknownNotFound", run: testCancelUnknown},
}

var retryCases = []testCase{
	{name: "Dead", run: testRetryDead},
	{name: "CompletedAndCancelled", run: testRetryFinished},
	{name: "ScheduledAndRetryingNow", run: testRetryPending},
	{name: "AvailableUnchanged", run: testRetryAvailable},
	{name: "RunningRefused", run: testRetryRunning},
	{name: "UniqueConflict", run: testRetryUniqueConflict},
	{name: "UnknownNotFound", run: testRetryUnknown},
}

var deleteCases = []testCase{
	{name: "ReturnsRowAndRemoves", run: testDeleteRemoves},
	{name: "RunningRefused", run: testDeleteRunning},
	{name: "UnknownNotFound", run: testDeleteUnknown},
}

// cancellable are the states JobCancel cancels.
var cancellable = []store.JobState{store.JobStateWaiting, store.JobStateScheduled, store.JobStateAvailable, store.JobStateRetrying}

// finishedStates is every finished state.
var finishedStates = []store.JobState{store.JobStateCompleted, store.JobStateCancelled, store.JobStateDead}

// wantErr fails the test unless err wraps target, and returns whether it did.
func wantErr(t *testing.T, call string, err, target error) bool {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s error = %v, want %v (errors.Is)", call, err, target)
		return false
	}
	return true
}

// cancelJob calls JobCancel and fails the test on error.
func cancelJob(t *testing.T, st store.Store, id int64, now time.Time) *store.JobRow {
	t.Helper()
	row, err := st.JobCancel(t.Context(), &store.JobCancelParams{ID: id, Now: now})
	if err != nil {
		t.Fatalf("JobCancel(%d) error: %v", id, err)
	}
	return row
}

// retryJob calls JobRetry and fails the test on error.
func retryJob(t *testing.T, st store.Store, id int64, now time.Time) *store.JobRow {
	t.Helper()
	row, err := st.JobRetry(t.Context(), &store.JobRetryParams{ID: id, Now: now})
	if err != nil {
		t.Fatalf("JobRetry(%d) error: %v", id, err)
	}
	return row
}

// A waiting, scheduled, available or retrying job cancelled by an operator becomes
// cancelled, finalized at Now, with its key released; JobCancel returns it
// as it is afterwards, and it is never claimed again.
func testCancelPending(t *testing.T, e *env) {
	now := at(time.Hour)
	later := now.Add(time.Minute)
	for _, s := range cancellable {
		q := "cancel-" + string(s)
		before := inState(t, e.st, now, s, q, "job", q)
		got := cancelJob(t, e.st, before.ID, later)
		want := *before
		want.State = store.JobStateCancelled
		want.FinalizedAt = later
		if diff := diffRow(&want, got); diff != "" {
			t.Errorf("JobCancel of %s job %d returned (-want +got):\n%s", s, before.ID, diff)
		}
		wantRow(t, e.st, "after JobCancel", &want)
		if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: q, Limit: 10, Now: later.Add(24 * time.Hour)}); len(got) != 0 {
			t.Errorf("JobFetch after cancelling %s job %d = %v, want nothing", s, before.ID, got)
		}
		j := keyed(q)
		j.Queue = q + "-again"
		if res := enqueue(t, e.st, later, j); res[0].Duplicate {
			t.Errorf("enqueue with the key of cancelled job %d = duplicate of %d, want the key released", before.ID, res[0].ID)
		}
	}
}

// JobCancel of a running job does not stop it in the store: the job stays
// running with CancelRequested set (returned, no error, nothing else
// changed), and the worker holding the claim learns it at its next
// LeaseExtend, which still extends the lease. A second JobCancel changes
// nothing more; the worker's outcome ends the job.
func testCancelRunning(t *testing.T, e *env) {
	now := at(time.Hour)
	before := inState(t, e.st, now, store.JobStateRunning, "q", "job", "")
	if st := extendStatus(t, e.st, now, lease, ref(before)); st[0] != (store.LeaseStatus{Held: true}) {
		t.Fatalf("LeaseExtend before JobCancel = %+v, want {Held: true}", st[0])
	}
	before = get(t, e.st, before.ID)
	later := now.Add(time.Minute)
	got := cancelJob(t, e.st, before.ID, later)
	want := *before
	want.CancelRequested = true
	if diff := diffRow(&want, got); diff != "" {
		t.Errorf("JobCancel of running job %d returned (-want +got):\n%s", before.ID, diff)
	}
	wantRow(t, e.st, "after JobCancel of a running job", &want)
	again := cancelJob(t, e.st, before.ID, later.Add(time.Second))
	if diff := diffRow(&want, again); diff != "" {
		t.Errorf("second JobCancel of running job %d returned (-want +got):\n%s", before.ID, diff)
	}

	beat := later.Add(time.Second)
	stale := store.LeaseRef{ID: before.ID, ClaimToken: before.ClaimToken + 1000}
	st := extendStatus(t, e.st, beat, lease, stale, ref(before))
	if st[0] != (store.LeaseStatus{}) {
		t.Errorf("LeaseExtend with a stale token after JobCancel = %+v, want {Held: false, CancelRequested: false}", st[0])
	}
	if want := (store.LeaseStatus{Held: true, CancelRequested: true}); st[1] != want {
		t.Errorf("LeaseExtend with the valid token after JobCancel = %+v, want %+v", st[1], want)
	}
	row := wantState(t, e.st, before.ID, store.JobStateRunning)
	if !row.CancelRequested || !row.LeaseUntil.Equal(beat.Add(lease)) {
		t.Errorf("job %d after LeaseExtend: CancelRequested %v, LeaseUntil %v; want true, %v", row.ID, row.CancelRequested, row.LeaseUntil, beat.Add(lease))
	}
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: "q", Limit: 10, Now: beat}); len(got) != 0 {
		t.Errorf("JobFetch after JobCancel of running job %d = %v, want nothing", row.ID, got)
	}

	end := beat.Add(time.Second)
	finishOne(t, e.st, end, &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportCancelled, Error: failure(row, end, "cancel requested")}, store.JobStateCancelled)
	if got := get(t, e.st, row.ID); got.CancelRequested || !got.FinalizedAt.Equal(end) {
		t.Errorf("job %d cancelled by its worker: CancelRequested %v, FinalizedAt %v; want false, %v", row.ID, got.CancelRequested, got.FinalizedAt, end)
	}
}

// Every applied outcome clears CancelRequested, whatever the worker did; a
// job released (or snoozed, or failed) after a cancel request runs again
// without it.
func testCancelRunningOutcome(t *testing.T, e *env) {
	now := at(time.Hour)
	for _, k := range []store.ReportKind{store.ReportCompleted, store.ReportFailed, store.ReportSnoozed, store.ReportReleased} {
		q := "cancel-then-" + k.String()
		row := inState(t, e.st, now, store.JobStateRunning, q, "job", "")
		cancelJob(t, e.st, row.ID, now)
		o := outcomeFor(row, k, now)
		finishOne(t, e.st, now, o, stateAfter(k))
		if got := get(t, e.st, row.ID); got.CancelRequested {
			t.Errorf("job %d after a %v outcome following JobCancel: CancelRequested = true, want false", row.ID, k)
		}
		if k == store.ReportCompleted {
			continue
		}
		later := now.Add(2 * time.Hour)
		rows := fetch(t, e.st, &store.JobFetchParams{Queue: q, Limit: 1, Now: later})
		if len(rows) != 1 || rows[0].CancelRequested {
			t.Fatalf("JobFetch(queue %q) after a %v outcome = %v, want job %d claimed without CancelRequested", q, k, ids(rows), row.ID)
		}
		if st := extendStatus(t, e.st, later, lease, ref(rows[0])); st[0] != (store.LeaseStatus{Held: true}) {
			t.Errorf("LeaseExtend of the new claim on job %d = %+v, want {Held: true}", row.ID, st[0])
		}
		complete(t, e.st, later, rows[0])
	}
}

// Cancelling a finished job returns it unchanged.
func testCancelFinished(t *testing.T, e *env) {
	now := at(time.Hour)
	for _, s := range finishedStates {
		before := inState(t, e.st, now, s, "cancel-"+string(s), "job", "")
		got := cancelJob(t, e.st, before.ID, now.Add(time.Hour))
		if diff := diffRow(before, got); diff != "" {
			t.Errorf("JobCancel of %s job %d returned a changed job (-before +returned):\n%s", s, before.ID, diff)
		}
		wantRow(t, e.st, "after JobCancel of a finished job", before)
	}
}

// Cancelling an unknown job returns ErrNotFound.
func testCancelUnknown(t *testing.T, e *env) {
	_, err := e.st.JobCancel(t.Context(), &store.JobCancelParams{ID: 1 << 60, Now: at(0)})
	wantErr(t, "JobCancel of an unknown job", err, store.ErrNotFound)
}

// A dead job retried by an operator is available now with one more
// attempt, no longer finalized, and runs again.
func testRetryDead(t *testing.T, e *env) {
	now := at(time.Hour)
	byOutcome := inState(t, e.st, now, store.JobStateDead, "dead-outcome", "job", "")
	j := newJob("job")
	j.Queue, j.MaxAttempts = "dead-rescue", 1
	id := enqueueOne(t, e.st, now, j)
	fetch(t, e.st, &store.JobFetchParams{Queue: "dead-rescue", Limit: 1, Now: now})
	wantRescued(t, e.st, now.Add(time.Hour), 10, 1)
	byRescue := wantState(t, e.st, id, store.JobStateDead)

	later := now.Add(2 * time.Hour)
	for _, before := range []*store.JobRow{byOutcome, byRescue} {
		got := retryJob(t, e.st, before.ID, later)
		want := *before
		want.State = store.JobStateAvailable
		want.RunAt = later
		want.FinalizedAt = time.Time{}
		want.MaxAttempts = before.Attempt + 1
		if diff := diffRow(&want, got); diff != "" {
			t.Errorf("JobRetry of dead job %d returned (-want +got):\n%s", before.ID, diff)
		}
		wantRow(t, e.st, "after JobRetry", &want)
		rows := fetch(t, e.st, &store.JobFetchParams{Queue: before.Queue, Limit: 1, Now: later})
		if len(rows) != 1 || rows[0].Attempt != before.Attempt+1 {
			t.Fatalf("JobFetch after JobRetry of job %d = %v, want the job at attempt %d", before.ID, rows, before.Attempt+1)
		}
		complete(t, e.st, later, rows[0])
	}
}

// Completed and cancelled jobs can be retried too; only a job that used
// all its attempts gets one more. A retried job holds its key again.
func testRetryFinished(t *testing.T, e *env) {
	now := at(time.Hour)
	exhausted := newJob("job")
	exhausted.Queue, exhausted.MaxAttempts, exhausted.UniqueKey = "exhausted", 1, "k-exhausted"
	exID := enqueueOne(t, e.st, now, exhausted)
	complete(t, e.st, now, fetch(t, e.st, &store.JobFetchParams{Queue: "exhausted", Limit: 1, Now: now})[0])
	neverRun := inState(t, e.st, now, store.JobStateAvailable, "never-run", "job", "")
	cancelJob(t, e.st, neverRun.ID, now)

	jobs := []struct {
		row         *store.JobRow
		maxAttempts int
	}{
		{get(t, e.st, exID), 2}, // completed on its only attempt: one more
		{inState(t, e.st, now, store.JobStateCompleted, "completed", "job", "k-completed"), 25},
		{inState(t, e.st, now, store.JobStateCancelled, "cancelled", "job", "k-cancelled"), 25},
		{get(t, e.st, neverRun.ID), 25}, // cancelled before any attempt
	}
	later := now.Add(time.Hour)
	for _, c := range jobs {
		got := retryJob(t, e.st, c.row.ID, later)
		want := *c.row
		want.State = store.JobStateAvailable
		want.RunAt = later
		want.FinalizedAt = time.Time{}
		want.MaxAttempts = c.maxAttempts
		if diff := diffRow(&want, got); diff != "" {
			t.Errorf("JobRetry of %s job %d returned (-want +got):\n%s", c.row.State, c.row.ID, diff)
		}
		wantRow(t, e.st, "after JobRetry", &want)
		if c.row.UniqueKey != "" {
			j := keyed(c.row.UniqueKey)
			wantDuplicate(t, e.st, later, j, c.row.ID, store.JobStateAvailable)
		}
		if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: c.row.Queue, Limit: 10, Now: later}); len(got) != 1 || got[0] != c.row.ID {
			t.Errorf("JobFetch(queue %q) after JobRetry = %v, want [%d]", c.row.Queue, got, c.row.ID)
		}
	}
}

// A scheduled or retrying job retried by an operator is available now (a
// waiting one is left as it is: see Deps/RetryWaitingUnchanged).
func testRetryPending(t *testing.T, e *env) {
	now := at(time.Hour)
	later := now.Add(time.Minute) // before either is due
	for _, s := range []store.JobState{store.JobStateScheduled, store.JobStateRetrying} {
		q := "retry-" + string(s)
		before := inState(t, e.st, now, s, q, "job", "")
		got := retryJob(t, e.st, before.ID, later)
		want := *before
		want.State = store.JobStateAvailable
		want.RunAt = later
		if diff := diffRow(&want, got); diff != "" {
			t.Errorf("JobRetry of %s job %d returned (-want +got):\n%s", s, before.ID, diff)
		}
		wantRow(t, e.st, "after JobRetry", &want)
		if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: q, Limit: 10, Now: later}); len(got) != 1 || got[0] != before.ID {
			t.Errorf("JobFetch(queue %q) after JobRetry = %v, want [%d]", q, got, before.ID)
		}
	}
}

// Retrying an available job returns it unchanged.
func testRetryAvailable(t *testing.T, e *env) {
	now := at(time.Hour)
	before := inState(t, e.st, now, store.JobStateAvailable, "q", "job", "k")
	got := retryJob(t, e.st, before.ID, now.Add(time.Hour))
	if diff := diffRow(before, got); diff != "" {
		t.Errorf("JobRetry of available job %d returned a changed job (-before +returned):\n%s", before.ID, diff)
	}
	wantRow(t, e.st, "after JobRetry of an available job", before)
}

// A running job cannot be retried by an operator.
func testRetryRunning(t *testing.T, e *env) {
	now := at(time.Hour)
	before := inState(t, e.st, now, store.JobStateRunning, "q", "job", "")
	_, err := e.st.JobRetry(t.Context(), &store.JobRetryParams{ID: before.ID, Now: now})
	wantErr(t, "JobRetry of a running job", err, store.ErrJobRunning)
	wantRow(t, e.st, "after a refused JobRetry", before)
	complete(t, e.st, now, before)
}

// A finished job cannot be made pending while another pending job holds its
// unique key; once that job finishes, it can, and then it holds the key.
func testRetryUniqueConflict(t *testing.T, e *env) {
	now := at(time.Hour)
	for _, s := range finishedStates {
		k := "conflict-" + string(s)
		old := inState(t, e.st, now, s, k, "job", k)
		holder := enqueue(t, e.st, now, keyed(k))[0]
		if holder.Duplicate {
			t.Fatalf("enqueue with key %q after its holder was %s = duplicate, want a new job", k, s)
		}
		_, err := e.st.JobRetry(t.Context(), &store.JobRetryParams{ID: old.ID, Now: now})
		wantErr(t, "JobRetry of a "+string(s)+" job whose key another pending job holds", err, store.ErrUniqueConflict)
		wantRow(t, e.st, "after a refused JobRetry", old)

		cancelJob(t, e.st, holder.ID, now)
		retryJob(t, e.st, old.ID, now)
		wantDuplicate(t, e.st, now, keyed(k), old.ID, store.JobStateAvailable)
	}
}

// Retrying an unknown job returns ErrNotFound.
func testRetryUnknown(t *testing.T, e *env) {
	_, err := e.st.JobRetry(t.Context(), &store.JobRetryParams{ID: 1 << 60, Now: at(0)})
	wantErr(t, "JobRetry of an unknown job", err, store.ErrNotFound)
}

// JobDelete removes a job that is not running, in any other state, and
// returns it as it was; the job is gone afterwards and its key is free.
func testDeleteRemoves(t *testing.T, e *env) {
	now := at(time.Hour)
	for _, s := range store.JobStates {
		if s == store.JobStateRunning {
			continue
		}
		q := "delete-" + string(s)
		before := inState(t, e.st, now, s, q, "job", q)
		got, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: before.ID, Now: t0})
		if err != nil {
			t.Fatalf("JobDelete of %s job %d error: %v", s, before.ID, err)
		}
		if diff := diffRow(before, got); diff != "" {
			t.Errorf("JobDelete of %s job %d returned (-want +got):\n%s", s, before.ID, diff)
		}
		_, err = e.st.JobGet(t.Context(), &store.JobGetParams{ID: before.ID})
		wantErr(t, "JobGet after JobDelete", err, store.ErrNotFound)
		_, err = e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: before.ID, Now: t0})
		wantErr(t, "second JobDelete", err, store.ErrNotFound)
		if got := listIDs(t, e.st, store.JobListParams{Queue: q}); len(got) != 0 {
			t.Errorf("JobList(queue %q) after JobDelete = %v, want nothing", q, got)
		}
		if res := enqueue(t, e.st, now, keyed(q)); res[0].Duplicate {
			t.Errorf("enqueue with the key of deleted job %d = duplicate of %d, want a new job", before.ID, res[0].ID)
		}
	}
}

// A running job cannot be deleted.
func testDeleteRunning(t *testing.T, e *env) {
	now := at(time.Hour)
	before := inState(t, e.st, now, store.JobStateRunning, "q", "job", "")
	_, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: before.ID, Now: t0})
	wantErr(t, "JobDelete of a running job", err, store.ErrJobRunning)
	wantRow(t, e.st, "after a refused JobDelete", before)
	complete(t, e.st, now, before)
}

// Deleting an unknown job returns ErrNotFound; so does JobGet.
func testDeleteUnknown(t *testing.T, e *env) {
	_, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: 1 << 60, Now: t0})
	wantErr(t, "JobDelete of an unknown job", err, store.ErrNotFound)
	_, err = e.st.JobGet(t.Context(), &store.JobGetParams{ID: 1 << 60})
	wantErr(t, "JobGet of an unknown job", err, store.ErrNotFound)
}
