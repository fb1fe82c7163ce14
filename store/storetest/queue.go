package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

var queueCases = []testCase{
	{name: "GetNeverConfigured", run: testQueueGetNever},
	{name: "ConfigureRoundTrip", run: testQueueConfigure},
	{name: "ConfigureValidation", run: testQueueConfigureInvalid},
	{name: "PauseResume", run: testQueuePause},
	{name: "ListSorted", run: testQueueList},
}

// configure replaces queue's settings at now and fails the test on error.
func configure(t testing.TB, st store.Store, queue string, s store.QueueSettings, now time.Time) *store.QueueRow {
	t.Helper()
	row, err := st.QueueConfigure(t.Context(), &store.QueueConfigureParams{Queue: queue, Settings: s, Now: now})
	if err != nil {
		t.Fatalf("QueueConfigure(%q, %+v) error: %v", queue, s, err)
	}
	if row == nil {
		t.Fatalf("QueueConfigure(%q) returned nil and no error", queue)
	}
	return row
}

// queueGet returns queue's state.
func queueGet(t testing.TB, st store.Store, queue string) *store.QueueRow {
	t.Helper()
	row, err := st.QueueGet(t.Context(), &store.QueueGetParams{Queue: queue})
	if err != nil {
		t.Fatalf("QueueGet(%q) error: %v", queue, err)
	}
	if row == nil {
		t.Fatalf("QueueGet(%q) returned nil and no error", queue)
	}
	return row
}

// pause pauses or resumes queue at now.
func pause(t testing.TB, st store.Store, queue string, paused bool, now time.Time) *store.QueueRow {
	t.Helper()
	row, err := st.QueuePause(t.Context(), &store.QueuePauseParams{Queue: queue, Paused: paused, Now: now})
	if err != nil {
		t.Fatalf("QueuePause(%q, %v) error: %v", queue, paused, err)
	}
	if row == nil {
		t.Fatalf("QueuePause(%q) returned nil and no error", queue)
	}
	return row
}

// wantQueue fails the test unless a and b are the same queue state.
func wantQueue(t testing.TB, what string, want, got *store.QueueRow) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s: queue state mismatch (-want +got):\n%s", what, diff)
	}
}

// A queue never configured or paused has zero settings and is not paused;
// asking is not an error.
func testQueueGetNever(t *testing.T, e *env) {
	wantQueue(t, "QueueGet of a never-configured queue", &store.QueueRow{Name: "never"}, queueGet(t, e.st, "never"))
	enqueueOne(t, e.st, at(0), newJobIn("job", "has-jobs"))
	wantQueue(t, "QueueGet of a queue with jobs but no settings", &store.QueueRow{Name: "has-jobs"}, queueGet(t, e.st, "has-jobs"))
}

// QueueConfigure replaces the settings (a zero field is no limit, not "keep
// the old value"), stamps UpdatedAt, leaves the pause alone, and returns
// the state QueueGet then returns.
func testQueueConfigure(t *testing.T, e *env) {
	full := store.QueueSettings{
		MaxRunning: 10, RateLimit: 5, RatePeriod: time.Minute,
		PartitionMaxRunning: 2, PartitionRateLimit: 3, PartitionRatePeriod: time.Second,
		MaxDepth: 1000, Overflow: store.OverflowDropOldest,
	}
	now := at(time.Hour)
	got := configure(t, e.st, "q", full, now)
	want := &store.QueueRow{Name: "q", Settings: full, UpdatedAt: now}
	wantQueue(t, "QueueConfigure result", want, got)
	wantQueue(t, "QueueGet after QueueConfigure", want, queueGet(t, e.st, "q"))

	later := now.Add(time.Minute)
	pause(t, e.st, "q", true, later)
	latest := later.Add(time.Minute)
	small := store.QueueSettings{MaxRunning: 1}
	got = configure(t, e.st, "q", small, latest)
	want = &store.QueueRow{Name: "q", Paused: true, Settings: small, UpdatedAt: latest}
	wantQueue(t, "second QueueConfigure (replaces settings, keeps the pause)", want, got)
	wantQueue(t, "QueueGet after the second QueueConfigure", want, queueGet(t, e.st, "q"))
	wantQueue(t, "QueueGet of another queue", &store.QueueRow{Name: "other"}, queueGet(t, e.st, "other"))
}

// QueueConfigure refuses settings no store can apply, and leaves the
// queue's settings as they were.
func testQueueConfigureInvalid(t *testing.T, e *env) {
	now := at(time.Hour)
	valid := store.QueueSettings{MaxRunning: 3}
	before := configure(t, e.st, "q", valid, now)
	for _, tt := range []struct {
		name string
		s    store.QueueSettings
	}{
		{"negative MaxRunning", store.QueueSettings{MaxRunning: -1}},
		{"negative RateLimit", store.QueueSettings{RateLimit: -1, RatePeriod: time.Second}},
		{"negative RatePeriod", store.QueueSettings{RateLimit: 1, RatePeriod: -time.Second}},
		{"negative PartitionMaxRunning", store.QueueSettings{PartitionMaxRunning: -2}},
		{"negative PartitionRateLimit", store.QueueSettings{PartitionRateLimit: -1, PartitionRatePeriod: time.Second}},
		{"negative MaxDepth", store.QueueSettings{MaxDepth: -5}},
		{"RateLimit without RatePeriod", store.QueueSettings{RateLimit: 5}},
		{"PartitionRateLimit without PartitionRatePeriod", store.QueueSettings{PartitionRateLimit: 5}},
		{"unknown Overflow", store.QueueSettings{MaxDepth: 10, Overflow: store.Overflow(99)}},
	} {
		row, err := e.st.QueueConfigure(t.Context(), &store.QueueConfigureParams{Queue: "q", Settings: tt.s, Now: now.Add(time.Minute)})
		if err == nil {
			t.Errorf("QueueConfigure with %s (%+v) = %+v, want an error", tt.name, tt.s, row)
		}
		wantQueue(t, "QueueGet after a refused QueueConfigure ("+tt.name+")", before, queueGet(t, e.st, "q"))
	}
}

// A paused queue takes enqueues but gives no jobs to JobFetch; its running
// jobs go on (heartbeats and outcomes work); other queues are unaffected.
// Resuming signals the queue's watchers, and fetching works again.
func testQueuePause(t *testing.T, e *env) {
	now := at(time.Hour)
	ids := enqueueN(t, e.st, now, 3, "job")
	running := fetchID(t, e.st, now, ids[0])
	other := enqueueOne(t, e.st, now, newJobIn("job", "other"))

	later := now.Add(time.Minute)
	got := pause(t, e.st, defaultQueue, true, later)
	wantQueue(t, "QueuePause(true) result", &store.QueueRow{Name: defaultQueue, Paused: true, UpdatedAt: later}, got)
	wantQueue(t, "QueueGet of a paused queue", got, queueGet(t, e.st, defaultQueue))

	res := enqueue(t, e.st, later, newJob("job"))
	if res[0].Duplicate || res[0].State != store.JobStateAvailable {
		t.Fatalf("enqueue into a paused queue = %+v, want a new available job", res[0])
	}
	fetchNone(t, e.st, later)
	fetchNone(t, e.st, later.Add(24*time.Hour))
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: "other", Limit: 10, Now: later}); len(got) != 1 || got[0] != other {
		t.Errorf("JobFetch(queue other) while queue %q is paused = %v, want [%d]", defaultQueue, got, other)
	}
	if held := extend(t, e.st, later, lease, ref(running)); !held[0] {
		t.Errorf("LeaseExtend of running job %d in a paused queue = false, want true", running.ID)
	}
	complete(t, e.st, later, running)

	w, watching := watch(t, e.st, defaultQueue)
	if watching {
		drain(t, w)
	}
	resumed := later.Add(time.Minute)
	got = pause(t, e.st, defaultQueue, false, resumed)
	wantQueue(t, "QueuePause(false) result", &store.QueueRow{Name: defaultQueue, UpdatedAt: resumed}, got)
	if watching {
		waitSignal(t, w, "QueuePause(false)")
	}
	want := []int64{ids[1], ids[2], res[0].ID}
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Limit: 10, Now: resumed}); cmp.Diff(want, got) != "" {
		t.Errorf("JobFetch after resume = %v, want %v", got, want)
	}
}

// QueueList lists every queue that has jobs (in any state), settings or a
// pause, by name, with its state; asking about a queue does not create it.
func testQueueList(t *testing.T, e *env) {
	now := at(time.Hour)
	queueGet(t, e.st, "a-asked-only")
	inState(t, e.st, now, store.JobStateCompleted, "e-finished", "job", "")
	enqueueOne(t, e.st, now, newJobIn("job", "b-jobs"))
	set := store.QueueSettings{MaxRunning: 4}
	configure(t, e.st, "d-settings", set, now)
	pause(t, e.st, "c-paused", true, now)
	rows, err := e.st.QueueList(t.Context(), &store.QueueListParams{})
	if err != nil {
		t.Fatalf("QueueList error: %v", err)
	}
	want := []*store.QueueRow{
		{Name: "b-jobs"},
		{Name: "c-paused", Paused: true, UpdatedAt: now},
		{Name: "d-settings", Settings: set, UpdatedAt: now},
		{Name: "e-finished"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("QueueList mismatch (-want +got):\n%s", diff)
	}
}
