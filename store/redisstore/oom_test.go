package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// A full Redis (maxmemory reached, noeviction) refuses enqueues, but
// sortie can still free it: cancelling and deleting jobs (one at a time
// and in bulk), pruning finished ones and releasing running ones all run,
// and once they have freed memory enqueues work again.
func TestFullServerCanBeEmptied(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, nil)
	ctx := context.Background()
	st, err := redisstore.Open(ctx, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	opts, _, _ := redisstore.ParseURL(srv.URL)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pad := `{"pad":"` + strings.Repeat("x", 2000) + `"}`
	enqueue := func(n int) error {
		jobs := make([]*store.NewJob, n)
		for i := range jobs {
			jobs[i] = &store.NewJob{Kind: "k", Queue: "full", Args: []byte(pad)}
		}
		_, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: jobs})
		return err
	}
	if err := enqueue(200); err != nil {
		t.Fatal(err)
	}
	res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "full", Limit: 100, Now: now, Lease: time.Hour, Worker: "w"})
	if err != nil || len(res.Jobs) != 100 {
		t.Fatalf("JobFetch() = %d jobs, %v; want 100", len(res.Jobs), err)
	}
	var done []*store.Report
	for _, j := range res.Jobs[:50] {
		done = append(done, &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted})
	}
	if _, err := st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: done}); err != nil {
		t.Fatal(err)
	}
	// Full: maxmemory below what the server holds, as after its jobs
	// grew past it (an enqueue that crosses it is let through, and the
	// next refused).
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(redistest.InfoInt(t, rdb, "memory", "used_memory")-64<<10, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := enqueue(1); !errors.Is(err, store.ErrStoreFull) || !strings.Contains(err.Error(), "OOM") ||
		!strings.Contains(err.Error(), "sortie delete --all --state completed") {
		t.Fatalf("enqueue on a full server: %v, want store.ErrStoreFull saying how to make room, with Redis's OOM error", err)
	}
	pending := listIDs(t, st, store.JobStateAvailable)
	if _, err := st.JobCancel(ctx, &store.JobCancelParams{ID: pending[0], Now: now}); err != nil {
		t.Errorf("JobCancel on a full server: %v", err)
	}
	if _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: pending[1], Now: now}); err != nil {
		t.Errorf("JobDelete on a full server: %v", err)
	}
	for _, action := range []store.JobAction{store.ActionCancel, store.ActionDelete} {
		out, err := st.JobActMany(ctx, &store.JobActManyParams{Action: action, IDs: pending[2:10], Now: now})
		if err != nil {
			t.Fatalf("JobActMany(%s) on a full server: %v", action, err)
		}
		for i, r := range out {
			if r.Err != nil {
				t.Errorf("JobActMany(%s) on a full server, job %d: %v", action, pending[2+i], r.Err)
			}
		}
	}
	var back []*store.Report
	for _, j := range res.Jobs[50:] {
		back = append(back, &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportReleased})
	}
	if out, err := st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: back}); err != nil || !out[0].Applied {
		t.Errorf("releasing running jobs on a full server: %v, %+v", err, out)
	}
	if n, err := st.JobPrune(ctx, &store.JobPruneParams{Now: now, Limit: 1000, CompletedBefore: now.Add(time.Second),
		CancelledBefore: now.Add(time.Second)}); err != nil || n == 0 {
		t.Errorf("JobPrune on a full server = %d, %v; want the finished jobs pruned", n, err)
	}
	rest := listIDs(t, st, "")
	for from := 0; from < len(rest); from += store.MaxActMany {
		if _, err := st.JobActMany(ctx, &store.JobActManyParams{Action: store.ActionDelete, IDs: rest[from:min(from+store.MaxActMany, len(rest))], Now: now}); err != nil {
			t.Fatalf("deleting every job: %v", err)
		}
	}
	if err := enqueue(10); err != nil {
		t.Errorf("enqueue once the jobs are deleted: %v", err)
	}
}

// listIDs returns the IDs of the jobs of queue "full" in state st (every
// state when empty).
func listIDs(t *testing.T, st *redisstore.Store, state store.JobState) []int64 {
	t.Helper()
	var ids []int64
	for after := int64(0); ; {
		rows, err := st.JobList(context.Background(), &store.JobListParams{Queue: "full", State: state, AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if len(rows) < 1000 {
			return ids
		}
		after = rows[len(rows)-1].ID
	}
}
