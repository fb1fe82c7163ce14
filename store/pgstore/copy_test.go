package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// A large batch goes through COPY, a small one through the one-statement
// insert: both must store every field alike.
func TestCopyBatchStoresWhatInsertStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t, pgtest.URL(t), &pgstore.Options{Schema: pgtest.Schema(t), Migrate: true, MaxConns: 2})
	now := time.Date(2026, 11, 22, 3, 0, 0, 123456000, time.UTC)
	job := func(i int) *store.NewJob {
		j := &store.NewJob{Kind: "k", Queue: fmt.Sprintf("q%d", i%3), Args: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Priority: 1 + i%4, MaxAttempts: 3 + i%5, Timeout: time.Duration(i) * time.Second}
		switch i % 4 {
		case 0:
			j.Tags, j.Meta, j.PartitionKey = []string{"a", "b"}, []byte(`{"m":1}`), "tenant"
		case 1:
			j.RunAt = now.Add(time.Hour)
			j.Args = []byte{}
		case 2:
			j.RunAt = now.Add(-time.Minute)
			j.Args = nil
			j.Tags = []string{}
		}
		return j
	}
	enqueue := func(n int) []*store.JobRow {
		jobs := make([]*store.NewJob, n)
		for i := range jobs {
			jobs[i] = job(i)
		}
		res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now})
		if err != nil {
			t.Fatalf("JobEnqueueMany(%d jobs): %v", n, err)
		}
		var rows []*store.JobRow
		for i, r := range res {
			if i > 0 && r.ID <= res[i-1].ID {
				t.Fatalf("IDs not increasing in batch order: %d then %d", res[i-1].ID, r.ID)
			}
			row, err := st.JobGet(ctx, &store.JobGetParams{ID: r.ID})
			if err != nil {
				t.Fatal(err)
			}
			if row.State != r.State {
				t.Fatalf("job %d: state %s, result said %s", r.ID, row.State, r.State)
			}
			rows = append(rows, row)
		}
		return rows
	}
	small, large := enqueue(8), enqueue(200)
	ignore := cmpopts.IgnoreFields(store.JobRow{}, "ID")
	for i := range small {
		if diff := cmp.Diff(small[i], large[i], ignore); diff != "" {
			t.Errorf("job %d stored differently by COPY (-insert +copy):\n%s", i, diff)
		}
	}
}

// Jobs inserted by COPY are counted, per queue and state, in the same
// transaction as the COPY.
func TestCopyBatchIsCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t, pgtest.URL(t), &pgstore.Options{Schema: pgtest.Schema(t), Migrate: true, MaxConns: 2})
	now := time.Now()
	jobs := make([]*store.NewJob, 300) // well above the COPY threshold
	for i := range jobs {
		jobs[i] = &store.NewJob{Kind: "k", Queue: fmt.Sprintf("q%d", i%2), Priority: 2, MaxAttempts: 3}
		if i%3 == 0 {
			jobs[i].RunAt = now.Add(time.Hour)
		}
	}
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for i, j := range jobs {
		state := "available"
		if i%3 == 0 {
			state = "scheduled"
		}
		want[j.Queue+"/"+state]++
	}
	for _, q := range []string{"q0", "q1"} {
		counts, err := st.JobCounts(ctx, &store.JobCountsParams{Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range counts {
			if c.Count == 0 {
				continue
			}
			k := c.Queue + "/" + string(c.State)
			if c.Count != want[k] {
				t.Errorf("count of %s = %d, want %d", k, c.Count, want[k])
			}
			delete(want, k)
		}
	}
	for k, n := range want {
		t.Errorf("count of %s missing, want %d", k, n)
	}
}

// A COPY batch that fails inserts none of its jobs, and leaves the pool
// usable (a connection given back mid-transaction is closed, not reused):
// with a pool of one connection, the next batch goes through. The first
// batch fails inside the COPY (PostgreSQL refuses a NUL byte in text), the
// second before it (a cancelled context).
func TestCopyBatchFailureLeavesConnectionClean(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t, pgtest.URL(t), &pgstore.Options{Schema: pgtest.Schema(t), Migrate: true, MaxConns: 1, DisableListen: true})
	batch := func(bad string) []*store.NewJob {
		jobs := make([]*store.NewJob, 100) // above the COPY threshold
		for i := range jobs {
			jobs[i] = &store.NewJob{Kind: "k", Queue: "q", Priority: 2, MaxAttempts: 3}
		}
		if bad != "" {
			jobs[50].Kind = bad
		}
		return jobs
	}
	now := time.Now()
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: batch("nul\x00kind"), Now: now}); err == nil {
		t.Fatal("JobEnqueueMany() with a NUL byte in a kind = nil error, want one")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := st.JobEnqueueMany(cancelled, &store.JobEnqueueManyParams{Jobs: batch(""), Now: now}); err == nil {
		t.Fatal("JobEnqueueMany() with a cancelled context = nil error, want one")
	}
	res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: batch(""), Now: now})
	if err != nil {
		t.Fatalf("JobEnqueueMany() after failed batches = %v, want the batch enqueued", err)
	}
	if len(res) != 100 {
		t.Fatalf("JobEnqueueMany() returned %d results, want 100", len(res))
	}
	counts, err := st.JobCounts(ctx, &store.JobCountsParams{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, c := range counts {
		total += c.Count
	}
	if total != 100 {
		t.Fatalf("queue q holds %d jobs after one good and two failed batches, want 100", total)
	}
	jobs, err := st.JobList(ctx, &store.JobListParams{Queue: "q", Limit: 1000})
	if err != nil || len(jobs) != 100 {
		t.Fatalf("JobList() = %d jobs, %v; want the 100 of the good batch", len(jobs), err)
	}
}
