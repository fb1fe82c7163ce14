package redisstore

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
)

// A server that ran library version 8 (testdata/sortie-v8.lua, the source
// as it was) keeps working when this build opens it: the jobs version 8
// enqueued, claimed and finished are claimed, completed, failed and read
// by this version's functions, its claims' outcomes are applied under
// their tokens, and new jobs get later IDs. Version 8's own functions
// keep their arguments, so a process of version 8 still running while
// another upgrades goes on working.
func TestUpgradeFromVersion8(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, nil)
	ctx := context.Background()
	opts, _, err := ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	src, err := os.ReadFile("testdata/sortie-v8.lua")
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.FunctionLoadReplace(ctx, renderLibrary(string(src), 8)).Err(); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v8 := &v8Store{t: t, s: &Store{rdb: rdb, arg0: "s" + DefaultPrefix, k: keys{prefix: DefaultPrefix}, closed: make(chan struct{})}, now: now}
	ids := v8.enqueue(10)
	claims := v8.fetch(6)
	v8.finish(claims[:2], store.ReportCompleted)

	st, err := Open(ctx, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if v, err := libraryVersion(ctx, rdb); err != nil || v != LibraryVersion {
		t.Fatalf("library version after Open = %d, %v; want %d", v, err, LibraryVersion)
	}
	// Claims of version 8: two completed, one failed, one left running.
	reports := []*store.Report{
		{ID: claims[2].ID, ClaimToken: claims[2].ClaimToken, Kind: store.ReportCompleted},
		{ID: claims[3].ID, ClaimToken: claims[3].ClaimToken, Kind: store.ReportCompleted, Result: []byte(`{"ok":1}`)},
		{ID: claims[4].ID, ClaimToken: claims[4].ClaimToken, Kind: store.ReportFailed, RunAt: now.Add(time.Hour),
			Error: &store.AttemptError{Attempt: 1, At: now, Message: "boom"}},
		{ID: claims[0].ID, ClaimToken: claims[0].ClaimToken, Kind: store.ReportCompleted}, // completed by version 8: stale
	}
	out, err := st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: reports})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.ReportResult{{Applied: true, State: store.JobStateCompleted}, {Applied: true, State: store.JobStateCompleted},
		{Applied: true, State: store.JobStateRetrying}, {}}
	for i := range want {
		if out[i] != want[i] {
			t.Errorf("report %d on a job of version 8 = %+v, want %+v", i, out[i], want[i])
		}
	}
	// The jobs version 8 left available are claimed and completed here.
	res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "up", Limit: 10, Now: now, Lease: time.Hour, Worker: "w9"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 4 {
		t.Fatalf("JobFetch after the upgrade claimed %d jobs, want the 4 version 8 left available", len(res.Jobs))
	}
	var done []*store.Report
	for _, j := range res.Jobs {
		if j.Attempt != 1 || j.Kind != "k" || string(j.Args) != `{"v":8}` {
			t.Errorf("job %d of version 8 claimed as %+v", j.ID, j)
		}
		done = append(done, &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted})
	}
	if out, err := st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: done}); err != nil || !out[0].Applied {
		t.Fatalf("completing jobs of version 8: %+v, %v", out, err)
	}
	got, err := st.JobGet(ctx, &store.JobGetParams{ID: claims[3].ID})
	if err != nil || got.State != store.JobStateCompleted || got.Attempt != 1 || string(got.Result) != `{"ok":1}` || !got.LeaseUntil.IsZero() {
		t.Errorf("job completed after the upgrade = %+v, %v; want completed at attempt 1 with its result and no lease", got, err)
	}
	fresh, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{{Kind: "k", Queue: "up", Args: []byte(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if fresh[0].ID <= ids[len(ids)-1] {
		t.Errorf("a job enqueued after the upgrade got ID %d, not after version 8's last, %d", fresh[0].ID, ids[len(ids)-1])
	}
	counts, err := st.JobCounts(ctx, &store.JobCountsParams{Queue: "up"})
	if err != nil {
		t.Fatal(err)
	}
	by := make(map[store.JobState]int64)
	for _, c := range counts {
		by[c.State] = c.Count
	}
	wantCounts := map[store.JobState]int64{store.JobStateCompleted: 8, store.JobStateRetrying: 1, store.JobStateRunning: 1, store.JobStateAvailable: 1}
	for s, n := range wantCounts {
		if by[s] != n {
			t.Errorf("after the upgrade %d jobs %s, want %d (counts %v)", by[s], s, n, by)
		}
	}
}

// v8Store calls library version 8's functions as a process of version 8
// did.
type v8Store struct {
	t   *testing.T
	s   *Store
	now time.Time
}

func (v *v8Store) enqueue(n int) []int64 {
	v.t.Helper()
	jobs := make([]*store.NewJob, n)
	for i := range jobs {
		jobs[i] = &store.NewJob{Kind: "k", Queue: "up", Args: []byte(`{"v":8}`)}
	}
	if err := store.ValidateJobs(jobs); err != nil {
		v.t.Fatal(err)
	}
	args, err := v.s.batchArgs(jobs, v.now, false)
	if err != nil {
		v.t.Fatal(err)
	}
	reply, err := v.s.fcall(context.Background(), "sortie_enqueue", v.s.k.queue("up")+"h", append([]any{v.s.arg0, "1"}, args...)...)
	if err != nil {
		v.t.Fatal(err)
	}
	batches, _ := reply.([]any)
	if len(batches) != 1 {
		v.t.Fatalf("version 8's sortie_enqueue replied %v", reply)
	}
	res, err := v.s.enqueueResults(jobs, batches[0])
	if err != nil {
		v.t.Fatal(err)
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

func (v *v8Store) fetch(limit int) []store.LeaseRef {
	v.t.Helper()
	g := group(v.s.k.groupOf("up"))
	reply, err := v.s.fcall(context.Background(), "sortie_fetch", v.s.k.queue("up")+"h", v.s.arg0, "up", g, micros(v.now),
		micros(v.now.Add(time.Hour)), "w8", strconv.Itoa(limit))
	if err != nil {
		v.t.Fatal(err)
	}
	list, err := stringList(reply)
	if err != nil || len(list) != 1+2*limit {
		v.t.Fatalf("version 8's sortie_fetch replied %v, %v", reply, err)
	}
	var out []store.LeaseRef
	for i := 1; i < len(list); i += 2 {
		id, err1 := strconv.ParseInt(list[i], 10, 64)
		tok, err2 := strconv.ParseInt(list[i+1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			v.t.Fatal(err)
		}
		out = append(out, store.LeaseRef{ID: id, ClaimToken: tok})
	}
	return out
}

func (v *v8Store) finish(claims []store.LeaseRef, kind store.ReportKind) {
	v.t.Helper()
	args := []any{v.s.arg0, micros(v.now), strconv.Itoa(len(claims))}
	for _, c := range claims {
		args = appendReport(args, &store.Report{ID: c.ID, ClaimToken: c.ClaimToken, Kind: kind}, v.s.k.groupOf("up"), false)
		args = args[:len(args)-1] // version 8's reports have no unstarted field
	}
	reply, err := v.s.fcall(context.Background(), "sortie_finish", v.s.k.jobIn(claims[0].ID, 0), args...)
	if err != nil {
		v.t.Fatal(err)
	}
	states, err := stringList(reply)
	if err != nil || len(states) != len(claims) {
		v.t.Fatalf("version 8's sortie_finish replied %v, %v", reply, err)
	}
	for i, s := range states {
		if s == "" {
			v.t.Fatalf("version 8's sortie_finish refused claim %+v", claims[i])
		}
	}
}
