package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sortiehq/sortie/store"
)

var listCases = []testCase{
	{name: "Filters", run: testListFilters},
	{name: "Pagination", run: testListPagination},
}

var countsCases = []testCase{
	{name: "PerQueueAndState", run: testCountsPerQueueState},
	{name: "AgreeWithListAcrossTransitions", run: testCountsAcrossTransitions},
}

var nextRunAtCases = []testCase{
	{name: "EarliestScheduledOrRetrying", run: testNextRunAt},
}

// listedJob is what testListFilters knows of a job it made.
type listedJob struct {
	id    int64
	queue string
	kind  string
	state store.JobState
}

// JobList filters by queue, state and kind, alone and together; empty
// filters match all; IDs come ascending, or descending with Desc.
func testListFilters(t *testing.T, e *env) {
	now := at(time.Hour)
	var jobs []listedJob
	for _, q := range []string{"q1", "q2"} {
		for _, k := range []string{"k1", "k2"} {
			j := newJob(k)
			j.Queue = q
			id := enqueueOne(t, e.st, now, j)
			rows := fetch(t, e.st, &store.JobFetchParams{Queue: q, Kinds: []string{k}, Limit: 1, Now: now})
			if len(rows) != 1 || rows[0].ID != id {
				t.Fatalf("JobFetch(queue %q, kinds [%s]) = %v, want [%d]", q, k, ids(rows), id)
			}
			complete(t, e.st, now, rows[0])
			jobs = append(jobs, listedJob{id, q, k, store.JobStateCompleted})
			jobs = append(jobs, listedJob{enqueueOne(t, e.st, now, j), q, k, store.JobStateAvailable})
			later := newJob(k)
			later.Queue, later.RunAt = q, now.Add(time.Hour)
			jobs = append(jobs, listedJob{enqueueOne(t, e.st, now, later), q, k, store.JobStateScheduled})
		}
	}
	for _, q := range []string{"", "q1", "q2", "none"} {
		for _, s := range []store.JobState{"", store.JobStateAvailable, store.JobStateScheduled, store.JobStateCompleted, store.JobStateDead} {
			for _, k := range []string{"", "k1", "k2", "none"} {
				var want []int64
				for _, j := range jobs {
					if (q == "" || j.queue == q) && (s == "" || j.state == s) && (k == "" || j.kind == k) {
						want = append(want, j.id)
					}
				}
				p := store.JobListParams{Queue: q, State: s, Kind: k, Limit: 100}
				rows := listAll(t, e.st, p)
				for _, r := range rows {
					if q != "" && r.Queue != q || s != "" && r.State != s || k != "" && r.Kind != k {
						t.Errorf("JobList(%+v) returned job %d of queue %q, state %q, kind %q", p, r.ID, r.Queue, r.State, r.Kind)
					}
				}
				if diff := cmp.Diff(want, ids(rows), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("JobList(%+v) mismatch (-want +got):\n%s", p, diff)
				}
				p.Desc = true
				slices.Reverse(want)
				if diff := cmp.Diff(want, listIDs(t, e.st, p), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("JobList(%+v) mismatch (-want +got):\n%s", p, diff)
				}
			}
		}
	}
}

// Paging with the cursor visits every job once, in order, ascending and
// descending; each page holds Limit jobs until the last; the cursor need
// not be a job the filter matches.
func testListPagination(t *testing.T, e *env) {
	now := at(time.Hour)
	var all, inP []int64
	for i := range 77 {
		j := newJob("page")
		if i%4 == 3 {
			j.Queue = "other"
		} else {
			j.Queue = "p"
		}
		j.Args = fmt.Appendf(nil, `{"i":%d}`, i)
		id := enqueueOne(t, e.st, now, j)
		all = append(all, id)
		if j.Queue == "p" {
			inP = append(inP, id)
		}
	}
	for _, c := range []struct {
		queue string
		want  []int64
	}{{"", all}, {"p", inP}} {
		for _, desc := range []bool{false, true} {
			want := slices.Clone(c.want)
			if desc {
				slices.Reverse(want)
			}
			var got []int64
			p := store.JobListParams{Queue: c.queue, Desc: desc, Limit: 10}
			for page := 0; ; page++ {
				rows := list(t, e.st, p)
				wantLen := min(10, len(want)-len(got))
				if len(rows) != wantLen {
					t.Fatalf("JobList(%+v) page %d returned %d jobs, want %d", p, page, len(rows), wantLen)
				}
				if len(rows) == 0 {
					break
				}
				got = append(got, ids(rows)...)
				p.AfterID = rows[len(rows)-1].ID
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("paging JobList(queue %q, desc %v) mismatch (-want +got):\n%s", c.queue, desc, diff)
			}
		}
	}
	// A cursor on a job of another queue: the page starts right after it.
	cursor := all[7] // in queue "other"
	if got := ids(list(t, e.st, store.JobListParams{Queue: "p", AfterID: cursor, Limit: 2})); !slices.Equal(got, []int64{all[8], all[9]}) {
		t.Errorf("JobList(queue p, after %d, limit 2) = %v, want %v", cursor, got, []int64{all[8], all[9]})
	}
	if got := ids(list(t, e.st, store.JobListParams{Queue: "p", AfterID: cursor, Desc: true, Limit: 2})); !slices.Equal(got, []int64{all[6], all[5]}) {
		t.Errorf("JobList(queue p, after %d, desc, limit 2) = %v, want %v", cursor, got, []int64{all[6], all[5]})
	}
	// A cursor past the end gives an empty page.
	if got := list(t, e.st, store.JobListParams{AfterID: all[len(all)-1], Limit: 10}); len(got) != 0 {
		t.Errorf("JobList(after the last job) = %v, want nothing", ids(got))
	}
	if got := list(t, e.st, store.JobListParams{AfterID: all[0], Desc: true, Limit: 10}); len(got) != 0 {
		t.Errorf("JobList(after the first job, desc) = %v, want nothing", ids(got))
	}
}

// JobCounts counts per queue and state, leaves out zero counts, and limits
// itself to one queue when asked.
func testCountsPerQueueState(t *testing.T, e *env) {
	now := at(time.Hour)
	wantCounts(t, e.st, "", nil)
	want := map[countKey]int64{
		{"q1", store.JobStateScheduled}: 1,
		{"q1", store.JobStateAvailable}: 3,
		{"q1", store.JobStateRunning}:   2,
		{"q1", store.JobStateRetrying}:  1,
		{"q1", store.JobStateCompleted}: 4,
		{"q1", store.JobStateCancelled}: 1,
		{"q1", store.JobStateDead}:      2,
		{"q2", store.JobStateAvailable}: 2,
		{"q2", store.JobStateCompleted}: 1,
		{"q2", store.JobStateWaiting}:   2,
		{"q3", store.JobStateDead}:      1,
	}
	n := 0
	for k, count := range want {
		for range count {
			n++
			inState(t, e.st, now, k.State, k.Queue, fmt.Sprintf("job-%d", n), "")
		}
	}
	// Each waiting job waits on an available job of q2-deps.
	want[countKey{"q2" + depQueueSuffix, store.JobStateAvailable}] = want[countKey{"q2", store.JobStateWaiting}]
	wantCounts(t, e.st, "", want)
	for _, q := range []string{"q1", "q2", "q3"} {
		wantQ := make(map[countKey]int64)
		for k, c := range want {
			if k.Queue == q {
				wantQ[k] = c
			}
		}
		wantCounts(t, e.st, q, wantQ)
	}
	wantCounts(t, e.st, "none", nil)
}

// JobCounts agrees with JobList after every kind of transition.
func testCountsAcrossTransitions(t *testing.T, e *env) {
	now := at(time.Hour)
	jobs := make([]*store.NewJob, 12)
	for i := range jobs {
		jobs[i] = newJob("t")
		jobs[i].Queue = []string{"a", "b"}[i%2]
		if i%3 == 0 {
			jobs[i].RunAt = now.Add(time.Minute)
		}
		jobs[i].MaxAttempts = 2
	}
	enqueue(t, e.st, now, jobs...)
	checkNow(t, e.st, "enqueue")

	now = now.Add(time.Minute)
	a := fetch(t, e.st, &store.JobFetchParams{Queue: "a", Limit: 6, Now: now})
	b := fetch(t, e.st, &store.JobFetchParams{Queue: "b", Limit: 6, Now: now})
	if len(a) != 6 || len(b) != 6 {
		t.Fatalf("JobFetch returned %d and %d jobs, want 6 and 6", len(a), len(b))
	}
	sortRows(a)
	sortRows(b)
	checkNow(t, e.st, "fetch")

	finish(t, e.st, now,
		outcomeFor(a[0], store.ReportCompleted, now),
		outcomeFor(a[1], store.ReportFailed, now),
		outcomeFor(a[2], store.ReportCancelled, now),
		outcomeFor(a[3], store.ReportSnoozed, now),
		outcomeFor(a[4], store.ReportReleased, now),
		outcomeFor(b[0], store.ReportCompleted, now),
		outcomeFor(b[1], store.ReportFailed, now),
	)
	checkNow(t, e.st, "finish")

	now = now.Add(time.Hour)
	wantRescued(t, e.st, now, 100, 5) // a[5], b[2..5]
	checkNow(t, e.st, "rescue")

	// The retrying job fails again: dead.
	again := fetch(t, e.st, &store.JobFetchParams{Queue: "a", Kinds: []string{"t"}, Limit: 10, Now: now})
	for _, r := range again {
		if r.ID == a[1].ID {
			finishOne(t, e.st, now, outcomeFor(r, store.ReportFailed, now), store.JobStateDead)
		} else {
			complete(t, e.st, now, r)
		}
	}
	checkNow(t, e.st, "fail to dead")

	retryJob(t, e.st, a[1].ID, now)
	checkNow(t, e.st, "retry")
	cancelJob(t, e.st, a[1].ID, now)
	checkNow(t, e.st, "cancel")
	if _, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: b[0].ID, Now: t0}); err != nil {
		t.Fatalf("JobDelete(%d) error: %v", b[0].ID, err)
	}
	checkNow(t, e.st, "delete")
	if _, err := e.st.JobPrune(t.Context(), &store.JobPruneParams{CompletedBefore: now.Add(time.Hour), Limit: 100}); err != nil {
		t.Fatalf("JobPrune error: %v", err)
	}
	checkNow(t, e.st, "prune")
}

// A short fetch's NextAt is the earliest RunAt among the queue's scheduled
// and retrying jobs, zero when there are none; other queues and jobs in
// other states do not count.
func testNextRunAt(t *testing.T, e *env) {
	now := at(time.Hour)
	wantNext := func(q string, want time.Time) {
		t.Helper()
		if got := nextRunAt(t, e.st, q, now); !got.Equal(want) {
			t.Errorf("JobFetch(%q).NextAt = %v, want %v", q, got, want)
		}
	}
	wantNext("q", time.Time{})

	past := newJob("avail")
	past.Queue, past.RunAt = "q", now.Add(-time.Hour)
	enqueueOne(t, e.st, now, past)
	inState(t, e.st, now, store.JobStateRunning, "q", "run", "")
	inState(t, e.st, now, store.JobStateCompleted, "q", "done", "")
	wantNext("q", time.Time{})

	sched := newJob("sched")
	sched.Queue, sched.RunAt = "q", now.Add(5*time.Minute)
	schedID := enqueueOne(t, e.st, now, sched)
	wantNext("q", sched.RunAt)

	retrying := inState(t, e.st, now, store.JobStateRetrying, "q", "retry", "") // due in an hour
	wantNext("q", sched.RunAt)

	// A retry due before the scheduled job comes first.
	soon := newJob("soon")
	soon.Queue = "q"
	soonID := enqueueOne(t, e.st, now, soon)
	r := fetch(t, e.st, &store.JobFetchParams{Queue: "q", Kinds: []string{"soon"}, Limit: 1, Now: now})
	if len(r) != 1 || r[0].ID != soonID {
		t.Fatalf("JobFetch(kinds [soon]) = %v, want [%d]", ids(r), soonID)
	}
	retryAt := now.Add(2 * time.Minute)
	finishOne(t, e.st, now, &store.Report{ID: soonID, ClaimToken: r[0].ClaimToken, Kind: store.ReportFailed, Error: failure(r[0], now, "x"), RunAt: retryAt}, store.JobStateRetrying)
	wantNext("q", retryAt)

	other := newJob("sched")
	other.Queue, other.RunAt = "other", now.Add(time.Minute)
	enqueueOne(t, e.st, now, other)
	wantNext("other", other.RunAt)
	wantNext("q", retryAt)

	cancelJob(t, e.st, soonID, now)
	wantNext("q", sched.RunAt)
	got := fetch(t, e.st, &store.JobFetchParams{Queue: "q", Kinds: []string{"sched"}, Limit: 1, Now: sched.RunAt})
	if len(got) != 1 || got[0].ID != schedID {
		t.Fatalf("JobFetch at the scheduled time = %v, want [%d]", ids(got), schedID)
	}
	wantNext("q", retrying.RunAt)
	cancelJob(t, e.st, retrying.ID, now)
	wantNext("q", time.Time{})
	wantNext("none", time.Time{})

	// A fetch that claims its limit leaves NextAt zero; one that claims
	// fewer, some or none, says when more may be claimed.
	later := newJobIn("job", "mix")
	later.RunAt = now.Add(time.Minute)
	enqueue(t, e.st, now, newJobIn("job", "mix"), newJobIn("job", "mix"), newJobIn("job", "mix"), later)
	for _, tt := range []struct {
		limit, claimed int
		next           time.Time
	}{{2, 2, time.Time{}}, {5, 1, later.RunAt}, {5, 0, later.RunAt}} {
		res, err := e.st.JobFetch(t.Context(), &store.JobFetchParams{Queue: "mix", Limit: tt.limit, Now: now, Lease: time.Minute, Worker: "w"})
		if err != nil {
			t.Fatalf("JobFetch(limit %d) error: %v", tt.limit, err)
		}
		if len(res.Jobs) != tt.claimed || !res.NextAt.Equal(tt.next) {
			t.Errorf("JobFetch(limit %d) = %d jobs, NextAt %v; want %d jobs, NextAt %v", tt.limit, len(res.Jobs), res.NextAt, tt.claimed, tt.next)
		}
	}
}
