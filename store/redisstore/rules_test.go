package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/depgraph"
	"github.com/sortiehq/sortie/store/internal/transition"
	"github.com/sortiehq/sortie/store/redisstore"
)

// The library applies reports inside Redis; transition.Rules (through
// transition.Next) is the one definition of what a report does. Every
// report kind, on a job with attempts left and on one without, with a
// RunAt before, at and after Now, with and without an error, must leave
// the job as transition.Next says.
func TestFinishFollowsTransitions(t *testing.T) {
	t.Parallel()
	st, err := redisstore.Open(t.Context(), redistest.URL(t), &redisstore.Options{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := t.Context()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for kind := store.ReportCompleted; kind.Valid(); kind++ {
		for _, maxAttempts := range []int{1, 3} {
			for _, runAt := range []time.Time{{}, now.Add(-time.Minute), now, now.Add(time.Hour)} {
				for _, withErr := range []bool{false, true} {
					name := fmt.Sprintf("%s/max%d/runAt%v/err%v", kind, maxAttempts, runAt, withErr)
					res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now.Add(-time.Hour),
						Jobs: []*store.NewJob{{Kind: "k", Queue: "rules", Args: []byte(`{}`), MaxAttempts: maxAttempts}}})
					if err != nil {
						t.Fatal(err)
					}
					r, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "rules", Limit: 1, Now: now, Lease: time.Minute, Worker: "w"})
					if err != nil || len(r.Jobs) != 1 || r.Jobs[0].ID != res[0].ID {
						t.Fatalf("%s: fetch = %v, %v", name, r, err)
					}
					job := r.Jobs[0]
					rep := &store.Report{ID: job.ID, ClaimToken: job.ClaimToken, Kind: kind, RunAt: runAt, Result: []byte(`{"ok":1}`)}
					if withErr {
						rep.Error = &store.AttemptError{Message: "boom"}
					}
					want := transition.Next(rep, job.Attempt, job.MaxAttempts, now)
					out, err := st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: []*store.Report{rep}})
					if err != nil || !out[0].Applied {
						t.Fatalf("%s: finish = %v, %v", name, out, err)
					}
					got, err := st.JobGet(ctx, &store.JobGetParams{ID: job.ID})
					if err != nil {
						t.Fatal(err)
					}
					wantRunAt := job.RunAt
					if !want.RunAt.IsZero() {
						wantRunAt = want.RunAt
					}
					wantAttempt := job.Attempt
					if want.Uncount {
						wantAttempt--
					}
					var wantErrs []store.AttemptError
					if want.Error != nil {
						wantErrs = []store.AttemptError{*want.Error}
					}
					var wantResult []byte
					if want.State == store.JobStateCompleted {
						wantResult = want.Result
					}
					type view struct {
						State    store.JobState
						RunAt    time.Time
						Attempt  int
						Errors   []store.AttemptError
						Result   []byte
						Finished bool
					}
					w := view{want.State, wantRunAt, wantAttempt, wantErrs, wantResult, want.Finalized()}
					g := view{got.State, got.RunAt, got.Attempt, got.Errors, got.Result, !got.FinalizedAt.IsZero()}
					if diff := cmp.Diff(w, g); diff != "" {
						t.Errorf("%s: job after the report (-transition.Next +redis):\n%s", name, diff)
					}
					if _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: job.ID, Now: now}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}

// The library's texts are package store's: a job cancelled by its
// dependency's end, by a deleted dependency, dropped from a full queue, or
// rescued after its lease carries exactly the message store defines.
func TestLibraryMessagesAreStores(t *testing.T) {
	t.Parallel()
	st, err := redisstore.Open(t.Context(), redistest.URL(t), &redisstore.Options{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := t.Context()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	enq := func(jobs ...*store.NewJob) []store.EnqueueResult {
		t.Helper()
		res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: jobs})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	lastError := func(id int64) string {
		t.Helper()
		j, err := st.JobGet(ctx, &store.JobGetParams{ID: id})
		if err != nil || len(j.Errors) == 0 {
			t.Fatalf("job %d: %v, %v; want an error recorded", id, j, err)
		}
		return j.Errors[len(j.Errors)-1].Message
	}

	dep := enq(&store.NewJob{Kind: "k", Queue: "texts", Args: []byte(`{}`)})[0].ID
	waiter := enq(&store.NewJob{Kind: "k", Queue: "texts", Args: []byte(`{}`), DependsOn: []int64{dep}})[0].ID
	if _, err := st.JobCancel(ctx, &store.JobCancelParams{ID: dep, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got, want := lastError(waiter), store.DependencyEndedMessage(dep, store.JobStateCancelled); got != want {
		t.Errorf("dependency ended: %q, want %q", got, want)
	}

	dep = enq(&store.NewJob{Kind: "k", Queue: "texts", Args: []byte(`{}`)})[0].ID
	waiter = enq(&store.NewJob{Kind: "k", Queue: "texts", Args: []byte(`{}`), DependsOn: []int64{dep}})[0].ID
	if _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: dep, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got, want := lastError(waiter), depgraph.DeletedMessage(dep); got != want {
		t.Errorf("dependency deleted: %q, want %q", got, want)
	}

	if _, err := st.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: "small", Now: now,
		Settings: store.QueueSettings{MaxDepth: 1, Overflow: store.OverflowDropOldest}}); err != nil {
		t.Fatal(err)
	}
	old := enq(&store.NewJob{Kind: "k", Queue: "small", Args: []byte(`{}`)})[0].ID
	enq(&store.NewJob{Kind: "k", Queue: "small", Args: []byte(`{}`)})
	if got, want := lastError(old), store.DroppedMessage("small", 1); got != want {
		t.Errorf("dropped: %q, want %q", got, want)
	}

	lost := enq(&store.NewJob{Kind: "k", Queue: "lease", Args: []byte(`{}`)})[0].ID
	if _, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "lease", Limit: 1, Now: now, Lease: time.Second, Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	if n, err := st.JobRescue(ctx, &store.JobRescueParams{Now: now.Add(time.Minute), Limit: 10}); err != nil || n != 1 {
		t.Fatalf("JobRescue = %d, %v; want 1", n, err)
	}
	if got := lastError(lost); got != store.LeaseLostMessage {
		t.Errorf("rescued: %q, want %q", got, store.LeaseLostMessage)
	}
}
