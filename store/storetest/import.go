package storetest

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

var importCases = []testCase{
	{name: "EveryState", run: testImportEveryState},
	{name: "ImportedJobsWork", run: testImportedJobsWork},
	{name: "AgainAddsNothing", run: testImportAgain},
	{name: "ConflictsWriteNothing", run: testImportConflicts},
	{name: "DryRunWritesNothing", run: testImportDryRun},
	{name: "BadRowsRefused", run: testImportBadRows},
	{name: "BelowStoredIDs", run: testImportBelow},
	{name: "Durable", durable: true, run: testImportDurable},
}

// importNow is the time of the suite's imports.
var importNow = at(10 * time.Hour)

// exported returns rows as an export of another store holds them: one job
// in each state, linked by dependencies, a workflow and a cancellation.
//
//	1 completed, with a result       5 running, leased until importNow+30s
//	2 available                      6 retrying, due in an hour
//	3 waiting for 1 and 2            7 dead
//	4 scheduled, unique key u-4      8 cancelled because 7 ended dead
//	9 waiting for 1 only (ready once imported)
func exported() []*store.JobRow {
	base := func(id int64, kind string, st store.JobState) *store.JobRow {
		return &store.JobRow{ID: id, Kind: kind, Queue: "imported", Args: []byte(`{"n":` + strconv.FormatInt(id, 10) + `}`), State: st,
			Priority: store.PriorityDefault, MaxAttempts: 3, RunAt: at(time.Hour), CreatedAt: at(time.Hour)}
	}
	j1 := base(1, "parent", store.JobStateCompleted)
	j1.Attempt, j1.AttemptedAt, j1.AttemptedBy, j1.ClaimToken = 1, at(2*time.Hour), "w-1", 7
	j1.FinalizedAt, j1.Result, j1.Progress = at(2*time.Hour+time.Second), []byte(`{"ok":true}`), 100
	j2 := base(2, "parent", store.JobStateAvailable)
	j2.WorkflowID = 2
	j3 := base(3, "child", store.JobStateWaiting)
	j3.DependsOn, j3.WorkflowID = []int64{1, 2}, 2
	j4 := base(4, "later", store.JobStateScheduled)
	j4.RunAt, j4.UniqueKey, j4.Tags, j4.Meta = at(20*time.Hour), "u-4", []string{"vip", "eu"}, []byte(`{"by":"cron"}`)
	j4.Timeout, j4.PartitionKey, j4.Priority = time.Minute, "acct-9", store.PriorityHighest
	j5 := base(5, "work", store.JobStateRunning)
	j5.Attempt, j5.AttemptedAt, j5.AttemptedBy, j5.ClaimToken = 2, importNow.Add(-time.Minute), "w-5", 42
	j5.LeaseUntil, j5.PartitionKey, j5.Progress = importNow.Add(30*time.Second), "acct-9", 40
	j5.Errors = []store.AttemptError{{Attempt: 1, At: at(3 * time.Hour), Message: "timeout"}}
	j6 := base(6, "work", store.JobStateRetrying)
	j6.Attempt, j6.AttemptedAt, j6.AttemptedBy, j6.ClaimToken, j6.RunAt = 1, at(4*time.Hour), "w-6", 9, importNow.Add(time.Hour)
	j6.Errors = []store.AttemptError{{Attempt: 1, At: at(4 * time.Hour), Message: "502 from upstream", Stack: "goroutine 1"}}
	j7 := base(7, "parent", store.JobStateDead)
	j7.Attempt, j7.AttemptedAt, j7.AttemptedBy, j7.ClaimToken, j7.FinalizedAt = 3, at(5*time.Hour), "w-7", 11, at(5*time.Hour)
	j7.Errors = []store.AttemptError{{Attempt: 1, At: at(3 * time.Hour), Message: "a"}, {Attempt: 2, At: at(4 * time.Hour), Message: "b"}, {Attempt: 3, At: at(5 * time.Hour), Message: "c"}}
	j8 := base(8, "child", store.JobStateCancelled)
	j8.DependsOn, j8.CancelledBy, j8.FinalizedAt = []int64{7}, 7, at(5*time.Hour)
	j8.Errors = []store.AttemptError{{At: at(5 * time.Hour), Message: store.DependencyEndedMessage(7, store.JobStateDead)}}
	j9 := base(9, "child", store.JobStateWaiting)
	j9.DependsOn = []int64{1}
	return []*store.JobRow{j1, j2, j3, j4, j5, j6, j7, j8, j9}
}

// claimImported claims the next job of the imported queue at now and fails
// the test unless it is job id.
func claimImported(t testing.TB, st store.Store, now time.Time, id int64) *store.JobRow {
	t.Helper()
	rows := fetch(t, st, &store.JobFetchParams{Queue: "imported", Limit: 1, Now: now})
	if len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("JobFetch(imported, limit 1, now %v) returned %v, want job %d", now, ids(rows), id)
	}
	return rows[0]
}

// importRows imports rows at importNow and fails the test on an error.
func importRows(t testing.TB, st store.Store, rows []*store.JobRow, dry bool) []store.ImportResult {
	t.Helper()
	res, err := st.JobImport(t.Context(), &store.JobImportParams{Jobs: rows, DryRun: dry, Now: importNow})
	if err != nil {
		t.Fatalf("JobImport(%d jobs) error: %v", len(rows), err)
	}
	if len(res) != len(rows) {
		t.Fatalf("JobImport(%d jobs) returned %d results", len(rows), len(res))
	}
	return res
}

// wantStatuses fails the test unless res has the statuses want.
func wantStatuses(t testing.TB, res []store.ImportResult, want ...store.ImportStatus) {
	t.Helper()
	got := make([]store.ImportStatus, len(res))
	for i, r := range res {
		got[i] = r.Status
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("JobImport statuses (-want +got):\n%s", d)
	}
}

func statuses(n int, s store.ImportStatus) []store.ImportStatus {
	v := make([]store.ImportStatus, n)
	for i := range v {
		v[i] = s
	}
	return v
}

// Every field of a job in every state comes back from JobGet as it was
// exported (CancelledBy included); a waiting job whose dependencies all
// completed comes back available. The counts agree (checked after every
// case).
func testImportEveryState(t *testing.T, e *env) {
	rows := exported()
	wantStatuses(t, importRows(t, e.st, rows, false), statuses(len(rows), store.ImportAdded)...)
	for _, want := range rows {
		w := *want
		if w.ID == 9 {
			w.State = store.JobStateAvailable
		}
		if d := diffRow(&w, get(t, e.st, w.ID)); d != "" {
			t.Errorf("imported job %d (-exported +stored):\n%s", w.ID, d)
		}
	}
	wantCounts(t, e.st, "imported", map[countKey]int64{
		{"imported", store.JobStateCompleted}: 1, {"imported", store.JobStateAvailable}: 2, {"imported", store.JobStateWaiting}: 1,
		{"imported", store.JobStateScheduled}: 1, {"imported", store.JobStateRunning}: 1, {"imported", store.JobStateRetrying}: 1,
		{"imported", store.JobStateDead}: 1, {"imported", store.JobStateCancelled}: 1,
	})
}

// Imported jobs go on as if they had lived here: new IDs and claim tokens
// come after the imported ones, the available ones are claimed, the
// running one is rescued when its lease ends, a completed dependency
// releases its dependent, a retry of the dead job revives the job it
// cancelled, and a pending job holds its unique key.
func testImportedJobsWork(t *testing.T, e *env) {
	importRows(t, e.st, exported(), false)
	now := importNow.Add(time.Second)
	if res := enqueue(t, e.st, now, &store.NewJob{Kind: "later", Queue: "imported", Args: []byte(`{}`), Priority: 2, MaxAttempts: 3, UniqueKey: "u-4"})[0]; !res.Duplicate || res.ID != 4 {
		t.Errorf("enqueue with the imported job 4's unique key = %+v, want a duplicate of job 4", res)
	}
	if id := enqueueOne(t, e.st, now, newJob("fresh")); id <= 9 {
		t.Errorf("a job enqueued after the import got ID %d, want one after the imported 9", id)
	}
	got := fetch(t, e.st, &store.JobFetchParams{Queue: "imported", Limit: 10, Now: now, Lease: lease, Worker: "w-new"})
	if d := sameIDs([]int64{2, 9}, sorted(ids(got))); d != "" {
		t.Fatalf("JobFetch after the import claimed (-want +got):\n%s", d)
	}
	for _, row := range got {
		if row.ClaimToken <= 42 {
			t.Errorf("job %d claimed with token %d, want one after the imported 42", row.ID, row.ClaimToken)
		}
	}
	complete(t, e.st, now, got[0])
	complete(t, e.st, now, got[1])
	wantState(t, e.st, 3, store.JobStateAvailable)
	wantRescued(t, e.st, importNow.Add(31*time.Second), 10, 1)
	if row := wantState(t, e.st, 5, store.JobStateAvailable); len(row.Errors) != 2 || row.Attempt != 2 {
		t.Errorf("rescued job 5: attempt %d with %d errors, want attempt 2 with the imported error and the rescue's", row.Attempt, len(row.Errors))
	}
	if _, err := e.st.JobRetry(t.Context(), &store.JobRetryParams{ID: 7, Now: now}); err != nil {
		t.Fatalf("JobRetry(7) error: %v", err)
	}
	if row := wantState(t, e.st, 8, store.JobStateWaiting); row.CancelledBy != 0 {
		t.Errorf("revived job 8 has CancelledBy %d, want 0", row.CancelledBy)
	}
}

// Importing the same jobs again adds nothing and changes nothing, even
// after the imported jobs moved on.
func testImportAgain(t *testing.T, e *env) {
	rows := exported()
	importRows(t, e.st, rows, false)
	before := counts(t, e.st, "imported")
	wantStatuses(t, importRows(t, e.st, exported(), false), statuses(len(rows), store.ImportPresent)...)
	wantCounts(t, e.st, "imported", before)
	complete(t, e.st, importNow, claimImported(t, e.st, importNow, 2))
	after := counts(t, e.st, "imported")
	wantStatuses(t, importRows(t, e.st, exported(), false), statuses(len(rows), store.ImportPresent)...)
	wantCounts(t, e.st, "imported", after)
	wantState(t, e.st, 2, store.JobStateCompleted)
}

// A job whose ID holds another job, or whose unique key another pending
// job holds (in the store or earlier in the call), is reported, and then
// nothing of the call is written.
func testImportConflicts(t *testing.T, e *env) {
	other := enqueueOne(t, e.st, at(0), newJob("other"))
	held := newJob("holder")
	held.UniqueKey = "k"
	holder := enqueueOne(t, e.st, at(0), held)
	// IDs past the stored jobs' (a store need not number from 1).
	b := max(other, holder) + 100
	rows := exported()[:4]
	rows[0].ID = other // job 1 becomes the ID of the stored "other"
	rows[1].ID, rows[2].ID, rows[3].ID = b, b+1, b+2
	rows[1].WorkflowID, rows[2].WorkflowID = b, b
	rows[2].DependsOn = []int64{b}
	rows[1].UniqueKey = "k"
	rows[3].UniqueKey = "dup"
	same := *rows[3]
	same.ID = b + 3
	fin := *exported()[6]
	fin.ID, fin.UniqueKey = b+4, "k" // finished jobs hold no key
	rows = append(rows, &same, &fin)
	res := importRows(t, e.st, rows, false)
	want := []store.ImportResult{{Status: store.ImportIDTaken}, {Status: store.ImportUniqueTaken, Other: holder},
		{Status: store.ImportAdded}, {Status: store.ImportAdded}, {Status: store.ImportUniqueTaken, Other: b + 2}, {Status: store.ImportAdded}}
	if d := cmp.Diff(want, res); d != "" {
		t.Fatalf("JobImport with conflicts (-want +got):\n%s", d)
	}
	for _, id := range []int64{b, b + 1, b + 2, b + 3, b + 4} {
		if _, err := e.st.JobGet(t.Context(), &store.JobGetParams{ID: id}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("JobGet(%d) after a refused import: error %v, want ErrNotFound", id, err)
		}
	}
	if got := get(t, e.st, other); got.Kind != "other" {
		t.Errorf("job %d is now of kind %q, want the stored %q", other, got.Kind, "other")
	}
}

// DryRun reports what an import would do and writes nothing: the next
// job enqueued does not get an ID after the dry run's.
func testImportDryRun(t *testing.T, e *env) {
	// IDs far past any a fresh store hands out first (a store need not
	// number from 1: Redis's IDs follow its clock in microseconds).
	const shift = 1 << 52
	rows := exported()
	for _, r := range rows {
		r.ID += shift
		if r.WorkflowID != 0 {
			r.WorkflowID += shift
		}
		if r.CancelledBy != 0 {
			r.CancelledBy += shift
		}
		for k := range r.DependsOn {
			r.DependsOn[k] += shift
		}
	}
	wantStatuses(t, importRows(t, e.st, rows, true), statuses(len(rows), store.ImportAdded)...)
	if got := listAll(t, e.st, store.JobListParams{Limit: 100}); len(got) != 0 {
		t.Fatalf("after a dry run the store lists %d jobs, want none", len(got))
	}
	if id := enqueueOne(t, e.st, at(0), newJob("fresh")); id >= shift {
		t.Errorf("first job after a dry run got ID %d, want one below the dry run's %d", id, rows[0].ID)
	}
}

// Rows a store could not hold are refused, naming the job and the field,
// and nothing is written.
func testImportBadRows(t *testing.T, e *env) {
	for _, c := range []struct {
		name  string
		edit  func(rows []*store.JobRow)
		field string
	}{
		{"ids out of order", func(r []*store.JobRow) { r[1].ID = 1 }, "ids must increase"},
		{"running without a lease", func(r []*store.JobRow) { r[4].LeaseUntil = time.Time{} }, "lease_until"},
		{"dependency on a later job", func(r []*store.JobRow) { r[2].DependsOn = []int64{1, 5} }, "depends_on 5"},
		{"unknown state", func(r []*store.JobRow) { r[0].State = "lost" }, "state"},
		{"bad args", func(r []*store.JobRow) { r[3].Args = []byte(`{`) }, "args"},
		{"finished without finalized_at", func(r []*store.JobRow) { r[6].FinalizedAt = time.Time{} }, "finalized_at"},
	} {
		rows := exported()
		c.edit(rows)
		_, err := e.st.JobImport(t.Context(), &store.JobImportParams{Jobs: rows, Now: importNow})
		if err == nil || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), "job ") {
			t.Errorf("%s: JobImport error %v, want one naming the job and %q", c.name, err, c.field)
		}
	}
	if got := listAll(t, e.st, store.JobListParams{Limit: 100}); len(got) != 0 {
		t.Fatalf("after refused imports the store lists %d jobs, want none", len(got))
	}
}

// Jobs imported with IDs below the stored ones (from a remap, or a store
// that deleted its first jobs) are stored and listed in ID order.
func testImportBelow(t *testing.T, e *env) {
	var high []int64
	for range 3 {
		high = append(high, enqueueOne(t, e.st, at(0), newJob("stored")))
	}
	if _, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: high[0], Now: at(0)}); err != nil {
		t.Fatal(err)
	}
	row := exported()[1]
	row.ID, row.WorkflowID = high[0], 0
	wantStatuses(t, importRows(t, e.st, []*store.JobRow{row}, false), store.ImportAdded)
	if d := sameIDs(high, listIDs(t, e.st, store.JobListParams{Limit: 10})); d != "" {
		t.Errorf("JobList after importing job %d (-want +got):\n%s", high[0], d)
	}
	if id := enqueueOne(t, e.st, at(0), newJob("fresh")); id <= high[2] {
		t.Errorf("next job got ID %d, want one after %d", id, high[2])
	}
}

// Imported jobs, and what they hold, survive a restart.
func testImportDurable(t *testing.T, e *env) {
	importRows(t, e.st, exported(), false)
	e.reopen(t)
	if d := diffRow(exported()[7], get(t, e.st, 8)); d != "" {
		t.Errorf("job 8 after a restart (-exported +stored):\n%s", d)
	}
	complete(t, e.st, importNow, claimImported(t, e.st, importNow, 2))
	wantState(t, e.st, 3, store.JobStateAvailable)
	if res := enqueue(t, e.st, importNow, &store.NewJob{Kind: "later", Queue: "imported", Args: []byte(`{}`), Priority: 2, MaxAttempts: 3, UniqueKey: "u-4"})[0]; !res.Duplicate {
		t.Errorf("enqueue with job 4's unique key after a restart = %+v, want a duplicate", res)
	}
}
