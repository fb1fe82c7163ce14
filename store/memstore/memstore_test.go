package memstore_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

var t0 = time.Unix(1_700_000_000, 0).UTC()

func newStore(t testing.TB) *memstore.Store {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// enqueue enqueues jobs as the client would: a zero Priority or MaxAttempts
// gets the client's default (the store keeps what it is given).
func enqueue(t testing.TB, st store.Store, now time.Time, jobs ...*store.NewJob) []store.EnqueueResult {
	t.Helper()
	for _, j := range jobs {
		j.Priority = cmp.Or(j.Priority, store.PriorityDefault)
		j.MaxAttempts = cmp.Or(j.MaxAttempts, 25)
	}
	res, err := st.JobEnqueueMany(context.Background(), &store.JobEnqueueManyParams{Jobs: jobs, Now: now})
	if err != nil {
		t.Fatalf("JobEnqueueMany() error = %v", err)
	}
	return res
}

func fetch(t testing.TB, st store.Store, p store.JobFetchParams) []*store.JobRow {
	t.Helper()
	if p.Queue == "" {
		p.Queue = "q"
	}
	if p.Lease == 0 {
		p.Lease = time.Minute
	}
	rows, err := store.FetchedJobs(st.JobFetch(context.Background(), &p))
	if err != nil {
		t.Fatalf("JobFetch() error = %v", err)
	}
	return rows
}

func finish(t testing.TB, st store.Store, now time.Time, os ...*store.Report) []store.ReportResult {
	t.Helper()
	res, err := st.JobFinish(context.Background(), &store.JobFinishParams{Reports: os, Now: now})
	if err != nil {
		t.Fatalf("JobFinish() error = %v", err)
	}
	return res
}

func get(t testing.TB, st store.Store, id int64) *store.JobRow {
	t.Helper()
	row, err := st.JobGet(context.Background(), &store.JobGetParams{ID: id})
	if err != nil {
		t.Fatalf("JobGet(%d) error = %v", id, err)
	}
	return row
}

func ids(rows []*store.JobRow) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func TestFetchOrder(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	// IDs 1..6 with priorities and RunAts in a mixed order.
	enqueue(t, st, t0,
		&store.NewJob{Kind: "a", Queue: "q", Priority: 3},                              // 1
		&store.NewJob{Kind: "b", Queue: "q", Priority: 1, RunAt: t0.Add(-time.Second)}, // 2
		&store.NewJob{Kind: "a", Queue: "q", Priority: 1},                              // 3
		&store.NewJob{Kind: "b", Queue: "q", Priority: 1, RunAt: t0.Add(-time.Minute)}, // 4
		&store.NewJob{Kind: "a", Queue: "q", Priority: 2, RunAt: t0.Add(time.Second)},  // 5 scheduled
		&store.NewJob{Kind: "a", Queue: "other", Priority: 1},                          // 6
	)
	got := ids(fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0}))
	if want := []int64{4, 2, 3, 1}; !slices.Equal(got, want) {
		t.Errorf("JobFetch() = %v, want %v", got, want)
	}
	// Job 5 is due at t0+1s and still scheduled: it counts as available then.
	if got := ids(fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0.Add(999 * time.Millisecond)})); len(got) != 0 {
		t.Errorf("JobFetch() before RunAt = %v, want none", got)
	}
	if got := ids(fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0.Add(time.Second)})); !slices.Equal(got, []int64{5}) {
		t.Errorf("JobFetch() at RunAt = %v, want [5]", got)
	}
}

func TestFetchMergesDueScheduledWithAvailable(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q", RunAt: t0.Add(time.Second)})     // 1, due first
	enqueue(t, st, t0.Add(2*time.Second), &store.NewJob{Kind: "a", Queue: "q"})              // 2
	enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q", RunAt: t0.Add(3 * time.Second)}) // 3
	got := ids(fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0.Add(5 * time.Second)}))
	if want := []int64{1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("JobFetch() = %v, want %v", got, want)
	}
}

func TestFetchClaims(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q", Args: []byte(`{"x":1}`)})
	rows := fetch(t, st, store.JobFetchParams{Limit: 1, Now: t0.Add(time.Second), Lease: time.Minute, Worker: "w1"})
	if len(rows) != 1 {
		t.Fatalf("JobFetch() returned %d jobs, want 1", len(rows))
	}
	r := rows[0]
	if r.State != store.JobStateRunning || r.Attempt != 1 || r.AttemptedBy != "w1" ||
		!r.AttemptedAt.Equal(t0.Add(time.Second)) || !r.LeaseUntil.Equal(t0.Add(time.Minute+time.Second)) || r.ClaimToken == 0 {
		t.Errorf("claimed row = %+v", r)
	}
	if r.Priority != store.PriorityDefault || r.MaxAttempts != 25 {
		t.Errorf("Priority = %d, MaxAttempts = %d, want 2, 25 as enqueued", r.Priority, r.MaxAttempts)
	}
	if got := fetch(t, st, store.JobFetchParams{Limit: 1, Now: t0.Add(time.Second)}); len(got) != 0 {
		t.Errorf("second JobFetch() returned %d jobs, want 0", len(got))
	}
}

func TestFetchKindsLeavesOthersUntouched(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	enqueue(t, st, t0,
		&store.NewJob{Kind: "a", Queue: "q", Priority: 1},
		&store.NewJob{Kind: "b", Queue: "q", Priority: 2},
		&store.NewJob{Kind: "a", Queue: "q", Priority: 3},
		&store.NewJob{Kind: "c", Queue: "q", Priority: 1, RunAt: t0.Add(time.Second)},
	)
	before := get(t, st, 4)
	got := ids(fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0.Add(time.Minute), Kinds: []string{"b", "a"}}))
	if want := []int64{1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("JobFetch(Kinds a, b) = %v, want %v", got, want)
	}
	after := get(t, st, 4)
	if after.State != store.JobStateScheduled || after.Attempt != 0 || !after.RunAt.Equal(before.RunAt) {
		t.Errorf("job of kind c after fetch = %+v, want it untouched", after)
	}
	// Many kinds take the map path.
	kinds := []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "c"}
	if got := ids(fetch(t, st, store.JobFetchParams{Limit: 10, Now: t0.Add(time.Minute), Kinds: kinds})); !slices.Equal(got, []int64{4}) {
		t.Errorf("JobFetch(10 kinds) = %v, want [4]", got)
	}
}

func TestFencing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q"})
	first := fetch(t, st, store.JobFetchParams{Limit: 1, Now: t0, Lease: time.Second})[0]

	n, err := st.JobRescue(ctx, &store.JobRescueParams{Now: t0.Add(time.Second), Limit: 10})
	if err != nil || n != 0 {
		t.Fatalf("JobRescue() at LeaseUntil = %d, %v; want 0 (lease not yet before Now)", n, err)
	}
	n, err = st.JobRescue(ctx, &store.JobRescueParams{Now: t0.Add(2 * time.Second), Limit: 10})
	if err != nil || n != 1 {
		t.Fatalf("JobRescue() = %d, %v; want 1", n, err)
	}
	r := get(t, st, first.ID)
	if r.State != store.JobStateAvailable || !r.LeaseUntil.IsZero() || len(r.Errors) != 1 || r.Errors[0].Message != store.LeaseLostMessage || r.Errors[0].Attempt != 1 {
		t.Fatalf("rescued row = %+v", r)
	}
	second := fetch(t, st, store.JobFetchParams{Limit: 1, Now: t0.Add(3 * time.Second), Lease: time.Minute})[0]
	if second.ClaimToken == first.ClaimToken || second.Attempt != 2 {
		t.Fatalf("refetched: token %d (first %d), attempt %d", second.ClaimToken, first.ClaimToken, second.Attempt)
	}
	held, err := st.LeaseExtend(ctx, &store.LeaseExtendParams{
		Leases: []store.LeaseRef{{ID: first.ID, ClaimToken: first.ClaimToken}, {ID: second.ID, ClaimToken: second.ClaimToken}, {ID: 99}},
		Now:    t0.Add(4 * time.Second), Lease: time.Hour,
	})
	if err != nil || !slices.Equal(held, []store.LeaseStatus{{}, {Held: true}, {}}) {
		t.Fatalf("LeaseExtend() = %v, %v; want [{} {Held} {}]", held, err)
	}
	res := finish(t, st, t0.Add(5*time.Second),
		&store.Report{ID: first.ID, ClaimToken: first.ClaimToken, Kind: store.ReportCompleted},
	)
	if res[0].Applied {
		t.Fatalf("stale outcome applied")
	}
	if r := get(t, st, first.ID); r.State != store.JobStateRunning || !r.LeaseUntil.Equal(t0.Add(4*time.Second+time.Hour)) {
		t.Fatalf("after stale outcome: %+v", r)
	}
	res = finish(t, st, t0.Add(6*time.Second),
		&store.Report{ID: second.ID, ClaimToken: second.ClaimToken, Kind: store.ReportCompleted},
		&store.Report{ID: second.ID, ClaimToken: second.ClaimToken, Kind: store.ReportCompleted},
	)
	if !res[0].Applied || res[0].State != store.JobStateCompleted || res[1].Applied {
		t.Fatalf("JobFinish() = %+v, want applied once", res)
	}
	r = get(t, st, first.ID)
	if !r.FinalizedAt.Equal(t0.Add(6*time.Second)) || !r.LeaseUntil.IsZero() {
		t.Fatalf("completed row = %+v", r)
	}
}

func TestRescueExhaustedGoesDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q", MaxAttempts: 1, UniqueKey: "k"})
	fetch(t, st, store.JobFetchParams{Limit: 1, Now: t0, Lease: time.Second})
	if n, err := st.JobRescue(ctx, &store.JobRescueParams{Now: t0.Add(time.Hour), Limit: 1}); n != 1 || err != nil {
		t.Fatalf("JobRescue() = %d, %v", n, err)
	}
	if r := get(t, st, 1); r.State != store.JobStateDead || !r.FinalizedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("row = %+v, want dead", r)
	}
	if res := enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q", UniqueKey: "k"}); res[0].Duplicate {
		t.Fatalf("key not released by dead job")
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	now := t0
	enqueue(t, st, now,
		&store.NewJob{Kind: "a", Queue: "q", MaxAttempts: 2}, // failed twice: retrying, then dead
		&store.NewJob{Kind: "a", Queue: "q"},                 // snoozed into the future
		&store.NewJob{Kind: "a", Queue: "q"},                 // snoozed into the past: available
		&store.NewJob{Kind: "a", Queue: "q"},                 // released
		&store.NewJob{Kind: "a", Queue: "q"},                 // cancelled with error
	)
	rows := fetch(t, st, store.JobFetchParams{Limit: 10, Now: now})
	now = now.Add(time.Second)
	res := finish(t, st, now,
		&store.Report{ID: 1, ClaimToken: rows[0].ClaimToken, Kind: store.ReportFailed, Error: &store.AttemptError{Message: "boom"}, RunAt: now.Add(time.Minute)},
		&store.Report{ID: 2, ClaimToken: rows[1].ClaimToken, Kind: store.ReportSnoozed, RunAt: now.Add(time.Minute)},
		&store.Report{ID: 3, ClaimToken: rows[2].ClaimToken, Kind: store.ReportSnoozed, RunAt: now},
		&store.Report{ID: 4, ClaimToken: rows[3].ClaimToken, Kind: store.ReportReleased},
		&store.Report{ID: 5, ClaimToken: rows[4].ClaimToken, Kind: store.ReportCancelled, Error: &store.AttemptError{Message: "no"}},
	)
	want := []store.JobState{store.JobStateRetrying, store.JobStateScheduled, store.JobStateAvailable, store.JobStateAvailable, store.JobStateCancelled}
	for i, r := range res {
		if !r.Applied || r.State != want[i] {
			t.Errorf("outcome %d = %+v, want applied %s", i, r, want[i])
		}
	}
	r1 := get(t, st, 1)
	if len(r1.Errors) != 1 || r1.Errors[0].Attempt != 1 || r1.Errors[0].Message != "boom" || !r1.Errors[0].At.Equal(now) || !r1.RunAt.Equal(now.Add(time.Minute)) {
		t.Errorf("failed row = %+v", r1)
	}
	for _, id := range []int64{2, 3, 4} {
		if r := get(t, st, id); r.Attempt != 0 || !r.LeaseUntil.IsZero() {
			t.Errorf("job %d: Attempt = %d, LeaseUntil = %v; want 0 and zero", id, r.Attempt, r.LeaseUntil)
		}
	}
	if r := get(t, st, 5); !r.FinalizedAt.Equal(now) || len(r.Errors) != 1 {
		t.Errorf("cancelled row = %+v", r)
	}
	// The retrying job comes back at its RunAt and dies on its second failure.
	now = now.Add(time.Minute)
	rows = fetch(t, st, store.JobFetchParams{Limit: 10, Now: now})
	if got := ids(rows); !slices.Equal(got, []int64{4, 3, 1, 2}) { // 4 kept RunAt t0
		t.Fatalf("JobFetch() = %v, want [4 3 1 2]", got)
	}
	res = finish(t, st, now, &store.Report{ID: 1, ClaimToken: rows[2].ClaimToken, Kind: store.ReportFailed, Error: &store.AttemptError{Message: "boom2"}})
	if res[0].State != store.JobStateDead {
		t.Errorf("second failure: %+v, want dead", res[0])
	}
	if r := get(t, st, 1); len(r.Errors) != 2 || r.Errors[1].Attempt != 2 {
		t.Errorf("dead row errors = %+v", r.Errors)
	}
}

func TestUnique(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	res := enqueue(t, st, t0,
		&store.NewJob{Kind: "a", Queue: "q", UniqueKey: "k"},
		&store.NewJob{Kind: "a", Queue: "q", UniqueKey: "k"},
		&store.NewJob{Kind: "a", Queue: "q", UniqueKey: "j", RunAt: t0.Add(time.Hour)},
	)
	if res[0].Duplicate || !res[1].Duplicate || res[1].ID != res[0].ID || res[1].State != store.JobStateAvailable || res[2].ID != 2 {
		t.Fatalf("JobEnqueueMany() = %+v", res)
	}
	rows := fetch(t, st, store.JobFetchParams{Limit: 1, Now: t0})
	if res := enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q", UniqueKey: "k"}); !res[0].Duplicate || res[0].State != store.JobStateRunning {
		t.Fatalf("enqueue while running = %+v, want duplicate of running job", res)
	}
	finish(t, st, t0, &store.Report{ID: 1, ClaimToken: rows[0].ClaimToken, Kind: store.ReportCompleted})
	res = enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q", UniqueKey: "k"})
	if res[0].Duplicate || res[0].ID != 3 {
		t.Fatalf("enqueue after completion = %+v, want new job 3", res)
	}
	// Job 1 (completed) cannot come back while job 3 holds the key.
	if _, err := st.JobRetry(ctx, &store.JobRetryParams{ID: 1, Now: t0}); !errors.Is(err, store.ErrUniqueConflict) {
		t.Fatalf("JobRetry() error = %v, want ErrUniqueConflict", err)
	}
	if _, err := st.JobCancel(ctx, &store.JobCancelParams{ID: 3, Now: t0}); err != nil {
		t.Fatal(err)
	}
	r, err := st.JobRetry(ctx, &store.JobRetryParams{ID: 1, Now: t0.Add(time.Second)})
	if err != nil || r.State != store.JobStateAvailable || !r.FinalizedAt.IsZero() || !r.RunAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("JobRetry() = %+v, %v", r, err)
	}
	if res := enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q", UniqueKey: "k"}); !res[0].Duplicate || res[0].ID != 1 {
		t.Fatalf("retried job does not hold its key: %+v", res)
	}
	if _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: 1}); err != nil {
		t.Fatal(err)
	}
	if res := enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q", UniqueKey: "k"}); res[0].Duplicate {
		t.Fatalf("deleted job still holds its key: %+v", res)
	}
}

func TestEnqueueAtomicOnBadJob(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	_, err := st.JobEnqueueMany(context.Background(), &store.JobEnqueueManyParams{Now: t0, Jobs: []*store.NewJob{
		{Kind: "a", Queue: "q", UniqueKey: "k"}, {Kind: "", Queue: "q"},
	}})
	if err == nil {
		t.Fatal("JobEnqueueMany() with an empty kind succeeded")
	}
	if res := enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q", UniqueKey: "k"}); res[0].Duplicate || res[0].ID != 1 {
		t.Fatalf("failed batch left something behind: %+v", res)
	}
}

func TestCopies(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	nj := &store.NewJob{Kind: "a", Queue: "q", Args: []byte(`{"a":1}`), Meta: []byte(`{}`), Tags: []string{"x", "y"}}
	enqueue(t, st, t0, nj)
	nj.Args[2] = 'Z'
	nj.Tags[0] = "Z"
	rows := fetch(t, st, store.JobFetchParams{Limit: 1, Now: t0})
	if string(rows[0].Args) != `{"a":1}` || rows[0].Tags[0] != "x" {
		t.Fatalf("store aliases enqueue input: %+v", rows[0])
	}
	rows[0].Args[2] = 'Z'
	rows[0].Args = append(rows[0].Args, '!')
	rows[0].Meta = append(rows[0].Meta[:0], 'Z')
	rows[0].Tags[1] = "Z"
	finish(t, st, t0, &store.Report{ID: 1, ClaimToken: rows[0].ClaimToken, Kind: store.ReportFailed, Error: &store.AttemptError{Message: "m"}})
	r := get(t, st, 1)
	if string(r.Args) != `{"a":1}` || string(r.Meta) != `{}` || r.Tags[1] != "y" {
		t.Fatalf("store aliases fetch output: %+v", r)
	}
	r.Errors[0].Message = "changed"
	if r := get(t, st, 1); r.Errors[0].Message != "m" {
		t.Fatalf("store aliases errors: %+v", r.Errors)
	}
	if r.Args == nil || get(t, st, 1).UniqueKey != "" {
		t.Fatal("unexpected nil Args")
	}
}

func TestNilAndEmptySlicesKept(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q"}, &store.NewJob{Kind: "a", Queue: "q", Args: []byte{}, Tags: []string{}})
	r1, r2 := get(t, st, 1), get(t, st, 2)
	if r1.Args != nil || r1.Tags != nil || r1.Meta != nil || r1.Errors != nil {
		t.Errorf("nil slices came back non-nil: %+v", r1)
	}
	if r2.Args == nil || r2.Tags == nil {
		t.Errorf("empty slices came back nil: %+v", r2)
	}
}

func TestCancelDeleteRetryStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q"}, &store.NewJob{Kind: "a", Queue: "q", RunAt: t0.Add(time.Hour)})
	rows := fetch(t, st, store.JobFetchParams{Limit: 1, Now: t0})
	for name, err := range map[string]error{
		"delete": func() error { _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: 1}); return err }(),
		"retry":  func() error { _, err := st.JobRetry(ctx, &store.JobRetryParams{ID: 1, Now: t0}); return err }(),
	} {
		if !errors.Is(err, store.ErrJobRunning) {
			t.Errorf("%s of running job: error = %v, want ErrJobRunning", name, err)
		}
	}
	for name, err := range map[string]error{
		"cancel": func() error { _, err := st.JobCancel(ctx, &store.JobCancelParams{ID: 9, Now: t0}); return err }(),
		"delete": func() error { _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: 9}); return err }(),
		"retry":  func() error { _, err := st.JobRetry(ctx, &store.JobRetryParams{ID: 9, Now: t0}); return err }(),
		"get":    func() error { _, err := st.JobGet(ctx, &store.JobGetParams{ID: 0}); return err }(),
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s of unknown job: error = %v, want ErrNotFound", name, err)
		}
	}
	finish(t, st, t0, &store.Report{ID: 1, ClaimToken: rows[0].ClaimToken, Kind: store.ReportCompleted})
	c, err := st.JobCancel(ctx, &store.JobCancelParams{ID: 1, Now: t0.Add(time.Hour)})
	if err != nil || c.State != store.JobStateCompleted || !c.FinalizedAt.Equal(t0) {
		t.Errorf("cancel of completed job = %+v, %v; want it unchanged", c, err)
	}
	// Retrying the scheduled job makes it available now; its NextRunAt goes.
	next, _ := nextAt(t, st, "q", t0)
	if !next.Equal(t0.Add(time.Hour)) {
		t.Errorf("JobNextRunAt() = %v, want %v", next, t0.Add(time.Hour))
	}
	r, err := st.JobRetry(ctx, &store.JobRetryParams{ID: 2, Now: t0.Add(time.Second)})
	if err != nil || r.State != store.JobStateAvailable {
		t.Fatalf("JobRetry(scheduled) = %+v, %v", r, err)
	}
	if next, _ := nextAt(t, st, "q", t0); !next.IsZero() {
		t.Errorf("JobNextRunAt() = %v, want zero", next)
	}
	if got := ids(fetch(t, st, store.JobFetchParams{Limit: 5, Now: t0.Add(time.Second)})); !slices.Equal(got, []int64{2}) {
		t.Errorf("JobFetch() = %v, want [2]", got)
	}
}

func TestRetryGivesOneMoreAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q", MaxAttempts: 1})
	rows := fetch(t, st, store.JobFetchParams{Limit: 1, Now: t0})
	finish(t, st, t0, &store.Report{ID: 1, ClaimToken: rows[0].ClaimToken, Kind: store.ReportFailed, Error: &store.AttemptError{Message: "x"}})
	r, err := st.JobRetry(ctx, &store.JobRetryParams{ID: 1, Now: t0})
	if err != nil || r.MaxAttempts != 2 || r.State != store.JobStateAvailable || len(r.Errors) != 1 {
		t.Fatalf("JobRetry() = %+v, %v", r, err)
	}
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	const n = 3000 // spans three chunks
	jobs := make([]*store.NewJob, n)
	for i := range jobs {
		jobs[i] = &store.NewJob{Kind: []string{"a", "b"}[i%2], Queue: []string{"q", "r", "s"}[i%3]}
	}
	enqueue(t, st, t0, jobs...)
	// Delete the whole first chunk and a few more.
	for id := int64(1); id <= 1100; id++ {
		if _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(p store.JobListParams) []int64 {
		var all []int64
		for {
			rows, err := st.JobList(ctx, &p)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) == 0 {
				return all
			}
			all = append(all, ids(rows)...)
			p.AfterID = rows[len(rows)-1].ID
		}
	}
	want := func(desc bool, f func(id int64) bool) []int64 {
		var out []int64
		for id := int64(1101); id <= n; id++ {
			if f(id) {
				out = append(out, id)
			}
		}
		if desc {
			slices.Reverse(out)
		}
		return out
	}
	for _, tt := range []struct {
		name string
		p    store.JobListParams
		f    func(int64) bool
	}{
		{"all", store.JobListParams{Limit: 7}, func(int64) bool { return true }},
		{"queue r", store.JobListParams{Limit: 50, Queue: "r"}, func(id int64) bool { return (id-1)%3 == 1 }},
		{"kind b queue s", store.JobListParams{Limit: 13, Queue: "s", Kind: "b"}, func(id int64) bool { return (id-1)%3 == 2 && (id-1)%2 == 1 }},
		{"available", store.JobListParams{Limit: 100, State: store.JobStateAvailable}, func(int64) bool { return true }},
		{"running", store.JobListParams{Limit: 100, State: store.JobStateRunning}, func(int64) bool { return false }},
	} {
		for _, desc := range []bool{false, true} {
			p := tt.p
			p.Desc = desc
			if got, w := list(p), want(desc, tt.f); !slices.Equal(got, w) {
				t.Errorf("%s desc=%v: got %d ids (%v...), want %d", tt.name, desc, len(got), got[:min(5, len(got))], len(w))
			}
		}
	}
	if _, err := st.JobList(ctx, &store.JobListParams{Limit: 1, State: "nope"}); err == nil {
		t.Error("JobList() with unknown state succeeded")
	}
}

func TestCountsAndPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	enqueue(t, st, t0,
		&store.NewJob{Kind: "a", Queue: "b"}, &store.NewJob{Kind: "a", Queue: "b"},
		&store.NewJob{Kind: "a", Queue: "a", RunAt: t0.Add(time.Hour)},
	)
	rows := fetch(t, st, store.JobFetchParams{Queue: "b", Limit: 2, Now: t0})
	finish(t, st, t0, &store.Report{ID: rows[0].ID, ClaimToken: rows[0].ClaimToken, Kind: store.ReportCompleted})
	finish(t, st, t0.Add(time.Minute), &store.Report{ID: rows[1].ID, ClaimToken: rows[1].ClaimToken, Kind: store.ReportCompleted})
	counts, err := st.JobCounts(ctx, &store.JobCountsParams{})
	want := []store.QueueStateCount{{Queue: "a", State: store.JobStateScheduled, Count: 1}, {Queue: "b", State: store.JobStateCompleted, Count: 2}}
	if err != nil || !slices.Equal(counts, want) {
		t.Fatalf("JobCounts() = %v, %v; want %v", counts, err, want)
	}
	n, err := st.JobPrune(ctx, &store.JobPruneParams{CompletedBefore: t0.Add(time.Minute), Limit: 10})
	if err != nil || n != 1 {
		t.Fatalf("JobPrune() = %d, %v; want 1", n, err)
	}
	if _, err := st.JobGet(ctx, &store.JobGetParams{ID: rows[0].ID}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("pruned job still there: %v", err)
	}
	n, _ = st.JobPrune(ctx, &store.JobPruneParams{CompletedBefore: t0.Add(time.Hour), DeadBefore: t0.Add(time.Hour), Limit: 10})
	if n != 1 {
		t.Fatalf("second JobPrune() = %d, want 1", n)
	}
	counts, _ = st.JobCounts(ctx, &store.JobCountsParams{Queue: "b"})
	if len(counts) != 0 {
		t.Fatalf("JobCounts(b) = %v, want none", counts)
	}
}

func TestClosedAndContext(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := st.JobGet(ctx, &store.JobGetParams{ID: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("JobGet(cancelled ctx) error = %v, want context.Canceled", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("second Close() = %v, want ErrClosed", err)
	}
	if _, err := store.FetchedJobs(st.JobFetch(context.Background(), &store.JobFetchParams{Queue: "q", Limit: 1})); !errors.Is(err, store.ErrClosed) {
		t.Errorf("JobFetch() after Close error = %v, want ErrClosed", err)
	}
	if _, err := st.QueueWatch(context.Background(), &store.QueueWatchParams{Queue: "q"}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("QueueWatch() after Close error = %v, want ErrClosed", err)
	}
}

func TestWatch(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	w, err := st.QueueWatch(context.Background(), &store.QueueWatchParams{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "other"})
	select {
	case <-w.C:
		t.Fatal("signal for another queue")
	default:
	}
	enqueue(t, st, t0, &store.NewJob{Kind: "a", Queue: "q"})
	select {
	case <-w.C:
	case <-time.After(5 * time.Second):
		t.Fatal("no signal after enqueue")
	}
	rows := fetch(t, st, store.JobFetchParams{Limit: 1, Now: t0})
	finish(t, st, t0, &store.Report{ID: rows[0].ID, ClaimToken: rows[0].ClaimToken, Kind: store.ReportReleased})
	select {
	case <-w.C:
	case <-time.After(5 * time.Second):
		t.Fatal("no signal after release")
	}
}

// TestConcurrentClaims checks that concurrent fetchers never share a claim
// and that every job is completed exactly once.
func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	const producers, perProducer, workers = 4, 2000, 8
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				jobs := []*store.NewJob{{Kind: fmt.Sprint("k", i%3), Queue: "q", Priority: 1 + i%4, UniqueKey: fmt.Sprint(p, "-", i)}}
				if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: t0}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var mu sync.Mutex
	seen := make(map[int64]bool)
	total := producers * perProducer
	for w := range workers {
		wg.Go(func() {
			deadline := time.Now().Add(time.Minute)
			for {
				if time.Now().After(deadline) {
					t.Error("jobs went missing: deadline reached")
					return
				}
				rows, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "q", Limit: 1 + w*7, Now: t0, Lease: time.Hour}))
				if err != nil {
					t.Error(err)
					return
				}
				if len(rows) == 0 {
					mu.Lock()
					done := len(seen) == total
					mu.Unlock()
					if done {
						return
					}
					runtime.Gosched()
					continue
				}
				outs := make([]*store.Report, len(rows))
				mu.Lock()
				for i, r := range rows {
					if seen[r.ID] {
						t.Errorf("job %d claimed twice", r.ID)
					}
					seen[r.ID] = true
					outs[i] = &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted}
				}
				mu.Unlock()
				res, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: outs, Now: t0})
				if err != nil {
					t.Error(err)
					return
				}
				for i, r := range res {
					if !r.Applied {
						t.Errorf("outcome of job %d not applied", outs[i].ID)
					}
				}
			}
		})
	}
	wg.Wait()
	counts, _ := st.JobCounts(ctx, &store.JobCountsParams{})
	want := []store.QueueStateCount{{Queue: "q", State: store.JobStateCompleted, Count: int64(total)}}
	if !slices.Equal(counts, want) {
		t.Errorf("JobCounts() = %v, want %v", counts, want)
	}
}
