package storetest

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sortiehq/sortie/store"
)

// t0 is the suite's epoch. Every time the suite builds is t0 plus a whole
// number of microseconds, so stores that keep microsecond precision (SQL
// databases) round-trip them exactly.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// at returns t0 + d; d must be a multiple of a microsecond.
func at(d time.Duration) time.Time { return t0.Add(d) }

const (
	defaultQueue = "default"
	lease        = 30 * time.Second
)

// rowOpts compares JobRows: times with Equal, nil and empty slices alike.
var rowOpts = cmp.Options{cmpopts.EquateEmpty()}

// diffRow reports the differences between two rows ("" when equal).
func diffRow(want, got *store.JobRow) string { return cmp.Diff(want, got, rowOpts) }

// newJob returns a valid job of kind in the default queue.
func newJob(kind string) *store.NewJob {
	return &store.NewJob{
		Kind:        kind,
		Queue:       defaultQueue,
		Args:        []byte(`{}`),
		Priority:    store.PriorityDefault,
		MaxAttempts: 25,
	}
}

// newJobIn returns a valid job of kind in queue.
func newJobIn(kind, queue string) *store.NewJob {
	j := newJob(kind)
	j.Queue = queue
	return j
}

// enqueue inserts jobs at now and fails the test on error or on a wrong
// number of results.
func enqueue(t testing.TB, st store.Store, now time.Time, jobs ...*store.NewJob) []store.EnqueueResult {
	t.Helper()
	res, err := st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Jobs: jobs, Now: now})
	if err != nil {
		t.Fatalf("JobEnqueueMany(%d jobs) error: %v", len(jobs), err)
	}
	if len(res) != len(jobs) {
		t.Fatalf("JobEnqueueMany(%d jobs) returned %d results, want %d", len(jobs), len(res), len(jobs))
	}
	return res
}

// enqueueOne inserts one job that must not be a duplicate and returns its ID.
func enqueueOne(t testing.TB, st store.Store, now time.Time, j *store.NewJob) int64 {
	t.Helper()
	res := enqueue(t, st, now, j)
	if res[0].Duplicate {
		t.Fatalf("JobEnqueueMany(kind %q, unique key %q) = duplicate of job %d, want a new job", j.Kind, j.UniqueKey, res[0].ID)
	}
	return res[0].ID
}

// enqueueN inserts n jobs of kind in one batch and returns their IDs.
func enqueueN(t testing.TB, st store.Store, now time.Time, n int, kind string) []int64 {
	t.Helper()
	jobs := make([]*store.NewJob, n)
	for i := range jobs {
		jobs[i] = newJob(kind)
		jobs[i].Args = fmt.Appendf(nil, `{"i":%d}`, i)
	}
	ids := make([]int64, n)
	for i, r := range enqueue(t, st, now, jobs...) {
		ids[i] = r.ID
	}
	return ids
}

// fetch claims jobs and fails the test on error or when more than p.Limit
// come back.
func fetch(t testing.TB, st store.Store, p *store.JobFetchParams) []*store.JobRow {
	t.Helper()
	if p.Queue == "" {
		p.Queue = defaultQueue
	}
	if p.Lease == 0 {
		p.Lease = lease
	}
	if p.Worker == "" {
		p.Worker = "worker-1"
	}
	rows, err := store.FetchedJobs(st.JobFetch(t.Context(), p))
	if err != nil {
		t.Fatalf("JobFetch(queue %q, limit %d, now %v) error: %v", p.Queue, p.Limit, p.Now, err)
	}
	if len(rows) > p.Limit {
		t.Fatalf("JobFetch(limit %d) returned %d jobs, want at most %d", p.Limit, len(rows), p.Limit)
	}
	return rows
}

// fetchIDs is fetch returning only the IDs, in the order returned.
func fetchIDs(t testing.TB, st store.Store, p *store.JobFetchParams) []int64 {
	t.Helper()
	return ids(fetch(t, st, p))
}

// fetchOne claims exactly one job of the default queue at now.
func fetchOne(t testing.TB, st store.Store, now time.Time) *store.JobRow {
	t.Helper()
	rows := fetch(t, st, &store.JobFetchParams{Limit: 1, Now: now})
	if len(rows) != 1 {
		t.Fatalf("JobFetch(limit 1, now %v) returned %d jobs, want 1", now, len(rows))
	}
	return rows[0]
}

// fetchID claims the next job of the default queue at now and fails the
// test unless it is job id.
func fetchID(t testing.TB, st store.Store, now time.Time, id int64) *store.JobRow {
	t.Helper()
	row := fetchOne(t, st, now)
	if row.ID != id {
		t.Fatalf("JobFetch(limit 1, now %v) returned job %d, want job %d", now, row.ID, id)
	}
	return row
}

// fetchNone fails the test if a fetch of the default queue at now claims
// anything.
func fetchNone(t testing.TB, st store.Store, now time.Time) {
	t.Helper()
	if got := fetchIDs(t, st, &store.JobFetchParams{Limit: 100, Now: now}); len(got) != 0 {
		t.Fatalf("JobFetch(now %v) returned jobs %v, want none", now, got)
	}
}

// finish applies outcomes at now.
func finish(t testing.TB, st store.Store, now time.Time, outs ...*store.Report) []store.ReportResult {
	t.Helper()
	res, err := st.JobFinish(t.Context(), &store.JobFinishParams{Reports: outs, Now: now})
	if err != nil {
		t.Fatalf("JobFinish(%d outcomes) error: %v", len(outs), err)
	}
	if len(res) != len(outs) {
		t.Fatalf("JobFinish(%d outcomes) returned %d results, want %d", len(outs), len(res), len(outs))
	}
	return res
}

// finishOne applies one outcome that must be applied and leave the job in
// state want.
func finishOne(t testing.TB, st store.Store, now time.Time, o *store.Report, want store.JobState) {
	t.Helper()
	res := finish(t, st, now, o)
	if got := res[0]; !got.Applied || got.State != want {
		t.Fatalf("JobFinish(job %d, %v) = {Applied: %v, State: %q}, want {Applied: true, State: %q}", o.ID, o.Kind, got.Applied, got.State, want)
	}
}

// complete finishes a claimed job as completed.
func complete(t testing.TB, st store.Store, now time.Time, row *store.JobRow) {
	t.Helper()
	finishOne(t, st, now, &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportCompleted}, store.JobStateCompleted)
}

// failure returns the AttemptError a worker reports for row's attempt.
func failure(row *store.JobRow, now time.Time, msg string) *store.AttemptError {
	return &store.AttemptError{Attempt: row.Attempt, At: now, Message: msg}
}

// get returns job id.
func get(t testing.TB, st store.Store, id int64) *store.JobRow {
	t.Helper()
	row, err := st.JobGet(t.Context(), &store.JobGetParams{ID: id})
	if err != nil {
		t.Fatalf("JobGet(%d) error: %v", id, err)
	}
	if row == nil {
		t.Fatalf("JobGet(%d) returned nil and no error", id)
	}
	if row.ID != id {
		t.Fatalf("JobGet(%d) returned job %d", id, row.ID)
	}
	return row
}

// wantState fails the test unless job id is in state want, and returns it.
func wantState(t testing.TB, st store.Store, id int64, want store.JobState) *store.JobRow {
	t.Helper()
	row := get(t, st, id)
	if row.State != want {
		t.Fatalf("job %d: State = %q, want %q", id, row.State, want)
	}
	return row
}

// rescue rescues expired leases at now.
func rescue(t testing.TB, st store.Store, now time.Time, limit int) int {
	t.Helper()
	n, err := st.JobRescue(t.Context(), &store.JobRescueParams{Now: now, Limit: limit})
	if err != nil {
		t.Fatalf("JobRescue(now %v, limit %d) error: %v", now, limit, err)
	}
	return n
}

// wantRescued fails the test unless a rescue at now rescues exactly want jobs.
func wantRescued(t testing.TB, st store.Store, now time.Time, limit, want int) {
	t.Helper()
	if got := rescue(t, st, now, limit); got != want {
		t.Fatalf("JobRescue(now %v, limit %d) = %d, want %d", now, limit, got, want)
	}
}

// extendStatus extends leases at now and returns each lease's status.
func extendStatus(t testing.TB, st store.Store, now time.Time, d time.Duration, refs ...store.LeaseRef) []store.LeaseStatus {
	t.Helper()
	res, err := st.LeaseExtend(t.Context(), &store.LeaseExtendParams{Leases: refs, Now: now, Lease: d})
	if err != nil {
		t.Fatalf("LeaseExtend(%d leases) error: %v", len(refs), err)
	}
	if len(res) != len(refs) {
		t.Fatalf("LeaseExtend(%d leases) returned %d results, want %d", len(refs), len(res), len(refs))
	}
	return res
}

// extend extends leases at now and returns, in order, whether each is
// held. A lost lease must not report CancelRequested.
func extend(t testing.TB, st store.Store, now time.Time, d time.Duration, refs ...store.LeaseRef) []bool {
	t.Helper()
	res := extendStatus(t, st, now, d, refs...)
	held := make([]bool, len(res))
	for i, r := range res {
		held[i] = r.Held
		if !r.Held && r.CancelRequested {
			t.Errorf("LeaseExtend of job %d = {Held: false, CancelRequested: true}, want CancelRequested only on a held lease", refs[i].ID)
		}
	}
	return held
}

// ref returns the lease a fetch handed out for row.
func ref(row *store.JobRow) store.LeaseRef {
	return store.LeaseRef{ID: row.ID, ClaimToken: row.ClaimToken}
}

// list returns one page of JobList.
func list(t testing.TB, st store.Store, p store.JobListParams) []*store.JobRow {
	t.Helper()
	rows, err := st.JobList(t.Context(), &p)
	if err != nil {
		t.Fatalf("JobList(%+v) error: %v", p, err)
	}
	if len(rows) > p.Limit {
		t.Fatalf("JobList(%+v) returned %d jobs, want at most %d", p, len(rows), p.Limit)
	}
	return rows
}

// listAll pages through JobList with the filters of p (p.Limit is the page
// size) and returns every job, checking the order and that no ID repeats.
func listAll(t testing.TB, st store.Store, p store.JobListParams) []*store.JobRow {
	t.Helper()
	if p.Limit == 0 {
		p.Limit = 500
	}
	var all []*store.JobRow
	seen := make(map[int64]bool)
	for {
		page := list(t, st, p)
		for _, row := range page {
			if seen[row.ID] {
				t.Fatalf("JobList(%+v) returned job %d again", p, row.ID)
			}
			seen[row.ID] = true
			if p.AfterID != 0 && (!p.Desc && row.ID <= p.AfterID || p.Desc && row.ID >= p.AfterID) {
				t.Fatalf("JobList(%+v) returned job %d out of order (after %d, desc %v)", p, row.ID, p.AfterID, p.Desc)
			}
			p.AfterID = row.ID
			all = append(all, row)
		}
		if len(page) < p.Limit {
			return all
		}
	}
}

// listIDs is listAll returning only the IDs.
func listIDs(t testing.TB, st store.Store, p store.JobListParams) []int64 {
	t.Helper()
	return ids(listAll(t, st, p))
}

// countKey names one JobCounts entry.
type countKey struct {
	Queue string
	State store.JobState
}

// counts returns JobCounts as a map, failing on zero or duplicate entries.
func counts(t testing.TB, st store.Store, queue string) map[countKey]int64 {
	t.Helper()
	cs, err := st.JobCounts(t.Context(), &store.JobCountsParams{Queue: queue})
	if err != nil {
		t.Fatalf("JobCounts(queue %q) error: %v", queue, err)
	}
	m := make(map[countKey]int64)
	for _, c := range cs {
		k := countKey{c.Queue, c.State}
		if c.Count <= 0 {
			t.Fatalf("JobCounts(queue %q) has %+v, want zero counts left out", queue, c)
		}
		if _, dup := m[k]; dup {
			t.Fatalf("JobCounts(queue %q) lists queue %q state %q twice", queue, c.Queue, c.State)
		}
		m[k] = c.Count
	}
	return m
}

// wantCounts fails the test unless JobCounts(queue) equals want.
func wantCounts(t testing.TB, st store.Store, queue string, want map[countKey]int64) {
	t.Helper()
	if diff := cmp.Diff(want, counts(t, st, queue), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("JobCounts(queue %q) mismatch (-want +got):\n%s", queue, diff)
	}
}

// ids returns the IDs of rows, in order.
func ids(rows []*store.JobRow) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// sorted returns a sorted copy of s.
func sorted(s []int64) []int64 {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// sameIDs reports the difference between two ID sets ("" when equal).
func sameIDs(want, got []int64) string {
	return cmp.Diff(sorted(want), sorted(got), cmpopts.EquateEmpty())
}

// sortRows sorts rows by ID.
func sortRows(rows []*store.JobRow) {
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
}

// depQueueSuffix names the queue (queue + suffix) where inState puts the
// available job a waiting job depends on.
const depQueueSuffix = "-deps"

// inState enqueues a job of kind into queue at now (no other job of that
// kind may be available in that queue) and takes it to state s the way a
// worker would: waiting on an available job of queue+depQueueSuffix, claimed for
// running, failed with a retry an hour later for retrying, finished for
// completed and cancelled, and failed with MaxAttempts 1 for dead. A
// scheduled job is due an hour after now.
func inState(t testing.TB, st store.Store, now time.Time, s store.JobState, queue, kind, uniqueKey string) *store.JobRow {
	t.Helper()
	j := newJob(kind)
	j.Queue = queue
	j.UniqueKey = uniqueKey
	switch s {
	case store.JobStateScheduled:
		j.RunAt = now.Add(time.Hour)
	case store.JobStateDead:
		j.MaxAttempts = 1
	}
	if s == store.JobStateWaiting {
		dep := enqueueOne(t, st, now, newJobIn("dep", queue+depQueueSuffix))
		j.DependsOn = []int64{dep}
	}
	id := enqueueOne(t, st, now, j)
	if s == store.JobStateWaiting || s == store.JobStateScheduled || s == store.JobStateAvailable {
		return wantState(t, st, id, s)
	}
	rows := fetch(t, st, &store.JobFetchParams{Queue: queue, Kinds: []string{kind}, Limit: 1, Now: now})
	if len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("JobFetch(queue %q, kinds [%s]) = %v, want [%d]", queue, kind, ids(rows), id)
	}
	row := rows[0]
	o := &store.Report{ID: id, ClaimToken: row.ClaimToken}
	switch s {
	case store.JobStateRunning:
		return row
	case store.JobStateRetrying:
		o.Kind, o.Error, o.RunAt = store.ReportFailed, failure(row, now, "try again"), now.Add(time.Hour)
	case store.JobStateCompleted:
		o.Kind = store.ReportCompleted
	case store.JobStateCancelled:
		o.Kind, o.Error = store.ReportCancelled, failure(row, now, "cancelled by handler")
	case store.JobStateDead:
		o.Kind, o.Error, o.RunAt = store.ReportFailed, failure(row, now, "gave up"), now.Add(time.Hour)
	default:
		t.Fatalf("inState: unknown state %q", s)
	}
	finishOne(t, st, now, o, s)
	return get(t, st, id)
}
