package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// openCluster opens a store on the test cluster with the default key
// groups (a queue's name up to its first ':').
func openCluster(t *testing.T) *redisstore.Store {
	t.Helper()
	prefix := redistest.ClusterPrefix(t)
	st, err := redisstore.Open(t.Context(), clusterURL(t), &redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatalf("Open(cluster) error: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// On a cluster, queues of different key groups live on different slots
// (and, with enough queues, on every primary); each works on its own, and
// listings and counts see them all.
func TestClusterQueuesSpreadOverPrimaries(t *testing.T) {
	t.Parallel()
	st := openCluster(t)
	ctx := t.Context()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	queues := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"}
	nodes := map[string]bool{}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.ClusterAddrs(t)})
	defer c.Close()
	for _, q := range queues {
		res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{{Kind: "k", Queue: q, Args: []byte(`{}`)}}})
		if err != nil {
			t.Fatalf("enqueue into %q: %v", q, err)
		}
		node, err := c.MasterForKey(ctx, jobKeyOf(st, res[0].ID))
		if err != nil {
			t.Fatalf("MasterForKey: %v", err)
		}
		nodes[node.Options().Addr] = true
	}
	if len(nodes) < 2 {
		t.Errorf("the jobs of %d queues of different groups live on %d primary, want them spread", len(queues), len(nodes))
	}
	for _, q := range queues {
		r, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: q, Limit: 5, Now: now, Lease: time.Minute, Worker: "w"})
		if err != nil || len(r.Jobs) != 1 {
			t.Fatalf("fetch %q = %v, %v; want 1 job", q, r, err)
		}
		j := r.Jobs[0]
		out, err := st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: []*store.Report{{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted}}})
		if err != nil || !out[0].Applied {
			t.Fatalf("finish %d: %v, %v", j.ID, out, err)
		}
	}
	counts, err := st.JobCounts(ctx, &store.JobCountsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != len(queues) {
		t.Errorf("JobCounts = %v, want one completed job in each of %d queues", counts, len(queues))
	}
	rows, err := st.JobList(ctx, &store.JobListParams{State: store.JobStateCompleted, Limit: 100})
	if err != nil || len(rows) != len(queues) {
		t.Errorf("JobList(completed) = %d rows, %v; want %d", len(rows), err, len(queues))
	}
}

// jobKeyOf returns the key of job id's hash, to find its node.
func jobKeyOf(st *redisstore.Store, id int64) string {
	return redisstore.JobKey(st, id)
}

// What spans key groups is refused on a cluster, with ErrCrossGroup and
// nothing enqueued: a batch over two groups, a dependency on a job of
// another group. Queues sharing the part before ':' share a group, so the
// same batch across them is atomic.
func TestClusterCrossGroupRefused(t *testing.T) {
	t.Parallel()
	st := openCluster(t)
	ctx := t.Context()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := func(q string) *store.NewJob { return &store.NewJob{Kind: "k", Queue: q, Args: []byte(`{}`)} }

	_, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{job("mail:high"), job("billing")}})
	if !errors.Is(err, redisstore.ErrCrossGroup) {
		t.Fatalf("batch over two groups: error %v, want ErrCrossGroup", err)
	}
	res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Workflow: true,
		Jobs: []*store.NewJob{job("mail:high"), {Kind: "k", Queue: "mail:low", Args: []byte(`{}`), DependsOnIndex: []int{0}}}})
	if err != nil {
		t.Fatalf("workflow over mail:high and mail:low (one group): %v", err)
	}
	d := job("billing")
	d.DependsOn = []int64{res[0].ID}
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{d}}); !errors.Is(err, redisstore.ErrCrossGroup) {
		t.Fatalf("dependency on another group's job: error %v, want ErrCrossGroup", err)
	}
	counts, err := st.JobCounts(ctx, &store.JobCountsParams{})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, c := range counts {
		total += c.Count
	}
	if total != 2 {
		t.Errorf("jobs in the store = %d (%v), want the workflow's 2: refused batches enqueue nothing", total, counts)
	}
}

// On a cluster a unique key is unique within its key group: the same key
// in two groups enqueues twice, in one group once.
func TestClusterUniqueKeysPerGroup(t *testing.T) {
	t.Parallel()
	st := openCluster(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	enq := func(q string) store.EnqueueResult {
		t.Helper()
		res, err := st.JobEnqueueMany(context.Background(), &store.JobEnqueueManyParams{Now: now,
			Jobs: []*store.NewJob{{Kind: "k", Queue: q, Args: []byte(`{}`), UniqueKey: "report-42"}}})
		if err != nil {
			t.Fatalf("enqueue into %q: %v", q, err)
		}
		return res[0]
	}
	a := enq("mail:high")
	if b := enq("mail:low"); !b.Duplicate || b.ID != a.ID {
		t.Errorf("same key, same group: %+v, want a duplicate of %d", b, a.ID)
	}
	if c := enq("billing"); c.Duplicate {
		t.Errorf("same key, another group: %+v, want a new job (keys are per group on a cluster)", c)
	}
}

// On a cluster JobActMany splits a batch over several key groups into one
// call per group, and still answers per ID in the batch's order: dead
// jobs of queues on different slots, listed alternately with an unknown
// ID among them, are all retried, then all deleted.
func TestClusterActManyAcrossGroups(t *testing.T) {
	t.Parallel()
	st := openCluster(t)
	ctx := t.Context()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	queues := []string{"alpha", "bravo", "charlie", "delta"}
	var ids []int64
	for round := range 3 {
		for _, q := range queues {
			res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{{Kind: "k", Queue: q, Args: []byte(`{}`), MaxAttempts: 1}}})
			if err != nil {
				t.Fatalf("enqueue into %q: %v", q, err)
			}
			r, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: q, Limit: 1, Now: now, Lease: time.Minute, Worker: "w"})
			if err != nil || len(r.Jobs) != 1 {
				t.Fatalf("fetch %q = %v, %v; want 1 job", q, r, err)
			}
			j := r.Jobs[0]
			out, err := st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: []*store.Report{{ID: j.ID, ClaimToken: j.ClaimToken,
				Kind: store.ReportFailed, Error: &store.AttemptError{Attempt: 1, At: now, Message: "boom"}}}})
			if err != nil || out[0].State != store.JobStateDead {
				t.Fatalf("finish %d: %v, %v; want dead", j.ID, out, err)
			}
			ids = append(ids, res[0].ID)
		}
		if round == 1 {
			ids = append(ids, 1<<40)
		}
	}
	unknown := len(queues) * 2
	for _, action := range []store.JobAction{store.ActionRetry, store.ActionDelete} {
		res, err := st.JobActMany(ctx, &store.JobActManyParams{Action: action, IDs: ids, Now: now})
		if err != nil || len(res) != len(ids) {
			t.Fatalf("JobActMany(%s, %d IDs over %d groups) = %d results, %v; want %d", action, len(ids), len(queues), len(res), err, len(ids))
		}
		for i, r := range res {
			if i == unknown {
				if !errors.Is(r.Err, store.ErrNotFound) {
					t.Errorf("JobActMany(%s) of unknown job %d: %v, want ErrNotFound", action, ids[i], r.Err)
				}
			} else if r.Err != nil {
				t.Errorf("JobActMany(%s) of job %d: %v, want nil", action, ids[i], r.Err)
			}
		}
		counts, err := st.JobCounts(ctx, &store.JobCountsParams{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range counts {
			if action == store.ActionDelete || c.State != store.JobStateAvailable || c.Count != 3 {
				t.Errorf("after JobActMany(%s): JobCounts has %+v, want only 3 available jobs per queue after the retry, none after the delete", action, c)
			}
		}
		if action == store.ActionRetry && len(counts) != len(queues) {
			t.Errorf("after JobActMany(retry): JobCounts = %v, want 3 available jobs in each of %d queues", counts, len(queues))
		}
	}
}

// A spawn's children must share their parent's key group on a cluster: a
// spawn into another group is refused with ErrCrossGroup and enqueues
// nothing; one into the parent's group (another queue of it) runs, and
// the last child's outcome releases the awaiting parent, on one slot.
func TestClusterSpawnGroups(t *testing.T) {
	t.Parallel()
	st := openCluster(t)
	ctx := t.Context()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now,
		Jobs: []*store.NewJob{{Kind: "order", Queue: "shop:orders", Args: []byte(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	fetched, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "shop:orders", Limit: 1, Now: now, Lease: time.Minute})
	if err != nil || len(fetched.Jobs) != 1 {
		t.Fatalf("JobFetch(shop:orders) = %v, %v; want the parent", fetched, err)
	}
	parent := fetched.Jobs[0]
	spawn := func(queue string) (*store.StepResult, error) {
		return st.StepSpawn(ctx, &store.StepSpawnParams{ID: parent.ID, ClaimToken: parent.ClaimToken, Name: "kids-" + queue,
			Jobs: []*store.NewJob{{Kind: "kid", Queue: queue, Args: []byte(`{}`)}}, Now: now})
	}
	if _, err := spawn("billing"); !errors.Is(err, redisstore.ErrCrossGroup) {
		t.Fatalf("StepSpawn into group billing: error %v, want ErrCrossGroup", err)
	}
	if steps, err := st.StepList(ctx, &store.StepListParams{ID: parent.ID}); err != nil || len(steps) != 0 {
		t.Fatalf("StepList after the refused spawn = %v, %v; want no step", steps, err)
	}
	sp, err := spawn("shop:mail")
	if err != nil || len(sp.Children) != 1 {
		t.Fatalf("StepSpawn into shop:mail = %+v, %v; want one child", sp, err)
	}
	aw, err := st.StepAwait(ctx, &store.StepAwaitParams{ID: parent.ID, ClaimToken: parent.ClaimToken, Name: "kids-shop:mail", Now: now})
	if err != nil || !aw.Suspended {
		t.Fatalf("StepAwait = %+v, %v; want Suspended", aw, err)
	}
	kid, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "shop:mail", Limit: 1, Now: now, Lease: time.Minute})
	if err != nil || len(kid.Jobs) != 1 {
		t.Fatalf("JobFetch(shop:mail) = %v, %v; want the child", kid, err)
	}
	if _, err := st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: []*store.Report{
		{ID: kid.Jobs[0].ID, ClaimToken: kid.Jobs[0].ClaimToken, Kind: store.ReportCompleted}}}); err != nil {
		t.Fatal(err)
	}
	got, err := st.JobGet(ctx, &store.JobGetParams{ID: res[0].ID})
	if err != nil || got.State != store.JobStateAvailable || got.WaitsFor != "" {
		t.Fatalf("parent after its child completed = %+v, %v; want available, waiting for nothing", got, err)
	}
}
