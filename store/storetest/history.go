package storetest

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/fetchplan"
)

var historyCases = []testCase{
	{name: "Outcomes", run: testHistoryOutcomes},
	{name: "Bounds", run: testHistoryBounds},
	{name: "Rescue", run: testHistoryRescue},
	{name: "Cancellations", run: testHistoryCancellations},
	{name: "KeptWhenJobsGo", run: testHistoryKept},
	{name: "Concurrent", run: testHistoryConcurrent},
	{name: "Prune", run: testHistoryPrune},
	{name: "SurvivesReopen", durable: true, run: testHistoryDurable},
}

var latencyCases = []testCase{
	{name: "OldestDue", run: testLatencyOldestDue},
	{name: "Claims", run: testLatencyClaims},
}

// hrow is a history row, for tables of expected rows.
func hrow(queue string, minute time.Time, o store.HistoryOutcome, n int64) store.HistoryRow {
	return store.HistoryRow{Queue: queue, At: minute, Outcome: o, Count: n}
}

// history returns JobHistory(p), failing the test on error or on rows out
// of order, repeated, without a count, of an unknown outcome, or not on a
// minute in UTC.
func history(t testing.TB, st store.Store, p store.JobHistoryParams) []store.HistoryRow {
	t.Helper()
	rows, err := st.JobHistory(t.Context(), &p)
	if err != nil {
		t.Fatalf("JobHistory(%+v) error: %v", p, err)
	}
	for i, r := range rows {
		switch {
		case r.Count <= 0:
			t.Fatalf("JobHistory(%+v) row %+v has no count, want rows without counts left out", p, r)
		case !r.Outcome.Valid():
			t.Fatalf("JobHistory(%+v) row %+v has an unknown outcome", p, r)
		case !r.At.Equal(store.HistoryMinute(r.At)) || r.At.Location() != time.UTC:
			t.Fatalf("JobHistory(%+v) row %+v: At is not the start of a minute in UTC", p, r)
		case i > 0 && store.CompareHistoryRows(rows[i-1], r) >= 0:
			t.Fatalf("JobHistory(%+v) rows %+v and %+v are out of order or repeated", p, rows[i-1], r)
		}
	}
	return rows
}

// wantHistory fails the test unless JobHistory(p) returns want.
func wantHistory(t testing.TB, st store.Store, p store.JobHistoryParams, want ...store.HistoryRow) {
	t.Helper()
	if diff := cmp.Diff(want, history(t, st, p), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("JobHistory(queue %q, since %v, until %v) mismatch (-want +got):\n%s", p.Queue, p.Since, p.Until, diff)
	}
}

// claimAll claims every due job of queue at now (at most 100).
func claimAll(t testing.TB, st store.Store, queue string, now time.Time) map[int64]*store.JobRow {
	t.Helper()
	out := map[int64]*store.JobRow{}
	for _, r := range fetch(t, st, &store.JobFetchParams{Queue: queue, Limit: 100, Now: now}) {
		out[r.ID] = r
	}
	return out
}

// report returns the outcome of kind for claimed row, with an error for
// the kinds that take one and RunAt runAt.
func report(row *store.JobRow, kind store.ReportKind, now, runAt time.Time) *store.Report {
	o := &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: kind, RunAt: runAt}
	if kind == store.ReportFailed || kind == store.ReportCancelled {
		o.Error = failure(row, now, "no")
	}
	return o
}

// Each applied outcome of one JobFinish counts in the minute of its Now,
// per queue and outcome, summed over the batch: completed, cancelled and
// dead as themselves, a failure with attempts left as retried; snoozes,
// releases and refused outcomes do not count.
func testHistoryOutcomes(t *testing.T, e *env) {
	now := at(time.Hour)
	m0 := store.HistoryMinute(now)
	mk := func(queue string, maxAttempts int) int64 {
		j := newJobIn("job", queue)
		j.MaxAttempts = maxAttempts
		return enqueueOne(t, e.st, now, j)
	}
	a := []int64{mk("a", 5), mk("a", 5), mk("a", 5), mk("a", 1), mk("a", 5), mk("a", 5), mk("a", 5), mk("a", 5)}
	b := mk("b", 5)
	ca, cb := claimAll(t, e.st, "a", now), claimAll(t, e.st, "b", now)
	if len(ca) != len(a) || len(cb) != 1 {
		t.Fatalf("claimed %d jobs of a and %d of b, want %d and 1", len(ca), len(cb), len(a))
	}
	done := now.Add(10 * time.Second)
	stale := *ca[a[7]]
	stale.ClaimToken++
	res := finish(t, e.st, done,
		report(ca[a[0]], store.ReportCompleted, done, time.Time{}),
		report(ca[a[1]], store.ReportCompleted, done, time.Time{}),
		report(ca[a[2]], store.ReportFailed, done, done.Add(time.Hour)),
		report(ca[a[3]], store.ReportFailed, done, done.Add(time.Hour)),
		report(ca[a[4]], store.ReportCancelled, done, time.Time{}),
		report(ca[a[5]], store.ReportSnoozed, done, done),
		report(ca[a[6]], store.ReportReleased, done, time.Time{}),
		report(&stale, store.ReportCompleted, done, time.Time{}),
		report(cb[b], store.ReportCompleted, done, time.Time{}),
	)
	wantStates := []store.JobState{store.JobStateCompleted, store.JobStateCompleted, store.JobStateRetrying,
		store.JobStateDead, store.JobStateCancelled, store.JobStateAvailable, store.JobStateAvailable, "", store.JobStateCompleted}
	for i, r := range res {
		if r.Applied != (wantStates[i] != "") || r.State != wantStates[i] {
			t.Fatalf("JobFinish outcome %d = %+v, want state %q", i, r, wantStates[i])
		}
	}
	wantHistory(t, e.st, store.JobHistoryParams{},
		hrow("a", m0, store.HistoryCompleted, 2), hrow("a", m0, store.HistoryCancelled, 1),
		hrow("a", m0, store.HistoryDead, 1), hrow("a", m0, store.HistoryRetried, 1),
		hrow("b", m0, store.HistoryCompleted, 1))

	// The snoozed and released jobs (and the refused one, released again
	// by nobody: it is still running) finish a minute later.
	later := done.Add(time.Minute)
	again := claimAll(t, e.st, "a", later)
	if len(again) != 2 {
		t.Fatalf("claimed %d jobs of a again, want the snoozed and the released one", len(again))
	}
	var outs []*store.Report
	for _, r := range again {
		outs = append(outs, report(r, store.ReportCompleted, later, time.Time{}))
	}
	finish(t, e.st, later, outs...)
	finish(t, e.st, later, report(ca[a[7]], store.ReportFailed, later, later.Add(time.Hour)))
	m1 := m0.Add(time.Minute)
	wantHistory(t, e.st, store.JobHistoryParams{},
		hrow("a", m0, store.HistoryCompleted, 2), hrow("a", m0, store.HistoryCancelled, 1),
		hrow("a", m0, store.HistoryDead, 1), hrow("a", m0, store.HistoryRetried, 1),
		hrow("b", m0, store.HistoryCompleted, 1),
		hrow("a", m1, store.HistoryCompleted, 2), hrow("a", m1, store.HistoryRetried, 1))
	wantHistory(t, e.st, store.JobHistoryParams{Queue: "b"}, hrow("b", m0, store.HistoryCompleted, 1))
	wantHistory(t, e.st, store.JobHistoryParams{Queue: "none"})
}

// JobHistory returns the minutes from Since (inclusive) to Until
// (exclusive); a zero Until has no end.
func testHistoryBounds(t *testing.T, e *env) {
	now := at(time.Hour)
	m := func(i int) time.Time { return store.HistoryMinute(now).Add(time.Duration(i) * time.Minute) }
	enqueueOne(t, e.st, now, newJob("job"))
	var want []store.HistoryRow
	for i := range 4 {
		done := now.Add(time.Duration(i) * time.Minute)
		complete(t, e.st, done, fetchOne(t, e.st, done))
		want = append(want, hrow(defaultQueue, m(i), store.HistoryCompleted, 1))
		enqueueOne(t, e.st, done, newJob("job"))
	}
	for _, tt := range []struct {
		name         string
		since, until time.Time
		want         []store.HistoryRow
	}{
		{"everything", time.Time{}, time.Time{}, want},
		{"from the second minute", m(1), time.Time{}, want[1:]},
		{"from within the first minute", m(0).Add(30 * time.Second), time.Time{}, want[1:]},
		{"until the third minute", time.Time{}, m(2), want[:2]},
		{"one minute", m(2), m(3), want[2:3]},
		{"after the last", m(4), time.Time{}, nil},
		{"before the first", m(-10), m(0), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantHistory(t, e.st, store.JobHistoryParams{Since: tt.since, Until: tt.until}, tt.want...)
		})
	}
}

// A rescue counts what it does to each job: available again as retried,
// dead as dead, cancelled (a cancel was asked) as cancelled.
func testHistoryRescue(t *testing.T, e *env) {
	now := at(time.Hour)
	for _, max := range []int{5, 1, 5} {
		j := newJobIn("job", "q")
		j.MaxAttempts = max
		enqueueOne(t, e.st, now, j)
	}
	claimed := fetch(t, e.st, &store.JobFetchParams{Queue: "q", Limit: 3, Now: now})
	if len(claimed) != 3 {
		t.Fatalf("claimed %d jobs, want 3", len(claimed))
	}
	cancelJob(t, e.st, claimed[2].ID, now)
	expired := now.Add(lease + time.Second)
	wantRescued(t, e.st, expired, 10, 3)
	m := store.HistoryMinute(expired)
	wantHistory(t, e.st, store.JobHistoryParams{},
		hrow("q", m, store.HistoryCancelled, 1), hrow("q", m, store.HistoryDead, 1), hrow("q", m, store.HistoryRetried, 1))
}

// Every way a pending job ends cancelled counts: JobCancel, a dependency
// that ended dead (down the graph), an enqueue whose dependency already
// failed, a full queue dropping its oldest job.
func testHistoryCancellations(t *testing.T, e *env) {
	now := at(time.Hour)
	m := store.HistoryMinute(now)
	cancelJob(t, e.st, enqueueOne(t, e.st, now, newJobIn("job", "c")), now)

	dj := newJobIn("dep", "d")
	dj.MaxAttempts = 1
	dep := enqueueOne(t, e.st, now, dj)
	child := enqueueState(t, e.st, now, dependent("w", dep), store.JobStateWaiting)
	enqueueState(t, e.st, now, dependent("w", child), store.JobStateWaiting)
	row := claimID(t, e.st, "d", dep, now)
	finishOne(t, e.st, now, report(row, store.ReportFailed, now, now.Add(time.Hour)), store.JobStateDead)
	enqueueState(t, e.st, now, dependent("w", dep), store.JobStateCancelled)

	configure(t, e.st, "bounded", store.QueueSettings{MaxDepth: 1, Overflow: store.OverflowDropOldest}, now)
	enqueueOne(t, e.st, now, newJobIn("job", "bounded"))
	enqueueOne(t, e.st, now, newJobIn("job", "bounded"))

	wantHistory(t, e.st, store.JobHistoryParams{},
		hrow("bounded", m, store.HistoryCancelled, 1), hrow("c", m, store.HistoryCancelled, 1),
		hrow("d", m, store.HistoryDead, 1), hrow("w", m, store.HistoryCancelled, 3))
}

// Retrying, deleting and pruning finished jobs leave the counts as they are.
func testHistoryKept(t *testing.T, e *env) {
	now := at(time.Hour)
	m := store.HistoryMinute(now)
	done := inState(t, e.st, now, store.JobStateCompleted, "q", "done", "")
	dead := inState(t, e.st, now, store.JobStateDead, "q", "dead", "")
	gone := inState(t, e.st, now, store.JobStateCancelled, "q", "gone", "")
	want := []store.HistoryRow{hrow("q", m, store.HistoryCompleted, 1), hrow("q", m, store.HistoryCancelled, 1), hrow("q", m, store.HistoryDead, 1)}
	wantHistory(t, e.st, store.JobHistoryParams{}, want...)

	later := now.Add(time.Hour)
	retryJob(t, e.st, dead.ID, later)
	if _, err := e.st.JobDelete(t.Context(), &store.JobDeleteParams{ID: gone.ID, Now: later}); err != nil {
		t.Fatalf("JobDelete(%d) error: %v", gone.ID, err)
	}
	prune(t, e.st, store.JobPruneParams{CompletedBefore: later, Limit: 10, Now: later}, 1)
	wantState(t, e.st, dead.ID, store.JobStateAvailable)
	if _, err := e.st.JobGet(t.Context(), &store.JobGetParams{ID: done.ID}); !wantErr(t, "JobGet of a pruned job", err, store.ErrNotFound) {
		t.FailNow()
	}
	wantHistory(t, e.st, store.JobHistoryParams{}, want...)
}

// Outcomes finished at once by many callers all count.
func testHistoryConcurrent(t *testing.T, e *env) {
	const workers, each = 8, 25
	now := at(time.Hour)
	enqueueN(t, e.st, now, workers*each, "job")
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			rows := fetch(t, e.st, &store.JobFetchParams{Limit: each, Now: now})
			for _, r := range rows {
				if _, err := e.st.JobFinish(t.Context(), &store.JobFinishParams{
					Reports: []*store.Report{report(r, store.ReportCompleted, now, time.Time{})}, Now: now,
				}); err != nil {
					t.Errorf("JobFinish(job %d) error: %v", r.ID, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	wantCounts(t, e.st, "", map[countKey]int64{{defaultQueue, store.JobStateCompleted}: workers * each})
	wantHistory(t, e.st, store.JobHistoryParams{}, hrow(defaultQueue, store.HistoryMinute(now), store.HistoryCompleted, workers*each))
}

// historyPrune calls JobHistoryPrune and fails the test unless it deleted
// want rows.
func historyPrune(t *testing.T, st store.Store, before time.Time, limit, want int) {
	t.Helper()
	got, err := st.JobHistoryPrune(t.Context(), &store.JobHistoryPruneParams{Before: before, Limit: limit})
	if err != nil {
		t.Fatalf("JobHistoryPrune(before %v, limit %d) error: %v", before, limit, err)
	}
	if got != want {
		t.Fatalf("JobHistoryPrune(before %v, limit %d) = %d, want %d", before, limit, got, want)
	}
}

// JobHistoryPrune deletes the rows of minutes before Before (strictly),
// oldest minutes first, at most Limit a call.
func testHistoryPrune(t *testing.T, e *env) {
	now := at(time.Hour)
	m0 := store.HistoryMinute(now)
	m := func(i int) time.Time { return m0.Add(time.Duration(i) * time.Minute) }
	for i, queues := range [][]string{{"a", "b"}, {"a"}, {"a", "b"}} {
		for _, q := range queues {
			inState(t, e.st, m(i).Add(time.Second), store.JobStateCompleted, q, fmt.Sprintf("job-%d", i), "")
		}
	}
	historyPrune(t, e.st, m(0), 10, 0)
	historyPrune(t, e.st, m(2), 1, 1)
	rows := history(t, e.st, store.JobHistoryParams{})
	if len(rows) != 4 || !rows[0].At.Equal(m(0)) || !rows[1].At.Equal(m(1)) {
		t.Fatalf("JobHistory after pruning one row of the oldest minute = %+v, want one row of %v left and the later ones", rows, m(0))
	}
	historyPrune(t, e.st, m(2), 10, 2)
	wantHistory(t, e.st, store.JobHistoryParams{}, hrow("a", m(2), store.HistoryCompleted, 1), hrow("b", m(2), store.HistoryCompleted, 1))
	historyPrune(t, e.st, m(2), 10, 0)
	historyPrune(t, e.st, m(3), 10, 2)
	wantHistory(t, e.st, store.JobHistoryParams{})
}

// The counts are as durable as the jobs.
func testHistoryDurable(t *testing.T, e *env) {
	now := at(time.Hour)
	inState(t, e.st, now, store.JobStateCompleted, "q", "a", "")
	inState(t, e.st, now.Add(time.Minute), store.JobStateDead, "q", "b", "")
	before := history(t, e.st, store.JobHistoryParams{})
	if len(before) != 2 {
		t.Fatalf("JobHistory = %+v, want 2 rows", before)
	}
	e.reopen(t)
	wantHistory(t, e.st, store.JobHistoryParams{}, before...)
}

// latency returns QueueLatency(queue, now) as a map, failing on rows out
// of order.
func latency(t testing.TB, st store.Store, queue string, now time.Time) map[string]time.Time {
	t.Helper()
	rows, err := st.QueueLatency(t.Context(), &store.QueueLatencyParams{Queue: queue, Now: now})
	if err != nil {
		t.Fatalf("QueueLatency(queue %q, now %v) error: %v", queue, now, err)
	}
	out := map[string]time.Time{}
	for i, r := range rows {
		if i > 0 && rows[i-1].Queue >= r.Queue {
			t.Fatalf("QueueLatency(queue %q) rows %+v and %+v are out of order or repeated", queue, rows[i-1], r)
		}
		if r.OldestRunAt.IsZero() {
			t.Fatalf("QueueLatency(queue %q) row %+v has no OldestRunAt, want queues without due jobs left out", queue, r)
		}
		out[r.Queue] = r.OldestRunAt
	}
	return out
}

// wantLatency fails the test unless QueueLatency(queue, now) is want.
func wantLatency(t testing.TB, st store.Store, queue string, now time.Time, want map[string]time.Time) {
	t.Helper()
	if diff := cmp.Diff(want, latency(t, st, queue, now), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("QueueLatency(queue %q, now %v) mismatch (-want +got):\n%s", queue, now, diff)
	}
}

// QueueLatency finds a queue's oldest due job whatever its priority,
// kind or partition: available jobs, and scheduled or retrying ones due at
// Now; jobs not due, waiting or running do not count, a paused queue does.
func testLatencyOldestDue(t *testing.T, e *env) {
	now := at(time.Hour)
	wantLatency(t, e.st, "", now, nil)
	job := func(queue string, prio int, runAt time.Time, partition string) *store.NewJob {
		j := newJobIn(fmt.Sprintf("kind-%d", prio), queue)
		j.Priority, j.RunAt, j.PartitionKey = prio, runAt, partition
		return j
	}
	enqueue(t, e.st, now,
		job("a", 1, now.Add(-time.Minute), ""),
		job("a", 4, now.Add(-10*time.Minute), ""),
		job("a", 2, now.Add(time.Hour), ""),
		job("k", 3, now.Add(-2*time.Minute), ""),
		job("k", 2, now.Add(-20*time.Minute), "tenant"),
		job("b", 2, now.Add(time.Minute), ""),
	)
	enqueueState(t, e.st, now, dependent("c", enqueueOne(t, e.st, now, job("b", 1, now.Add(2*time.Minute), ""))), store.JobStateWaiting)
	wantLatency(t, e.st, "", now, map[string]time.Time{"a": now.Add(-10 * time.Minute), "k": now.Add(-20 * time.Minute)})
	wantLatency(t, e.st, "b", now, nil)
	wantLatency(t, e.st, "", now.Add(time.Minute), map[string]time.Time{
		"a": now.Add(-10 * time.Minute), "b": now.Add(time.Minute), "k": now.Add(-20 * time.Minute),
	})
	wantLatency(t, e.st, "k", now, map[string]time.Time{"k": now.Add(-20 * time.Minute)})

	// A retrying job due before the available ones is the oldest.
	row := claimID(t, e.st, "r", enqueueOne(t, e.st, now, job("r", 1, time.Time{}, "")), now)
	enqueueOne(t, e.st, now, job("r", 1, now.Add(-time.Minute), ""))
	finishOne(t, e.st, now, report(row, store.ReportFailed, now, now.Add(-30*time.Minute)), store.JobStateRetrying)
	wantLatency(t, e.st, "r", now, map[string]time.Time{"r": now.Add(-30 * time.Minute)})

	pause(t, e.st, "a", true, now)
	wantLatency(t, e.st, "a", now, map[string]time.Time{"a": now.Add(-10 * time.Minute)})
}

// Claiming the oldest due jobs moves the latency to the next oldest, and
// to nothing once every due job runs.
func testLatencyClaims(t *testing.T, e *env) {
	now := at(time.Hour)
	var jobs []*store.NewJob
	for i := range 5 {
		j := newJob("job")
		j.RunAt = now.Add(-time.Duration(10-i) * time.Minute)
		j.Priority = 1 + i%2
		jobs = append(jobs, j)
	}
	enqueue(t, e.st, now, jobs...)
	// Claim order is priority first: jobs 0, 2 and 4, then 1 and 3.
	fetch(t, e.st, &store.JobFetchParams{Limit: 2, Now: now})
	wantLatency(t, e.st, "", now, map[string]time.Time{defaultQueue: jobs[1].RunAt})
	fetch(t, e.st, &store.JobFetchParams{Limit: 1, Now: now})
	wantLatency(t, e.st, "", now, map[string]time.Time{defaultQueue: jobs[1].RunAt})
	fetch(t, e.st, &store.JobFetchParams{Limit: 1, Now: now})
	wantLatency(t, e.st, "", now, map[string]time.Time{defaultQueue: jobs[3].RunAt})
	fetch(t, e.st, &store.JobFetchParams{Limit: 10, Now: now})
	wantLatency(t, e.st, "", now, nil)
}

// checkHistory checks what holds of the history of any store: the rows
// are in order, each with a count (history checks that), and each queue's
// rows are the rows of that queue among all.
func checkHistory(t testing.TB, st store.Store) {
	t.Helper()
	all := history(t, st, store.JobHistoryParams{})
	byQueue := map[string][]store.HistoryRow{}
	for _, r := range all {
		byQueue[r.Queue] = append(byQueue[r.Queue], r)
	}
	for _, q := range sortedKeys(byQueue) {
		if diff := cmp.Diff(byQueue[q], history(t, st, store.JobHistoryParams{Queue: q})); diff != "" {
			t.Errorf("invariant: JobHistory(queue %q) disagrees with the rows of %q in JobHistory (-all +queue):\n%s", q, q, diff)
		}
	}
}

// checkLatency checks QueueLatency against the jobs listed: at a Now after
// every job's RunAt, each queue's oldest RunAt among its available,
// scheduled and retrying jobs; at a Now before them, among its available
// jobs.
func checkLatency(t testing.TB, st store.Store, available, waiting map[string]time.Time) {
	t.Helper()
	for _, now := range []time.Time{time.Unix(1, 0).UTC(), at(100_000 * time.Hour)} {
		want := map[string]time.Time{}
		for _, q := range sortedKeys(available, waiting) {
			if o := fetchplan.OldestDue(available[q], waiting[q], now); !o.IsZero() {
				want[q] = o
			}
		}
		if diff := cmp.Diff(want, latency(t, st, "", now), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("invariant: QueueLatency(now %v) disagrees with JobList (-listed +latency):\n%s", now, diff)
		}
	}
}

// sortedKeys returns the keys of ms, each once, sorted.
func sortedKeys[V any](ms ...map[string]V) []string {
	set := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			set[k] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}
