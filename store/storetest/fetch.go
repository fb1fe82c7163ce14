package storetest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

var fetchCases = []testCase{
	{name: "Order", run: testFetchOrder},
	{name: "Limit", run: testFetchLimit},
	{name: "LimitBelowOneRefused", run: testLimitBelowOne},
	{name: "Kinds", run: testFetchKinds},
	{name: "ScheduledWhenDue", run: testFetchScheduled},
	{name: "RetryingWhenDue", run: testFetchRetrying},
	{name: "EmptyAndOtherQueues", run: testFetchQueues},
	{name: "SetsClaimFields", run: testFetchSetsFields},
	{name: "AttemptedAtNotBeforeDue", run: testFetchAttemptedAtNotBeforeDue},
}

// orderSpec is a job for the order tests: its priority and RunAt offset
// from the enqueue's Now.
type orderSpec struct {
	prio  int
	runAt time.Duration
}

// enqueueOrdered enqueues specs one by one at now (so IDs follow the slice)
// and returns the IDs in the order a fetch must claim them: Priority, then
// RunAt, then ID.
func enqueueOrdered(t *testing.T, st store.Store, now time.Time, specs []orderSpec) []int64 {
	t.Helper()
	type job struct {
		id    int64
		prio  int
		runAt time.Time
	}
	var jobs []job
	for _, s := range specs {
		j := newJob("ordered")
		j.Priority = s.prio
		j.RunAt = now.Add(s.runAt)
		jobs = append(jobs, job{enqueueOne(t, st, now, j), s.prio, j.RunAt})
	}
	sort.Slice(jobs, func(a, b int) bool {
		x, y := jobs[a], jobs[b]
		if x.prio != y.prio {
			return x.prio < y.prio
		}
		if !x.runAt.Equal(y.runAt) {
			return x.runAt.Before(y.runAt)
		}
		return x.id < y.id
	})
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.id
	}
	return out
}

// orderSpecs mixes priorities, RunAts (past, now, and scheduled but due by
// the fetch) and ties on both, in an order unlike the claim order.
var orderSpecs = []orderSpec{
	{2, -10 * time.Second},
	{4, -time.Hour},
	{1, -5 * time.Second},
	{2, -10 * time.Second}, // ties with the first: ID decides
	{3, 0},
	{1, 10 * time.Second}, // scheduled at enqueue, due at the fetch
	{1, -20 * time.Second},
	{2, -11 * time.Second},
	{1, -5 * time.Second}, // ties with the third: ID decides
	{4, -2 * time.Hour},
	{3, 30 * time.Second}, // scheduled, due at the fetch
	{2, 0},
}

// Jobs are claimed in (Priority, RunAt, ID) order.
func testFetchOrder(t *testing.T, e *env) {
	now := at(time.Hour)
	want := enqueueOrdered(t, e.st, now, orderSpecs)
	fetchAt := now.Add(time.Minute)
	var got []int64
	for range want {
		got = append(got, fetchOne(t, e.st, fetchAt).ID)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JobFetch(limit 1) claim order mismatch (-want +got):\n%s", diff)
	}
	fetchNone(t, e.st, fetchAt)
}

// A fetch claims at most Limit jobs, and they are the first ones in order.
func testFetchLimit(t *testing.T, e *env) {
	now := at(time.Hour)
	want := enqueueOrdered(t, e.st, now, orderSpecs)
	fetchAt := now.Add(time.Minute)
	first := fetchIDs(t, e.st, &store.JobFetchParams{Limit: 3, Now: fetchAt})
	if diff := sameIDs(want[:3], first); diff != "" {
		t.Errorf("JobFetch(limit 3) claimed the wrong jobs (-want +got):\n%s", diff)
	}
	rest := fetchIDs(t, e.st, &store.JobFetchParams{Limit: 100, Now: fetchAt})
	if diff := sameIDs(want[3:], rest); diff != "" {
		t.Errorf("JobFetch(limit 100) after claiming 3 claimed the wrong jobs (-want +got):\n%s", diff)
	}
	fetchNone(t, e.st, fetchAt)
}

// Every call with a Limit refuses one below 1 with ErrInvalidArgument,
// naming the field, and does nothing: the job stays available.
func testLimitBelowOne(t *testing.T, e *env) {
	now := at(time.Hour)
	id := enqueueOne(t, e.st, now, newJob("a"))
	ctx := t.Context()
	later := now.Add(time.Hour)
	for _, limit := range []int{0, -1} {
		calls := []struct {
			field string
			call  func() error
		}{
			{"JobFetchParams.Limit", func() error {
				_, err := e.st.JobFetch(ctx, &store.JobFetchParams{Queue: defaultQueue, Limit: limit, Now: later, Lease: time.Minute})
				return err
			}},
			{"JobListParams.Limit", func() error { _, err := e.st.JobList(ctx, &store.JobListParams{Limit: limit}); return err }},
			{"JobRescueParams.Limit", func() error {
				_, err := e.st.JobRescue(ctx, &store.JobRescueParams{Now: later, Limit: limit})
				return err
			}},
			{"JobPruneParams.Limit", func() error {
				_, err := e.st.JobPrune(ctx, &store.JobPruneParams{CompletedBefore: later, Limit: limit})
				return err
			}},
			{"JobHistoryPruneParams.Limit", func() error {
				_, err := e.st.JobHistoryPrune(ctx, &store.JobHistoryPruneParams{Before: later, Limit: limit})
				return err
			}},
		}
		for _, c := range calls {
			err := c.call()
			if !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), c.field) {
				t.Errorf("%s = %d: got %v, want ErrInvalidArgument naming %s", c.field, limit, err, c.field)
			}
		}
	}
	if j := get(t, e.st, id); j.State != store.JobStateAvailable {
		t.Errorf("job after the refused calls is %s, want available", j.State)
	}
}

// With Kinds set, only jobs of those kinds are claimed, in order; jobs of
// other kinds are left untouched, even when they would come first.
func testFetchKinds(t *testing.T, e *env) {
	now := at(time.Hour)
	var want, others []int64
	for i, kind := range []string{"c", "b", "a", "c", "a", "b", "c"} {
		j := newJob(kind)
		if kind == "c" {
			j.Priority = store.PriorityHighest // would be claimed first without the filter
		} else {
			j.Priority = 2 + i%2
		}
		id := enqueueOne(t, e.st, now, j)
		if kind == "c" {
			others = append(others, id)
		} else {
			want = append(want, id)
		}
	}
	before := make(map[int64]*store.JobRow)
	for _, id := range others {
		before[id] = get(t, e.st, id)
	}

	if got := fetchIDs(t, e.st, &store.JobFetchParams{Kinds: []string{"zzz"}, Limit: 10, Now: now}); len(got) != 0 {
		t.Errorf("JobFetch(kinds [zzz]) = %v, want no jobs", got)
	}
	rows := fetch(t, e.st, &store.JobFetchParams{Kinds: []string{"b"}, Limit: 1, Now: now})
	if len(rows) != 1 || rows[0].Kind != "b" {
		t.Fatalf("JobFetch(kinds [b], limit 1) = %v, want one job of kind b", ids(rows))
	}
	got := []int64{rows[0].ID}
	for _, row := range fetch(t, e.st, &store.JobFetchParams{Kinds: []string{"a", "b"}, Limit: 10, Now: now}) {
		if row.Kind != "a" && row.Kind != "b" {
			t.Errorf("JobFetch(kinds [a b]) claimed job %d of kind %q", row.ID, row.Kind)
		}
		got = append(got, row.ID)
	}
	if diff := sameIDs(want, got); diff != "" {
		t.Errorf("JobFetch with Kinds claimed the wrong jobs (-want +got):\n%s", diff)
	}
	for _, id := range others {
		if diff := diffRow(before[id], get(t, e.st, id)); diff != "" {
			t.Errorf("job %d of a kind not asked for was touched by the fetch (-before +after):\n%s", id, diff)
		}
	}
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Limit: 10, Now: now}); sameIDs(others, got) != "" {
		t.Errorf("JobFetch without Kinds = %v, want the jobs left %v", got, others)
	}
}

// A scheduled job is not claimed before its RunAt and is claimed from it on.
func testFetchScheduled(t *testing.T, e *env) {
	now := at(time.Hour)
	j := newJob("later")
	j.RunAt = now.Add(time.Minute)
	id := enqueueOne(t, e.st, now, j)
	fetchNone(t, e.st, now)
	fetchNone(t, e.st, j.RunAt.Add(-time.Microsecond))
	row := fetchID(t, e.st, j.RunAt, id)
	if row.Attempt != 1 {
		t.Errorf("first fetch of job %d: Attempt = %d, want 1", id, row.Attempt)
	}
}

// A failed job is retried once its RunAt is due, and not before.
func testFetchRetrying(t *testing.T, e *env) {
	now := at(time.Hour)
	id := enqueueOne(t, e.st, now, newJob("flaky"))
	row := fetchID(t, e.st, now, id)
	retryAt := now.Add(10 * time.Second)
	finishOne(t, e.st, now, &store.Report{ID: id, ClaimToken: row.ClaimToken, Kind: store.ReportFailed, Error: failure(row, now, "boom"), RunAt: retryAt}, store.JobStateRetrying)
	fetchNone(t, e.st, retryAt.Add(-time.Microsecond))
	again := fetchID(t, e.st, retryAt, id)
	if again.Attempt != 2 {
		t.Errorf("fetch of retried job %d: Attempt = %d, want 2", id, again.Attempt)
	}
}

// Fetching an empty or unknown queue returns no jobs and no error; a fetch
// never claims jobs of another queue.
func testFetchQueues(t *testing.T, e *env) {
	now := at(time.Hour)
	fetchNone(t, e.st, now)
	j := newJob("elsewhere")
	j.Queue = "a"
	id := enqueueOne(t, e.st, now, j)
	before := get(t, e.st, id)
	for _, q := range []string{defaultQueue, "b", "never-used"} {
		if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: q, Limit: 10, Now: now}); len(got) != 0 {
			t.Errorf("JobFetch(queue %q) = %v, want no jobs", q, got)
		}
	}
	if diff := diffRow(before, get(t, e.st, id)); diff != "" {
		t.Errorf("job %d of queue a was touched by fetches of other queues (-before +after):\n%s", id, diff)
	}
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: "a", Limit: 10, Now: now}); len(got) != 1 || got[0] != id {
		t.Errorf("JobFetch(queue a) = %v, want [%d]", got, id)
	}
}

// A claim makes the job running, counts the attempt, records when and by
// whom, sets the lease, and hands out a new token each time; the returned
// row is the job as stored after the claim.
func testFetchSetsFields(t *testing.T, e *env) {
	now := at(time.Hour)
	j := &store.NewJob{
		Kind: "report", Queue: "reports", Args: []byte(`{"id":9}`), Priority: 3, MaxAttempts: 4,
		UniqueKey: "report:9", Tags: []string{"x"}, Meta: []byte(`{"a":"b"}`), Timeout: time.Hour,
	}
	id := enqueueOne(t, e.st, now, j)
	before := get(t, e.st, id)

	fetchAt := now.Add(time.Second)
	rows := fetch(t, e.st, &store.JobFetchParams{Queue: "reports", Limit: 5, Now: fetchAt, Lease: 45 * time.Second, Worker: "host-7/pid-42"})
	if len(rows) != 1 {
		t.Fatalf("JobFetch returned %d jobs, want 1", len(rows))
	}
	got := rows[0]
	if got.ClaimToken == 0 {
		t.Errorf("claimed job %d has ClaimToken 0, want a token", id)
	}
	want := *before
	want.State = store.JobStateRunning
	want.Attempt = 1
	want.AttemptedAt = fetchAt
	want.AttemptedBy = "host-7/pid-42"
	want.LeaseUntil = fetchAt.Add(45 * time.Second)
	want.ClaimToken = got.ClaimToken
	if diff := diffRow(&want, got); diff != "" {
		t.Errorf("JobFetch row mismatch (-want +got):\n%s", diff)
	}
	if diff := diffRow(got, get(t, e.st, id)); diff != "" {
		t.Errorf("JobGet after JobFetch differs from the fetched row (-fetched +stored):\n%s", diff)
	}

	// Released and claimed again: the attempt number repeats, the token
	// does not.
	releaseAt := fetchAt.Add(time.Second)
	finishOne(t, e.st, releaseAt, &store.Report{ID: id, ClaimToken: got.ClaimToken, Kind: store.ReportReleased}, store.JobStateAvailable)
	refetchAt := releaseAt.Add(time.Second)
	again := fetch(t, e.st, &store.JobFetchParams{Queue: "reports", Limit: 5, Now: refetchAt, Lease: time.Minute, Worker: "host-8"})
	if len(again) != 1 {
		t.Fatalf("JobFetch after release returned %d jobs, want 1", len(again))
	}
	if a := again[0]; a.Attempt != 1 || a.ClaimToken == got.ClaimToken || a.AttemptedBy != "host-8" ||
		!a.AttemptedAt.Equal(refetchAt) || !a.LeaseUntil.Equal(refetchAt.Add(time.Minute)) {
		t.Errorf("second claim = {Attempt %d, ClaimToken %d, AttemptedBy %q, AttemptedAt %v, LeaseUntil %v}, want {1, not %d, %q, %v, %v}",
			a.Attempt, a.ClaimToken, a.AttemptedBy, a.AttemptedAt, a.LeaseUntil, got.ClaimToken, "host-8", refetchAt, refetchAt.Add(time.Minute))
	}
}

// A fetch whose Now was read before an enqueue it then claims (it waited
// for a lock, or another machine's clock is ahead) records the start at
// the job's RunAt or CreatedAt, whichever is later, never before: on a
// queue without limits, with queue-wide limits and with partition limits.
func testFetchAttemptedAtNotBeforeDue(t *testing.T, e *env) {
	fetchAt := at(time.Hour)
	enqueuedAt := fetchAt.Add(9 * time.Millisecond)
	for _, tt := range []struct {
		queue string
		set   store.QueueSettings
		key   string
	}{
		{queue: "plain"},
		{queue: "limited", set: store.QueueSettings{MaxRunning: 10, RateLimit: 100, RatePeriod: time.Minute}},
		{queue: "partitioned", set: store.QueueSettings{PartitionMaxRunning: 10}, key: "tenant-1"},
	} {
		if tt.set != (store.QueueSettings{}) {
			configure(t, e.st, tt.queue, tt.set, fetchAt)
		}
		now := newJobIn("job", tt.queue) // due when enqueued: RunAt = CreatedAt
		now.PartitionKey = tt.key
		past := newJobIn("job", tt.queue) // due before it was enqueued
		past.PartitionKey, past.RunAt = tt.key, fetchAt.Add(-time.Hour)
		enqueueOne(t, e.st, enqueuedAt, now)
		enqueueOne(t, e.st, enqueuedAt, past)
		rows := fetch(t, e.st, &store.JobFetchParams{Queue: tt.queue, Limit: 2, Now: fetchAt, Lease: lease, Worker: "w"})
		if len(rows) != 2 {
			t.Fatalf("queue %s: JobFetch with a Now before the enqueue claimed %d jobs, want 2 (available jobs are claimed whatever their RunAt)", tt.queue, len(rows))
		}
		for _, r := range rows {
			if !r.AttemptedAt.Equal(enqueuedAt) || !r.LeaseUntil.Equal(fetchAt.Add(lease)) {
				t.Errorf("queue %s: job %d (RunAt %s, CreatedAt %s) claimed with Now %s: AttemptedAt %s, LeaseUntil %s; want AttemptedAt %s (its CreatedAt) and the lease from Now",
					tt.queue, r.ID, r.RunAt, r.CreatedAt, fetchAt, r.AttemptedAt, r.LeaseUntil, enqueuedAt)
			}
			if got := get(t, e.st, r.ID); !got.AttemptedAt.Equal(r.AttemptedAt) {
				t.Errorf("queue %s: job %d stored AttemptedAt %s, fetch returned %s", tt.queue, r.ID, got.AttemptedAt, r.AttemptedAt)
			}
		}
	}

	// The rate window counts the start at AttemptedAt: a start recorded 10 s
	// after the claim's Now holds the next one back until 10 s after the
	// period.
	const period = time.Minute
	configure(t, e.st, "interval", store.QueueSettings{RateLimit: 1, RatePeriod: period}, fetchAt)
	late := fetchAt.Add(10 * time.Second)
	first := enqueueOne(t, e.st, late, newJobIn("job", "interval"))
	second := enqueueOne(t, e.st, late, newJobIn("job", "interval"))
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: "interval", Limit: 1, Now: fetchAt}); len(got) != 1 || got[0] != first {
		t.Fatalf("JobFetch(interval) = %v, want [%d]", got, first)
	}
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: "interval", Limit: 1, Now: fetchAt.Add(period + 5*time.Second)}); len(got) != 0 {
		t.Errorf("JobFetch(interval) 5 s after the period from the claim's Now = %v, want none: the start counts at its AttemptedAt, 10 s later", got)
	}
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: "interval", Limit: 1, Now: late.Add(period)}); len(got) != 1 || got[0] != second {
		t.Errorf("JobFetch(interval) a period after the first start's AttemptedAt = %v, want [%d]", got, second)
	}
}
