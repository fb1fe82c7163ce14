package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

func configure(t testing.TB, st store.Store, q string, set store.QueueSettings) {
	t.Helper()
	if _, err := st.QueueConfigure(context.Background(), &store.QueueConfigureParams{Queue: q, Settings: set, Now: t0}); err != nil {
		t.Fatalf("QueueConfigure(%q) error = %v", q, err)
	}
}

func complete(t testing.TB, st store.Store, now time.Time, rows ...*store.JobRow) {
	t.Helper()
	var outs []*store.Report
	for _, r := range rows {
		outs = append(outs, &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted})
	}
	finish(t, st, now, outs...)
}

func partitions(rows []*store.JobRow) map[string]int {
	m := make(map[string]int)
	for _, r := range rows {
		m[r.PartitionKey]++
	}
	return m
}

// A flooding tenant cannot starve a small one: with PartitionMaxRunning 2,
// each fetch takes at most 2 running jobs of A and keeps serving B while A
// is saturated. (That a fetch does not walk A's backlog is measured by
// storetest.Bench's FetchPartitionBacklog; a test asserts no speed.)
func TestPartitionFairness(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	configure(t, st, "q", store.QueueSettings{PartitionMaxRunning: 2})
	var flood []*store.NewJob
	for range 100_000 {
		flood = append(flood, &store.NewJob{Kind: "k", Queue: "q", PartitionKey: "A"})
	}
	enqueue(t, st, t0, flood...)
	for range 10 {
		enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "q", PartitionKey: "B"})
	}
	got := fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0})
	if m := partitions(got); m["A"] != 2 || m["B"] != 2 {
		t.Fatalf("first fetch claimed %v, want 2 of A and 2 of B", m)
	}
	var a []*store.JobRow
	for _, r := range got {
		if r.PartitionKey == "A" {
			a = append(a, r)
		}
	}
	for round := range 4 {
		var b []*store.JobRow
		for _, r := range got {
			if r.PartitionKey == "B" {
				b = append(b, r)
			}
		}
		complete(t, st, t0, b...)
		got = fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0})
		if m := partitions(got); m["A"] != 0 || m["B"] != 2 {
			t.Fatalf("round %d: fetch claimed %v, want 2 of B and none of A", round, m)
		}
	}
	complete(t, st, t0, a...)
	if m := partitions(fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0})); m["A"] != 2 {
		t.Fatalf("after A's jobs finished: fetch claimed %v, want 2 of A", m)
	}
}

// Jobs without a key are not subject to partition limits, and order is kept
// across partitions: (priority, RunAt, ID).
func TestPartitionOrderAndUnkeyed(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	configure(t, st, "q", store.QueueSettings{PartitionMaxRunning: 1})
	enqueue(t, st, t0,
		&store.NewJob{Kind: "k", Queue: "q", PartitionKey: "A"},              // 1
		&store.NewJob{Kind: "k", Queue: "q"},                                 // 2
		&store.NewJob{Kind: "k", Queue: "q", PartitionKey: "A"},              // 3
		&store.NewJob{Kind: "k", Queue: "q", PartitionKey: "B", Priority: 1}, // 4
		&store.NewJob{Kind: "k", Queue: "q"},                                 // 5
		&store.NewJob{Kind: "j", Queue: "q", PartitionKey: "C"},              // 6
	)
	if got := ids(fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0})); !slices.Equal(got, []int64{4, 1, 2, 5, 6}) {
		t.Fatalf("JobFetch() = %v, want [4 1 2 5 6]", got)
	}
}

func TestPartitionRateLimitSlidingWindow(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	configure(t, st, "q", store.QueueSettings{PartitionRateLimit: 2, PartitionRatePeriod: 10 * time.Second})
	for range 10 {
		enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "q", PartitionKey: "A"})
	}
	if n := len(fetch(t, st, store.JobFetchParams{Limit: 5, Now: t0})); n != 2 {
		t.Fatalf("fetch at 0s claimed %d, want 2", n)
	}
	if n := len(fetch(t, st, store.JobFetchParams{Limit: 5, Now: t0.Add(10*time.Second - 1)})); n != 0 {
		t.Fatalf("fetch just inside the window claimed %d, want 0", n)
	}
	if n := len(fetch(t, st, store.JobFetchParams{Limit: 5, Now: t0.Add(10 * time.Second)})); n != 2 {
		t.Fatalf("fetch once the window left the starts claimed %d, want 2", n)
	}
}

// A start at t counts in the window (now-RatePeriod, now], and
// JobNextRunAt names the instant the window allows the next start.
func TestRateLimitSlidingWindow(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	configure(t, st, "q", store.QueueSettings{RateLimit: 3, RatePeriod: 10 * time.Second})
	for range 20 {
		enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "q"})
	}
	next := func(now time.Time) time.Time {
		t.Helper()
		at, err := nextAt(t, st, "q", now)
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	steps := []struct {
		at   time.Duration
		want int
	}{
		{0, 1}, {2 * time.Second, 1}, {4 * time.Second, 1}, // one at a time: the window holds 3
		{9 * time.Second, 0},
		{10 * time.Second, 1}, // the start at 0 left the window
		{10 * time.Second, 0},
		{12*time.Second - 1, 0},
		{12 * time.Second, 1},
	}
	limit := map[int]int{0: 1, 1: 1, 2: 1}
	for i, s := range steps {
		l := 5
		if v, ok := limit[i]; ok {
			l = v
		}
		if n := len(fetch(t, st, store.JobFetchParams{Limit: l, Now: t0.Add(s.at)})); n != min(s.want, l) {
			t.Fatalf("step %d: fetch at %v claimed %d, want %d", i, s.at, n, s.want)
		}
	}
	// Starts at 4s, 10s, 12s: the next start is allowed at 14s.
	if got, want := next(t0.Add(13*time.Second)), t0.Add(14*time.Second); !got.Equal(want) {
		t.Fatalf("JobNextRunAt() = %v, want %v", got, want)
	}
	// A scheduled job due earlier wins.
	enqueue(t, st, t0.Add(13*time.Second), &store.NewJob{Kind: "k", Queue: "q", RunAt: t0.Add(13500 * time.Millisecond)})
	if got, want := next(t0.Add(13*time.Second)), t0.Add(13500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("JobNextRunAt() with a scheduled job = %v, want %v", got, want)
	}
}

func TestMaxRunningAndPause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	configure(t, st, "q", store.QueueSettings{MaxRunning: 3})
	for range 10 {
		enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "q"})
	}
	w, err := st.QueueWatch(ctx, &store.QueueWatchParams{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got := fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0})
	if len(got) != 3 || len(fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0})) != 0 {
		t.Fatalf("MaxRunning 3: first fetch claimed %d, want 3, then none", len(got))
	}
	complete(t, st, t0, got[0])
	select {
	case <-w.C:
	default:
		t.Fatal("no signal when a running slot freed up")
	}
	if _, err := st.QueuePause(ctx, &store.QueuePauseParams{Queue: "q", Paused: true, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if n := len(fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0})); n != 0 {
		t.Fatalf("paused queue gave %d jobs", n)
	}
	enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "q"})
	<-w.C
	if _, err := st.QueuePause(ctx, &store.QueuePauseParams{Queue: "q", Paused: false, Now: t0}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C:
	default:
		t.Fatal("no signal on resume")
	}
	if n := len(fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0})); n != 1 {
		t.Fatalf("after resume: fetch claimed %d, want 1", n)
	}
	list, err := st.QueueList(ctx, &store.QueueListParams{})
	if err != nil || len(list) != 1 || list[0].Name != "q" || list[0].Settings.MaxRunning != 3 {
		t.Fatalf("QueueList() = %+v, %v", list, err)
	}
}

func TestQueueConfigureValidates(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	for _, tt := range []struct {
		name  string
		set   store.QueueSettings
		field string
	}{
		{"negative", store.QueueSettings{MaxRunning: -1}, "MaxRunning"},
		{"rate without period", store.QueueSettings{RateLimit: 1}, "RatePeriod"},
		{"partition rate without period", store.QueueSettings{PartitionRateLimit: 1}, "PartitionRatePeriod"},
		{"unknown overflow", store.QueueSettings{Overflow: 7}, "Overflow"},
	} {
		_, err := st.QueueConfigure(context.Background(), &store.QueueConfigureParams{Queue: "q", Settings: tt.set, Now: t0})
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: error = %v, want one naming %s", tt.name, err, tt.field)
		}
	}
}

// A failed dependency cancels its dependents down the graph, except those
// that ignore failures; a completed one releases them.
func TestDependencyCascade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: t0, Workflow: true, Jobs: []*store.NewJob{
		{Kind: "k", Queue: "q"},                                                        // 1
		{Kind: "k", Queue: "q", DependsOnIndex: []int{0}},                              // 2
		{Kind: "k", Queue: "q", DependsOnIndex: []int{1}},                              // 3
		{Kind: "k", Queue: "q", DependsOnIndex: []int{1}, IgnoreDepFailure: true},      // 4
		{Kind: "k", Queue: "q", DependsOnIndex: []int{0, 3}, RunAt: t0.Add(time.Hour)}, // 5
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []store.JobState{"available", "waiting", "waiting", "waiting", "waiting"} {
		if res[i].State != want || get(t, st, res[i].ID).WorkflowID != 1 {
			t.Fatalf("job %d: state %s, want %s, workflow 1", i+1, res[i].State, want)
		}
	}
	if r := get(t, st, 5); !slices.Equal(r.DependsOn, []int64{1, 4}) {
		t.Fatalf("job 5 DependsOn = %v, want [1 4]", r.DependsOn)
	}
	complete(t, st, t0, fetch(t, st, store.JobFetchParams{Limit: 5, Now: t0})...)
	if r := get(t, st, 2); r.State != store.JobStateAvailable {
		t.Fatalf("job 2 after its dependency completed: %s", r.State)
	}
	j2 := fetch(t, st, store.JobFetchParams{Limit: 5, Now: t0})[0]
	finish(t, st, t0, &store.Report{ID: j2.ID, ClaimToken: j2.ClaimToken, Kind: store.ReportCancelled})
	if r := get(t, st, 3); r.State != store.JobStateCancelled || len(r.Errors) != 1 || r.Errors[0].Message != store.DependencyEndedMessage(2, store.JobStateCancelled) {
		t.Fatalf("job 3 = %s %+v, want cancelled naming dependency 2", r.State, r.Errors)
	}
	if r := get(t, st, 4); r.State != store.JobStateAvailable {
		t.Fatalf("job 4 (ignores failures) = %s, want available", r.State)
	}
	j4 := fetch(t, st, store.JobFetchParams{Limit: 5, Now: t0})[0]
	complete(t, st, t0, j4)
	if r := get(t, st, 5); r.State != store.JobStateScheduled {
		t.Fatalf("job 5 = %s, want scheduled (RunAt later)", r.State)
	}
	list, _ := st.JobList(ctx, &store.JobListParams{WorkflowID: 1, Limit: 10, Desc: true})
	if !slices.Equal(ids(list), []int64{5, 4, 3, 2, 1}) {
		t.Fatalf("JobList(workflow 1) = %v", ids(list))
	}
	// A deleted dependency cancels its dependents too, recursively.
	res = enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "q", RunAt: t0.Add(time.Hour)})
	a := res[0].ID
	res = enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "q", DependsOn: []int64{a}}, &store.NewJob{Kind: "k", Queue: "q", DependsOnIndex: []int{0}})
	if _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: a}); err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if g := get(t, st, r.ID); g.State != store.JobStateCancelled {
			t.Fatalf("dependent %d of a deleted job = %s, want cancelled", r.ID, g.State)
		}
	}
	// Unknown dependencies and bad indexes fail the batch.
	for _, nj := range []*store.NewJob{{Kind: "k", Queue: "q", DependsOn: []int64{999}}, {Kind: "k", Queue: "q", DependsOnIndex: []int{1}}} {
		if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: t0, Jobs: []*store.NewJob{{Kind: "k", Queue: "q"}, nj}}); err == nil {
			t.Fatalf("enqueue with dependency %v %v succeeded", nj.DependsOn, nj.DependsOnIndex)
		}
	}
}

func TestMaxDepth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	configure(t, st, "r", store.QueueSettings{MaxDepth: 2})
	configure(t, st, "d", store.QueueSettings{MaxDepth: 2, Overflow: store.OverflowDropOldest})
	enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "r", UniqueKey: "u"}, &store.NewJob{Kind: "k", Queue: "r"})
	// Duplicates take no room.
	if res := enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "r", UniqueKey: "u"}); !res[0].Duplicate {
		t.Fatalf("enqueue of a duplicate = %+v", res)
	}
	_, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: t0, Jobs: []*store.NewJob{{Kind: "k", Queue: "d"}, {Kind: "k", Queue: "r"}}})
	if !errors.Is(err, store.ErrQueueFull) || !strings.Contains(err.Error(), `"r"`) {
		t.Fatalf("enqueue past MaxDepth: error = %v, want ErrQueueFull naming r", err)
	}
	if c, _ := st.JobCounts(ctx, &store.JobCountsParams{Queue: "d"}); len(c) != 0 {
		t.Fatalf("a rejected batch left jobs: %v", c)
	}
	for i := range 5 {
		enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "d", UniqueKey: fmt.Sprint("d", i)})
	}
	list, _ := st.JobList(ctx, &store.JobListParams{Queue: "d", State: store.JobStateAvailable, Limit: 10})
	if !slices.Equal(ids(list), []int64{6, 7}) {
		t.Fatalf("queue d keeps %v, want the newest two [6 7]", ids(list))
	}
	r := get(t, st, 3)
	if r.State != store.JobStateCancelled || !strings.Contains(r.Errors[0].Message, "dropped") {
		t.Fatalf("dropped job = %s %+v", r.State, r.Errors)
	}
	// The dropped job's unique key is free again.
	if res := enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "x", UniqueKey: "d0"}); res[0].Duplicate {
		t.Fatal("key of a dropped job still held")
	}
	if q, _ := st.QueueGet(ctx, &store.QueueGetParams{Queue: "d"}); q.Dropped != 3 {
		t.Fatalf("Dropped = %d, want 3", q.Dropped)
	}
}

func TestWaitAndCancelRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "q"})
	got := fetch(t, st, store.JobFetchParams{Limit: 1, Now: t0})[0]
	done := make(chan *store.JobRow)
	go func() {
		r, err := st.JobWait(ctx, &store.JobWaitParams{ID: 1})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	c, err := st.JobCancel(ctx, &store.JobCancelParams{ID: 1, Now: t0})
	if err != nil || !c.CancelRequested || c.State != store.JobStateRunning {
		t.Fatalf("JobCancel(running) = %+v, %v", c, err)
	}
	ls, _ := st.LeaseExtend(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{{ID: 1, ClaimToken: got.ClaimToken}}, Now: t0, Lease: time.Minute})
	if !ls[0].Held || !ls[0].CancelRequested {
		t.Fatalf("LeaseExtend() = %+v, want held with a cancel request", ls)
	}
	held, stale := store.LeaseRef{ID: 1, ClaimToken: got.ClaimToken}, store.LeaseRef{ID: 1, ClaimToken: 9}
	ls, _ = st.LeaseExtend(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{held, stale}, Now: t0, Lease: time.Minute,
		Progress: map[store.LeaseRef]float64{held: 50, stale: 70}})
	if !ls[0].Held || ls[1].Held {
		t.Fatalf("LeaseExtend() with progress = %+v, want the first held", ls)
	}
	finish(t, st, t0, &store.Report{ID: 1, ClaimToken: got.ClaimToken, Kind: store.ReportCompleted, Result: []byte(`{"ok":1}`)})
	select {
	case r := <-done:
		if r.State != store.JobStateCompleted || string(r.Result) != `{"ok":1}` || r.CancelRequested || r.Progress != 50 {
			t.Fatalf("JobWait() = %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("JobWait did not return")
	}
	wctx, cancel := context.WithCancel(ctx)
	cancel()
	enqueue(t, st, t0, &store.NewJob{Kind: "k", Queue: "q"})
	if _, err := st.JobWait(wctx, &store.JobWaitParams{ID: 2}); err == nil {
		t.Fatal("JobWait with a done context returned no error")
	}
	if _, err := st.JobWait(ctx, &store.JobWaitParams{ID: 99}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("JobWait(unknown) error = %v", err)
	}
}

func TestPeriodicAdvance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	slot := t0.Add(time.Minute)
	jobs := []*store.NewJob{{Kind: "k", Queue: "q", UniqueKey: "p@1"}}
	r, err := st.PeriodicAdvance(ctx, &store.PeriodicAdvanceParams{Name: "p", To: slot, Jobs: jobs, Now: t0})
	if err != nil || !r.Applied || len(r.Results) != 1 {
		t.Fatalf("first PeriodicAdvance() = %+v, %v", r, err)
	}
	r, err = st.PeriodicAdvance(ctx, &store.PeriodicAdvanceParams{Name: "p", To: slot, Jobs: jobs, Now: t0})
	if err != nil || r.Applied || !r.Last.Equal(slot) {
		t.Fatalf("stale PeriodicAdvance() = %+v, %v; want not applied, Last %v", r, err, slot)
	}
	if l, _ := st.PeriodicList(ctx, &store.PeriodicListParams{}); len(l) != 1 || l[0].Name != "p" || !l[0].Last.Equal(slot) {
		t.Fatalf("PeriodicList() = %+v", l)
	}
}
