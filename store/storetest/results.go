package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

var resultsCases = []testCase{
	{name: "ResultRoundTrip", run: testResultRoundTrip},
	{name: "ProgressFencing", run: testProgress},
	{name: "WaitFinished", run: testWaitFinished},
	{name: "WaitBlocksUntilFinished", run: testWaitBlocks},
	{name: "WaitTimeout", run: testWaitTimeout},
	{name: "WaitUnknownOrDeleted", run: testWaitNotFound},
}

// waitTimeout bounds JobWait calls that must return.
const waitTimeout = 5 * time.Second

// jobWait calls JobWait with a waitTimeout deadline.
func jobWait(t *testing.T, st store.Store, id int64) (*store.JobRow, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	return st.JobWait(ctx, &store.JobWaitParams{ID: id})
}

// A completed job records its outcome's Result byte for byte; a job
// completed without one has none.
func testResultRoundTrip(t *testing.T, e *env) {
	now := at(time.Hour)
	ids := enqueueN(t, e.st, now, 2, "sum")
	a := fetchID(t, e.st, now, ids[0])
	b := fetchID(t, e.st, now, ids[1])
	result := []byte(`{"sum":42,"items":["a","b"]}`)
	finishOne(t, e.st, now, &store.Report{ID: a.ID, ClaimToken: a.ClaimToken, Kind: store.ReportCompleted, Result: result}, store.JobStateCompleted)
	complete(t, e.st, now, b)
	if got := get(t, e.st, a.ID).Result; string(got) != string(result) {
		t.Errorf("job %d: Result = %q, want %q", a.ID, got, result)
	}
	if got := get(t, e.st, b.ID).Result; len(got) != 0 {
		t.Errorf("job %d completed without a result: Result = %q, want empty", b.ID, got)
	}
	// A refused outcome records nothing.
	res := finish(t, e.st, now, &store.Report{ID: a.ID, ClaimToken: a.ClaimToken, Kind: store.ReportCompleted, Result: []byte(`"stale"`)})
	if res[0].Applied {
		t.Errorf("second JobFinish of job %d applied, want refused", a.ID)
	}
	if got := get(t, e.st, a.ID).Result; string(got) != string(result) {
		t.Errorf("job %d after a refused outcome: Result = %q, want %q", a.ID, got, result)
	}
}

// progress extends leases at now, recording the progress in ps, and
// returns, in order, whether each is held.
func progress(t *testing.T, st store.Store, now time.Time, ps map[store.LeaseRef]float64, refs ...store.LeaseRef) []bool {
	t.Helper()
	res, err := st.LeaseExtend(t.Context(), &store.LeaseExtendParams{Leases: refs, Now: now, Lease: time.Minute, Progress: ps})
	if err != nil {
		t.Fatalf("LeaseExtend(%d leases, %d with progress) error: %v", len(refs), len(ps), err)
	}
	if len(res) != len(refs) {
		t.Fatalf("LeaseExtend(%d leases) returned %d results, want %d", len(refs), len(res), len(refs))
	}
	held := make([]bool, len(res))
	for i, r := range res {
		held[i] = r.Held
	}
	return held
}

// wantProgress checks the Progress of each job in want.
func wantProgress(t *testing.T, st store.Store, what string, want map[int64]float64) {
	t.Helper()
	for id, p := range want {
		if got := get(t, st, id).Progress; got != p {
			t.Errorf("job %d after %s: Progress = %v, want %v", id, what, got, p)
		}
	}
}

// LeaseExtend records the progress of a held lease that carries some, in
// the same call (same fencing as the extension), answers per lease in
// order, leaves the Progress of a lease without any, and ignores progress
// for a lease it was not asked to extend.
func testProgress(t *testing.T, e *env) {
	now := at(time.Hour)
	ids := enqueueN(t, e.st, now, 5, "long")
	a, b, c, d := fetchID(t, e.st, now, ids[0]), fetchID(t, e.st, now, ids[1]), fetchID(t, e.st, now, ids[2]), fetchID(t, e.st, now, ids[3])
	progress(t, e.st, now, map[store.LeaseRef]float64{ref(c): 30}, ref(c))
	stale := store.LeaseRef{ID: b.ID, ClaimToken: b.ClaimToken + 1000}
	unknown := store.LeaseRef{ID: 1 << 50, ClaimToken: 1}
	unclaimed := store.LeaseRef{ID: ids[4], ClaimToken: 0}
	beat := now.Add(time.Second)
	ps := map[store.LeaseRef]float64{ref(a): 50, stale: 70, unknown: 10, unclaimed: 10, ref(d): 90}
	got := progress(t, e.st, beat, ps, ref(a), stale, unknown, unclaimed, ref(c))
	if diff := cmp.Diff([]bool{true, false, false, false, true}, got); diff != "" {
		t.Errorf("LeaseExtend with progress: results mismatch (-want +got):\n%s", diff)
	}
	wantProgress(t, e.st, "a heartbeat with progress", map[int64]float64{a.ID: 50, b.ID: 0, c.ID: 30, d.ID: 0, ids[4]: 0})
	if lu := get(t, e.st, d.ID).LeaseUntil; !lu.Equal(d.LeaseUntil) {
		t.Errorf("job %d, not extended but in Progress: LeaseUntil = %v, want %v", d.ID, lu, d.LeaseUntil)
	}
	// After a rescue and a new claim, the old token no longer reports.
	later := now.Add(time.Hour)
	wantRescued(t, e.st, later, 10, 4)
	a2 := fetchID(t, e.st, later, a.ID)
	if got := progress(t, e.st, later, map[store.LeaseRef]float64{ref(a): 99}, ref(a)); got[0] {
		t.Errorf("LeaseExtend with the stale token of job %d = true, want false", a.ID)
	}
	wantProgress(t, e.st, "progress with a stale token", map[int64]float64{a.ID: 50})
	if got := progress(t, e.st, later, map[store.LeaseRef]float64{ref(a2): 75}, ref(a2)); !got[0] {
		t.Errorf("LeaseExtend with the current token of job %d = false, want true", a.ID)
	}
	wantProgress(t, e.st, "progress with the current token", map[int64]float64{a.ID: 75})
}

// JobWait returns a finished job (completed, cancelled or dead) at once.
func testWaitFinished(t *testing.T, e *env) {
	now := at(time.Hour)
	for _, s := range finishedStates {
		row := inState(t, e.st, now, s, "q-"+string(s), "job", "")
		got, err := jobWait(t, e.st, row.ID)
		if err != nil {
			t.Fatalf("JobWait of %s job %d error: %v", s, row.ID, err)
		}
		if diff := diffRow(row, got); diff != "" {
			t.Errorf("JobWait of %s job %d returned (-want +got):\n%s", s, row.ID, diff)
		}
	}
}

// JobWait blocks until another goroutine finishes the job, then returns it
// completed with its result.
func testWaitBlocks(t *testing.T, e *env) {
	now := at(time.Hour)
	id := enqueueOne(t, e.st, now, newJob("awaited"))
	type answer struct {
		row *store.JobRow
		err error
	}
	done := make(chan answer, 1)
	go func() {
		row, err := jobWait(t, e.st, id)
		done <- answer{row, err}
	}()
	row := fetchID(t, e.st, now, id)
	extend(t, e.st, now, lease, ref(row))
	select {
	case a := <-done:
		t.Fatalf("JobWait of running job %d returned before it finished: %+v, %v", id, a.row, a.err)
	default:
	}
	result := []byte(`{"ok":true}`)
	finishOne(t, e.st, now, &store.Report{ID: id, ClaimToken: row.ClaimToken, Kind: store.ReportCompleted, Result: result}, store.JobStateCompleted)
	a := <-done
	if a.err != nil {
		t.Fatalf("JobWait of job %d error: %v", id, a.err)
	}
	if a.row.State != store.JobStateCompleted || string(a.row.Result) != string(result) || !a.row.FinalizedAt.Equal(now) {
		t.Errorf("JobWait of job %d = State %q, Result %q, FinalizedAt %v; want completed, %q, %v", id, a.row.State, a.row.Result, a.row.FinalizedAt, result, now)
	}
}

// JobWait of an unfinished job returns the context's error when it ends.
func testWaitTimeout(t *testing.T, e *env) {
	now := at(time.Hour)
	id := enqueueOne(t, e.st, now, newJob("never"))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	row, err := e.st.JobWait(ctx, &store.JobWaitParams{ID: id})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("JobWait of available job %d with a 50ms deadline = %+v, %v; want context.DeadlineExceeded", id, row, err)
	}
	wantState(t, e.st, id, store.JobStateAvailable)
}

// JobWait of an unknown job, or of one deleted while waited for, returns
// ErrNotFound.
func testWaitNotFound(t *testing.T, e *env) {
	_, err := jobWait(t, e.st, 1<<50)
	wantErr(t, "JobWait of an unknown job", err, store.ErrNotFound)

	id := enqueueOne(t, e.st, at(0), newJob("doomed"))
	done := make(chan error, 1)
	go func() {
		_, err := jobWait(t, e.st, id)
		done <- err
	}()
	if _, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: id, Now: t0}); err != nil {
		t.Fatalf("JobDelete(%d) error: %v", id, err)
	}
	wantErr(t, "JobWait of a job deleted while waited for", <-done, store.ErrNotFound)
}
