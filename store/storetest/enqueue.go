package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sortiehq/sortie/store"
)

var enqueueCases = []testCase{
	{name: "ResultsInOrder", run: testEnqueueResultsInOrder},
	{name: "RoundTrip", run: testEnqueueRoundTrip},
	{name: "BatchAtomic", run: testEnqueueBatchAtomic},
	{name: "FailedBatchInsertsNothing", run: testEnqueueFailedBatch},
	{name: "EmptyQueueNeverStored", run: testEnqueueEmptyQueue},
	{name: "FieldRanges", run: testEnqueueFieldRanges},
}

// Every field is stored exactly as given at the edges of its range, zero
// Priority and MaxAttempts become their defaults, and a value outside its
// range fails the batch with a *store.FieldError naming the field: never
// stored wrapped or truncated (a MaxAttempts of 2^31 once became
// -2^31 in a 32-bit column and the job died after one failure).
func testEnqueueFieldRanges(t *testing.T, e *env) {
	now := at(3 * time.Hour)
	low, high := newJob("edge"), newJob("edge")
	low.Priority, low.MaxAttempts, low.RunAt = store.PriorityHighest, 1, store.EarliestRunAt
	high.Priority, high.MaxAttempts, high.RunAt, high.Timeout = store.PriorityLowest, store.MaxAttemptsLimit, store.LatestRunAt, store.MaxTimeout
	high.UniqueKey, high.PartitionKey = strings.Repeat("u", store.MaxUniqueKeyLen), strings.Repeat("p", store.MaxPartitionKeyLen)
	for i := range store.MaxTags {
		high.Tags = append(high.Tags, fmt.Sprintf("%0*d", store.MaxTagLen, i))
	}
	zero := &store.NewJob{Kind: "edge", Queue: defaultQueue}
	res := enqueue(t, e.st, now, low, high, zero)
	for i, want := range []*store.NewJob{low, high, {Priority: store.PriorityDefault, MaxAttempts: store.MaxAttemptsDefault, RunAt: now}} {
		got := get(t, e.st, res[i].ID)
		if got.Priority != want.Priority || got.MaxAttempts != want.MaxAttempts || !got.RunAt.Equal(want.RunAt) || got.Timeout != want.Timeout ||
			got.UniqueKey != want.UniqueKey || got.PartitionKey != want.PartitionKey || len(got.Tags) != len(want.Tags) {
			t.Errorf("job %d: priority %d, max attempts %d, run at %s, timeout %s, unique key %d bytes, partition key %d bytes, %d tags; want %d, %d, %s, %s, %d, %d, %d",
				i, got.Priority, got.MaxAttempts, got.RunAt, got.Timeout, len(got.UniqueKey), len(got.PartitionKey), len(got.Tags),
				want.Priority, want.MaxAttempts, want.RunAt, want.Timeout, len(want.UniqueKey), len(want.PartitionKey), len(want.Tags))
		}
	}
	for _, tt := range []struct {
		name, field string
		edit        func(j *store.NewJob)
	}{
		{"priority below", "priority", func(j *store.NewJob) { j.Priority = -1 }},
		{"priority above", "priority", func(j *store.NewJob) { j.Priority = store.PriorityLowest + 1 }},
		{"max attempts negative", "max_attempts", func(j *store.NewJob) { j.MaxAttempts = -1 }},
		{"max attempts above", "max_attempts", func(j *store.NewJob) { j.MaxAttempts = store.MaxAttemptsLimit + 1 }},
		{"max attempts 2^31", "max_attempts", func(j *store.NewJob) { j.MaxAttempts = 1 << 31 }},
		{"max attempts 2^62", "max_attempts", func(j *store.NewJob) { j.MaxAttempts = 1 << 62 }},
		{"run at before", "run_at", func(j *store.NewJob) { j.RunAt = store.EarliestRunAt.Add(-time.Second) }},
		{"run at after", "run_at", func(j *store.NewJob) { j.RunAt = store.LatestRunAt.Add(time.Second) }},
		{"timeout negative", "timeout", func(j *store.NewJob) { j.Timeout = -time.Second }},
		{"timeout above", "timeout", func(j *store.NewJob) { j.Timeout = store.MaxTimeout + time.Second }},
		{"unique key long", "unique_key", func(j *store.NewJob) { j.UniqueKey = strings.Repeat("u", store.MaxUniqueKeyLen+1) }},
		{"partition key long", "partition_key", func(j *store.NewJob) { j.PartitionKey = strings.Repeat("p", store.MaxPartitionKeyLen+1) }},
		{"too many tags", "tags", func(j *store.NewJob) { j.Tags = make([]string, store.MaxTags+1) }},
		{"kind not UTF-8", "kind", func(j *store.NewJob) { j.Kind = "k\xff" }},
		{"queue not UTF-8", "queue", func(j *store.NewJob) { j.Queue = "q\xc3" }},
		{"queue name with a slash", "queue", func(j *store.NewJob) { j.Queue = "a/b" }},
		{"queue name long", "queue", func(j *store.NewJob) { j.Queue = strings.Repeat("q", store.MaxNameLen+1) }},
		{"kind with a space", "kind", func(j *store.NewJob) { j.Kind = "has space" }},
		{"kind long", "kind", func(j *store.NewJob) { j.Kind = strings.Repeat("k", store.MaxNameLen+1) }},
		{"dependency not an ID", "depends_on", func(j *store.NewJob) { j.DependsOn = []int64{0} }},
	} {
		bad := newJob("edge")
		tt.edit(bad)
		_, err := e.st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Jobs: []*store.NewJob{newJob("edge"), bad}, Now: now})
		var fe *store.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field || !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: JobEnqueueMany() = %v, want a *store.FieldError for %s wrapping ErrInvalidArgument", tt.name, err, tt.field)
		}
	}
	if n := len(listAll(t, e.st, store.JobListParams{})); n != 3 {
		t.Errorf("%d jobs stored after the refused batches, want the 3 valid ones", n)
	}
}

// A job is available when its RunAt is zero or not after Now, scheduled
// otherwise; zero RunAt is stored as Now; results come in order; IDs
// increase in batch order and across calls.
func testEnqueueResultsInOrder(t *testing.T, e *env) {
	now := at(time.Hour)
	runAts := []time.Time{{}, now.Add(-time.Minute), now, now.Add(time.Microsecond), now.Add(time.Hour)}
	wantRunAt := []time.Time{now, now.Add(-time.Minute), now, now.Add(time.Microsecond), now.Add(time.Hour)}
	wantState := []store.JobState{store.JobStateAvailable, store.JobStateAvailable, store.JobStateAvailable, store.JobStateScheduled, store.JobStateScheduled}
	jobs := make([]*store.NewJob, len(runAts))
	for i, ra := range runAts {
		jobs[i] = newJob("order")
		jobs[i].RunAt = ra
	}
	res := enqueue(t, e.st, now, jobs...)
	var prev int64
	for i, r := range res {
		if r.Duplicate {
			t.Errorf("result %d: Duplicate = true, want false", i)
		}
		if r.ID <= prev {
			t.Errorf("result %d: ID = %d, want > %d (IDs are positive and increase in batch order)", i, r.ID, prev)
		}
		prev = r.ID
		if r.State != wantState[i] {
			t.Errorf("result %d (RunAt %v, Now %v): State = %q, want %q", i, runAts[i], now, r.State, wantState[i])
		}
		row := get(t, e.st, r.ID)
		if row.State != wantState[i] {
			t.Errorf("job %d: stored State = %q, want %q", r.ID, row.State, wantState[i])
		}
		if !row.RunAt.Equal(wantRunAt[i]) {
			t.Errorf("job %d (enqueued with RunAt %v): RunAt = %v, want %v", r.ID, runAts[i], row.RunAt, wantRunAt[i])
		}
		if !row.CreatedAt.Equal(now) {
			t.Errorf("job %d: CreatedAt = %v, want Now %v", r.ID, row.CreatedAt, now)
		}
	}
	// A later call gets higher IDs still.
	later := enqueue(t, e.st, now, newJob("order"), newJob("order"))
	if later[0].ID <= prev || later[1].ID <= later[0].ID {
		t.Errorf("second enqueue IDs = %d, %d, want increasing after %d", later[0].ID, later[1].ID, prev)
	}
}

// Every field of NewJob round-trips through JobGet, and the fields a store
// sets at enqueue have their documented values.
func testEnqueueRoundTrip(t *testing.T, e *env) {
	now := at(2 * time.Hour)
	full := &store.NewJob{
		Kind:        "email.send",
		Queue:       "mail",
		Args:        []byte(`{"to":"ana@example.com","n":[1,2,3],"s":"héllo \"quoted\" \\ ✓"}`),
		Priority:    store.PriorityLowest,
		MaxAttempts: 7,
		RunAt:       now.Add(90*time.Minute + 123456*time.Microsecond),
		UniqueKey:   "email:ana@example.com",
		Tags:        []string{"billing", "tenant:42", "ünïcode"},
		Meta:        []byte(`{"trace":"abc123","depth":2}`),
		Timeout:     90*time.Second + 250*time.Millisecond,
	}
	minimal := &store.NewJob{
		Kind:        "noop",
		Queue:       defaultQueue,
		Args:        []byte(`{}`),
		Priority:    store.PriorityHighest,
		MaxAttempts: 1,
	}
	res := enqueue(t, e.st, now, full, minimal)
	want := []*store.JobRow{
		{
			ID:          res[0].ID,
			Kind:        full.Kind,
			Queue:       full.Queue,
			Args:        full.Args,
			State:       store.JobStateScheduled,
			Priority:    full.Priority,
			MaxAttempts: full.MaxAttempts,
			RunAt:       full.RunAt,
			CreatedAt:   now,
			UniqueKey:   full.UniqueKey,
			Tags:        full.Tags,
			Meta:        full.Meta,
			Timeout:     full.Timeout,
		},
		{
			ID:          res[1].ID,
			Kind:        minimal.Kind,
			Queue:       minimal.Queue,
			Args:        minimal.Args,
			State:       store.JobStateAvailable,
			Priority:    minimal.Priority,
			MaxAttempts: minimal.MaxAttempts,
			RunAt:       now,
			CreatedAt:   now,
		},
	}
	// The ClaimToken of a job never claimed is not part of the contract.
	ignoreToken := cmpopts.IgnoreFields(store.JobRow{}, "ClaimToken")
	for _, w := range want {
		got := get(t, e.st, w.ID)
		if diff := cmp.Diff(w, got, rowOpts, ignoreToken); diff != "" {
			t.Errorf("JobGet(%d) after enqueue mismatch (-want +got):\n%s", w.ID, diff)
		}
		listed := list(t, e.st, store.JobListParams{Queue: w.Queue, Limit: 10})
		if len(listed) != 1 {
			t.Fatalf("JobList(queue %q) returned %d jobs, want 1", w.Queue, len(listed))
		}
		if diff := cmp.Diff(w, listed[0], rowOpts, ignoreToken); diff != "" {
			t.Errorf("JobList(queue %q) row mismatch (-want +got):\n%s", w.Queue, diff)
		}
	}
}

// A batch is atomic: a reader running alongside never sees part of it.
func testEnqueueBatchAtomic(t *testing.T, e *env) {
	const n = 1000
	const queue = "batch"
	jobs := make([]*store.NewJob, n)
	for i := range jobs {
		jobs[i] = newJob("bulk")
		jobs[i].Queue = queue
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		final := false
		for {
			select {
			case <-done:
				final = true
			default:
			}
			cs, err := e.st.JobCounts(t.Context(), &store.JobCountsParams{Queue: queue})
			if err != nil {
				t.Errorf("JobCounts during batch enqueue error: %v", err)
				return
			}
			var total int64
			for _, c := range cs {
				total += c.Count
			}
			if total != 0 && total != n {
				t.Errorf("JobCounts during a %d-job batch enqueue saw %d jobs, want 0 or %d", n, total, n)
				return
			}
			rows, err := e.st.JobList(t.Context(), &store.JobListParams{Queue: queue, Limit: n})
			if err != nil {
				t.Errorf("JobList during batch enqueue error: %v", err)
				return
			}
			if len(rows) != 0 && len(rows) != n {
				t.Errorf("JobList during a %d-job batch enqueue saw %d jobs, want 0 or %d", n, len(rows), n)
				return
			}
			if total == n || final {
				return
			}
		}
	}()
	stop := sync.OnceFunc(func() {
		close(done)
		wg.Wait()
	})
	defer stop() // also when enqueue fails the test
	res := enqueue(t, e.st, at(0), jobs...)
	stop()
	for i := 1; i < n; i++ {
		if res[i].ID <= res[i-1].ID {
			t.Fatalf("result %d: ID %d not after result %d's ID %d", i, res[i].ID, i-1, res[i-1].ID)
		}
	}
	got := listIDs(t, e.st, store.JobListParams{Queue: queue})
	want := make([]int64, n)
	for i, r := range res {
		want[i] = r.ID
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JobList(queue %q) after a %d-job batch mismatch (-want +got):\n%s", queue, n, diff)
	}
	wantCounts(t, e.st, queue, map[countKey]int64{{queue, store.JobStateAvailable}: n})
}

// A batch that fails (here: a job with an empty Kind, which a store never
// stores) inserts none of its jobs.
func testEnqueueFailedBatch(t *testing.T, e *env) {
	first := enqueueOne(t, e.st, at(0), newJob("ok"))
	bad := newJob("")
	_, err := e.st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{
		Jobs: []*store.NewJob{newJob("ok"), newJob("ok"), bad},
		Now:  at(0),
	})
	if err == nil {
		t.Fatal("JobEnqueueMany with a job of empty Kind returned no error, want one (a store never stores a job with an empty Kind)")
	}
	if got := listIDs(t, e.st, store.JobListParams{}); len(got) != 1 || got[0] != first {
		t.Fatalf("after a failed batch, JobList = %v, want only the earlier job [%d]", got, first)
	}
	wantCounts(t, e.st, "", map[countKey]int64{{defaultQueue, store.JobStateAvailable}: 1})
	// The store still works and IDs still increase.
	if next := enqueueOne(t, e.st, at(0), newJob("ok")); next <= first {
		t.Errorf("enqueue after a failed batch: ID = %d, want > %d", next, first)
	}
}

// A store never stores a job with an empty Queue: it either refuses the
// job or puts it in a named queue.
func testEnqueueEmptyQueue(t *testing.T, e *env) {
	j := newJob("noqueue")
	j.Queue = ""
	res, err := e.st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Jobs: []*store.NewJob{j}, Now: at(0)})
	if err != nil {
		if n := len(listIDs(t, e.st, store.JobListParams{})); n != 0 {
			t.Errorf("JobEnqueueMany failed (%v) but %d jobs were stored, want 0", err, n)
		}
		return
	}
	if len(res) != 1 {
		t.Fatalf("JobEnqueueMany(1 job) returned %d results, want 1", len(res))
	}
	if row := get(t, e.st, res[0].ID); row.Queue == "" {
		t.Errorf("job %d enqueued with an empty Queue was stored with Queue %q, want a non-empty queue (or an error)", row.ID, row.Queue)
	}
}
