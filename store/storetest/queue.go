package storetest

import (
	"errors"
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
	{name: "DeleteEmpty", run: testQueueDeleteEmpty},
	{name: "DeleteRefusesJobs", run: testQueueDeleteRefusesJobs},
	{name: "DeleteForgetsRateWindow", run: testQueueDeleteForgetsRateWindow},
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

// queueDelete deletes queue and fails the test on error.
func queueDelete(t testing.TB, st store.Store, queue string) {
	t.Helper()
	if err := st.QueueDelete(t.Context(), &store.QueueDeleteParams{Queue: queue}); err != nil {
		t.Fatalf("QueueDelete(%q) error: %v", queue, err)
	}
}

// queueNames returns the names QueueList lists.
func queueNames(t testing.TB, st store.Store) []string {
	t.Helper()
	rows, err := st.QueueList(t.Context(), &store.QueueListParams{})
	if err != nil {
		t.Fatalf("QueueList error: %v", err)
	}
	names := []string{}
	for _, r := range rows {
		names = append(names, r.Name)
	}
	return names
}

// QueueDelete of a queue with no job forgets its settings and pause: it
// is no longer listed, and QueueGet gives a never-configured queue. A
// queue the store never knew deletes without error. Later use makes it
// anew, with zero settings; other queues are untouched.
func testQueueDeleteEmpty(t *testing.T, e *env) {
	now := at(time.Hour)
	configure(t, e.st, "typo", store.QueueSettings{MaxRunning: 2, MaxDepth: 10}, now)
	pause(t, e.st, "typo", true, now)
	kept := configure(t, e.st, "kept", store.QueueSettings{MaxRunning: 3}, now)
	queueDelete(t, e.st, "typo")
	queueDelete(t, e.st, "never-seen")
	if diff := cmp.Diff([]string{"kept"}, queueNames(t, e.st)); diff != "" {
		t.Errorf("QueueList after QueueDelete(typo) (-want +got):\n%s", diff)
	}
	wantQueue(t, "QueueGet of a deleted queue", &store.QueueRow{Name: "typo"}, queueGet(t, e.st, "typo"))
	wantQueue(t, "QueueGet of another queue", kept, queueGet(t, e.st, "kept"))

	id := enqueueOne(t, e.st, now, newJobIn("job", "typo"))
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: "typo", Limit: 10, Now: now}); len(got) != 1 || got[0] != id {
		t.Errorf("JobFetch of a deleted then used queue = %v, want [%d]: not paused any more", got, id)
	}
	wantQueue(t, "QueueGet of the queue made anew", &store.QueueRow{Name: "typo"}, queueGet(t, e.st, "typo"))
}

// QueueDelete refuses a queue holding jobs, pending or finished, with an
// error wrapping ErrQueueNotEmpty that says how many, and changes nothing;
// once its last job is deleted the queue deletes.
func testQueueDeleteRefusesJobs(t *testing.T, e *env) {
	now := at(time.Hour)
	before := configure(t, e.st, "busy", store.QueueSettings{MaxRunning: 2}, now)
	done := inState(t, e.st, now, store.JobStateCompleted, "busy", "job", "")
	pending := enqueueOne(t, e.st, now, newJobIn("job", "busy"))
	refused := func(what string, jobs int64) {
		t.Helper()
		err := e.st.QueueDelete(t.Context(), &store.QueueDeleteParams{Queue: "busy"})
		if want := store.QueueNotEmptyError("busy", jobs); !errors.Is(err, store.ErrQueueNotEmpty) || err.Error() != want.Error() {
			t.Errorf("QueueDelete of a queue holding %s = %v, want %q", what, err, want)
		}
		wantQueue(t, "QueueGet after a refused QueueDelete", before, queueGet(t, e.st, "busy"))
	}
	refused("a pending and a completed job", 2)
	jobDelete(t, e.st, now, pending)
	refused("a completed job", 1)
	jobDelete(t, e.st, now, done.ID)
	queueDelete(t, e.st, "busy")
	if names := queueNames(t, e.st); len(names) != 0 {
		t.Errorf("QueueList after deleting the last job and the queue = %v, want none", names)
	}
}

// jobDelete deletes job id at now and fails the test on error.
func jobDelete(t testing.TB, st store.Store, now time.Time, id int64) {
	t.Helper()
	if _, err := st.JobDelete(t.Context(), &store.JobDeleteParams{ID: id, Now: now}); err != nil {
		t.Fatalf("JobDelete(%d) error: %v", id, err)
	}
}

// A deleted queue's rate window goes with it: made anew with the same
// limit, it starts a job at once, not after the old window's starts.
func testQueueDeleteForgetsRateWindow(t *testing.T, e *env) {
	now := at(time.Hour)
	limit := store.QueueSettings{RateLimit: 1, RatePeriod: time.Hour}
	configure(t, e.st, "rated", limit, now)
	job := claimID(t, e.st, "rated", enqueueOne(t, e.st, now, newJobIn("job", "rated")), now)
	complete(t, e.st, now, job)
	jobDelete(t, e.st, now, job.ID)
	queueDelete(t, e.st, "rated")
	later := now.Add(time.Minute)
	configure(t, e.st, "rated", limit, later)
	id := enqueueOne(t, e.st, later, newJobIn("job", "rated"))
	if got := fetchIDs(t, e.st, &store.JobFetchParams{Queue: "rated", Limit: 1, Now: later}); len(got) != 1 || got[0] != id {
		t.Errorf("JobFetch of the rate-limited queue made anew = %v, want [%d]: the deleted queue's start must not count", got, id)
	}
}
