package sortie_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// runningJob enqueues a job into queue and claims it, so it is running.
func runningJob(t *testing.T, st store.Store, queue string) int64 {
	t.Helper()
	now := time.Now()
	res, err := st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{{Kind: "run", Queue: queue, Args: []byte(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.FetchedJobs(st.JobFetch(t.Context(), &store.JobFetchParams{Queue: queue, Limit: 1, Now: now, Lease: time.Hour, Worker: "w"}))
	if err != nil || len(got) != 1 || got[0].ID != res[0].ID {
		t.Fatalf("JobFetch() = %v, %v; want job %d claimed", got, err, res[0].ID)
	}
	return res[0].ID
}

// JobsBulk acts on every match in batches of 500, newest first, reporting
// progress after each batch; a job it cannot act on is reported with the
// error the single call gives, and the rest go on.
func TestJobsBulk(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		fillDead(t, st, 1203)
		running := runningJob(t, st, "default")
		c := newClient(t, st, &sortie.Config{})
		var progress []int
		res, err := c.JobsBulk(t.Context(), sortie.BulkDelete, &sortie.JobSearch{JobListParams: sortie.JobListParams{Queue: "default"}},
			&sortie.BulkOpts{Progress: func(done int) { progress = append(progress, done) }})
		if err != nil {
			t.Fatalf("JobsBulk(delete) error: %v", err)
		}
		if res.Changed != 1203 || res.Next != 0 {
			t.Errorf("JobsBulk(delete) changed %d jobs, next %d; want 1203, 0", res.Changed, res.Next)
		}
		// The running job is the newest: the first batch acts on 499.
		if want := []int{499, 999, 1203}; !slices.Equal(progress, want) {
			t.Errorf("JobsBulk(delete) progress %v, want %v", progress, want)
		}
		_, single := c.JobDelete(t.Context(), running)
		if len(res.Failed) != 1 || res.Failed[0].ID != running || !errors.Is(res.Failed[0].Err, sortie.ErrJobRunning) ||
			res.Failed[0].Err.Error() != single.Error() {
			t.Errorf("JobsBulk(delete) failed %v, want job %d with the error of JobDelete: %v", res.Failed, running, single)
		}
		counts, err := c.JobCounts(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		if want := []sortie.QueueStateCount{{Queue: "default", State: sortie.JobStateRunning, Count: 1}}; !cmp.Equal(counts, want) {
			t.Errorf("JobCounts() after JobsBulk(delete) = %v, want %v", counts, want)
		}
	})
}

// JobsBulk with Max stops there and returns the cursor; a second call from
// it acts on the rest, the older jobs.
func TestJobsBulkMax(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		fillDead(t, st, 1200)
		c := newClient(t, st, &sortie.Config{})
		dead := &sortie.JobSearch{JobListParams: sortie.JobListParams{State: sortie.JobStateDead}}
		first, err := c.JobsBulk(t.Context(), sortie.BulkRetry, dead, &sortie.BulkOpts{Max: 700})
		if err != nil || first.Changed != 700 || first.Next == 0 || len(first.Failed) != 0 {
			t.Fatalf("JobsBulk(retry, Max 700) = %+v, %v; want 700 changed and a cursor", first, err)
		}
		left, err := c.JobList(t.Context(), &sortie.JobListParams{State: sortie.JobStateDead, Desc: true, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(left.Jobs) != 500 || left.Jobs[0].ID >= first.Next {
			t.Fatalf("dead jobs after JobsBulk(retry, Max 700): %d, newest %d; want the 500 oldest, below the cursor %d", len(left.Jobs), left.Jobs[0].ID, first.Next)
		}
		rest, err := c.JobsBulk(t.Context(), sortie.BulkRetry, dead, &sortie.BulkOpts{After: first.Next})
		if err != nil || rest.Changed != 500 || rest.Next != 0 {
			t.Fatalf("JobsBulk(retry, After %d) = %+v, %v; want 500 changed, no cursor", first.Next, rest, err)
		}
		counts, err := c.JobCounts(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		if want := []sortie.QueueStateCount{{Queue: "default", State: sortie.JobStateAvailable, Count: 1200}}; !cmp.Equal(counts, want) {
			t.Errorf("JobCounts() after both calls = %v, want %v", counts, want)
		}
	})
}

// JobsBulkIDs acts on the jobs named, in one store call: an unknown job
// fails with the single call's error, a job named twice is acted on twice.
// It takes at most 1,000 IDs and a known action.
func TestJobsBulkIDs(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		fillDead(t, st, 2)
		c := newClient(t, st, &sortie.Config{})
		list, err := c.JobList(t.Context(), &sortie.JobListParams{State: sortie.JobStateDead, Limit: 10})
		if err != nil || len(list.Jobs) != 2 {
			t.Fatalf("JobList(dead) = %v, %v; want 2 jobs", list, err)
		}
		a, b := list.Jobs[0].ID, list.Jobs[1].ID
		const unknown = 1 << 40
		res, err := c.JobsBulkIDs(t.Context(), sortie.BulkRetry, []int64{unknown, b, a, b})
		if err != nil {
			t.Fatalf("JobsBulkIDs(retry) error: %v", err)
		}
		_, single := c.JobRetry(t.Context(), unknown)
		if res.Changed != 3 || len(res.Failed) != 1 || res.Failed[0].ID != unknown || res.Failed[0].Err.Error() != single.Error() ||
			!errors.Is(res.Failed[0].Err, sortie.ErrNotFound) {
			t.Errorf("JobsBulkIDs(retry) = %+v, want 3 changed and job %d failed with %v", res, int64(unknown), single)
		}
		for _, id := range []int64{a, b} {
			if got := mustGet(t, c, id); got.State != sortie.JobStateAvailable {
				t.Errorf("job %d after JobsBulkIDs(retry): %s, want available", id, got.State)
			}
		}
		if _, err := c.JobsBulkIDs(t.Context(), sortie.BulkRetry, make([]int64, 1001)); !errors.Is(err, sortie.ErrInvalidArgument) {
			t.Errorf("JobsBulkIDs(1001 IDs) error = %v, want ErrInvalidArgument", err)
		}
		if _, err := c.JobsBulkIDs(t.Context(), "requeue", []int64{a}); !errors.Is(err, sortie.ErrInvalidArgument) {
			t.Errorf("JobsBulkIDs(action requeue) error = %v, want ErrInvalidArgument", err)
		}
	})
}

// A store that fails the batch stops JobsBulk with its error and what was
// done until then.
func TestJobsBulkStoreDown(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	t.Cleanup(func() { _ = inner.Close() })
	fillDead(t, inner, 700)
	st := storefault.New(inner)
	c := newClient(t, st, &sortie.Config{})
	st.Fail("JobActMany", nil)
	dead := &sortie.JobSearch{JobListParams: sortie.JobListParams{State: sortie.JobStateDead}}
	res, err := c.JobsBulk(context.Background(), sortie.BulkRetry, dead, nil)
	if !errors.Is(err, storefault.ErrInjected) || res == nil || res.Changed != 0 {
		t.Errorf("JobsBulk(retry) on a failing store = %+v, %v; want nothing changed and the store's error", res, err)
	}
	st.Heal()
	res, err = c.JobsBulk(context.Background(), sortie.BulkRetry, dead, nil)
	if err != nil || res.Changed != 700 {
		t.Errorf("JobsBulk(retry) once the store is back = %+v, %v; want 700 changed", res, err)
	}
}
