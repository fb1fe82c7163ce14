package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func TestStartState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		runAt time.Time
		state JobState
		at    time.Time
	}{
		{"zero is now", time.Time{}, JobStateAvailable, t0},
		{"past stays", t0.Add(-time.Hour), JobStateAvailable, t0.Add(-time.Hour)},
		{"now is available", t0, JobStateAvailable, t0},
		{"later is scheduled", t0.Add(time.Second), JobStateScheduled, t0.Add(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, at := StartState(tt.runAt, t0)
			if st != tt.state || !at.Equal(tt.at) {
				t.Errorf("StartState(%v) = %s, %v; want %s, %v", tt.runAt, st, at, tt.state, tt.at)
			}
		})
	}
}

func TestBatchDuplicates(t *testing.T) {
	t.Parallel()
	jobs := []*NewJob{{UniqueKey: "a"}, {UniqueKey: "b"}, {UniqueKey: "a"}, {}, {UniqueKey: "b"}}
	res := make([]EnqueueResult, len(jobs))
	if !MarkBatchDuplicates(jobs, res) {
		t.Fatal("MarkBatchDuplicates() = false, want true for a batch with keys")
	}
	// Job 1 duplicates a pending holder (ID 7); the others are new.
	res[0] = EnqueueResult{ID: 10, State: JobStateAvailable}
	res[1] = EnqueueResult{ID: 7, Duplicate: true, State: JobStateRunning}
	res[3] = EnqueueResult{ID: 11, State: JobStateScheduled}
	ResolveBatchDuplicates(res)
	want := []EnqueueResult{
		{ID: 10, State: JobStateAvailable},
		{ID: 7, Duplicate: true, State: JobStateRunning},
		{ID: 10, Duplicate: true, State: JobStateAvailable},
		{ID: 11, State: JobStateScheduled},
		{ID: 7, Duplicate: true, State: JobStateRunning},
	}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("results mismatch (-want +got):\n%s", diff)
	}
	if MarkBatchDuplicates([]*NewJob{{}, {}}, make([]EnqueueResult, 2)) {
		t.Error("MarkBatchDuplicates() = true for a batch without keys, want false")
	}
}

func TestDependencyIDs(t *testing.T) {
	t.Parallel()
	j := &NewJob{DependsOn: []int64{5, 3, 5}, DependsOnIndex: []int{0, 1}}
	res := []EnqueueResult{{ID: 3, Duplicate: true}, {ID: 9}}
	if got, want := DependencyIDs(j, res), []int64{5, 3, 9}; !cmp.Equal(got, want) {
		t.Errorf("DependencyIDs() = %v, want %v", got, want)
	}
}

func TestJudgeDeps(t *testing.T) {
	t.Parallel()
	deps := []int64{1, 2}
	tests := []struct {
		name   string
		ignore bool
		states []JobState
		want   DepsVerdict
	}{
		{"all completed", false, []JobState{JobStateCompleted, JobStateCompleted}, DepsVerdict{State: JobStateScheduled}},
		{"one pending", false, []JobState{JobStateCompleted, JobStateRunning}, DepsVerdict{State: JobStateWaiting}},
		{"failed wins over pending", false, []JobState{JobStateRunning, JobStateDead},
			DepsVerdict{State: JobStateCancelled, CancelledBy: 2, Message: "dependency job 2 ended dead"}},
		{"ignored failure", true, []JobState{JobStateCancelled, JobStateCompleted}, DepsVerdict{State: JobStateScheduled}},
		{"ignored failure still waits", true, []JobState{JobStateCancelled, JobStateAvailable}, DepsVerdict{State: JobStateWaiting}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := JudgeDeps(JobStateScheduled, tt.ignore, deps, tt.states); got != tt.want {
				t.Errorf("JudgeDeps(%v) = %+v, want %+v", tt.states, got, tt.want)
			}
		})
	}
}

func TestQueueFullError(t *testing.T) {
	t.Parallel()
	err := QueueFullError("mail", 10, 9, 2)
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("QueueFullError() = %v, want it to wrap ErrQueueFull", err)
	}
	want := `sortie: queue "mail" is full: it holds at most 10 queued jobs, has 9 and was given 2 more`
	if err.Error() != want {
		t.Errorf("QueueFullError() text = %q, want %q", err.Error(), want)
	}
	for _, tt := range []struct {
		queued, adding int64
		max            int
		want           int64
	}{{9, 2, 10, 1}, {8, 2, 10, 0}, {50, 1, 0, 0}, {3, 0, 2, 0}} {
		if got := DepthExcess(tt.queued, tt.adding, tt.max); got != tt.want {
			t.Errorf("DepthExcess(%d, %d, %d) = %d, want %d", tt.queued, tt.adding, tt.max, got, tt.want)
		}
	}
}

func TestNextStep(t *testing.T) {
	t.Parallel()
	later := t0.Add(time.Minute)
	boom := &AttemptError{Message: "boom"}
	tests := []struct {
		name         string
		report       Report
		attempt, max int
		want         Step
	}{
		{"completed keeps result", Report{Kind: ReportCompleted, Result: []byte("1")}, 1, 3,
			Step{State: JobStateCompleted, Result: []byte("1")}},
		{"failed retries at RunAt", Report{Kind: ReportFailed, Error: boom, RunAt: later}, 1, 3,
			Step{State: JobStateRetrying, RunAt: later, Error: &AttemptError{Attempt: 1, At: t0, Message: "boom"}}},
		{"failed without RunAt retries now", Report{Kind: ReportFailed}, 2, 3,
			Step{State: JobStateRetrying, RunAt: t0, Error: &AttemptError{Attempt: 2, At: t0, Message: NoErrorMessage}}},
		{"failed on the last attempt is dead", Report{Kind: ReportFailed, Error: boom, RunAt: later}, 3, 3,
			Step{State: JobStateDead, Error: &AttemptError{Attempt: 3, At: t0, Message: "boom"}}},
		{"cancelled without error records none", Report{Kind: ReportCancelled}, 1, 3, Step{State: JobStateCancelled}},
		{"cancelled with error", Report{Kind: ReportCancelled, Error: boom}, 1, 3,
			Step{State: JobStateCancelled, Error: &AttemptError{Attempt: 1, At: t0, Message: "boom"}}},
		{"snoozed later is scheduled", Report{Kind: ReportSnoozed, RunAt: later}, 3, 3,
			Step{State: JobStateScheduled, RunAt: later, Uncount: true}},
		{"snoozed now is available", Report{Kind: ReportSnoozed}, 1, 3,
			Step{State: JobStateAvailable, RunAt: t0, Uncount: true}},
		{"released keeps RunAt", Report{Kind: ReportReleased, RunAt: later}, 1, 3,
			Step{State: JobStateAvailable, Uncount: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := NextStep(&tt.report, tt.attempt, tt.max, t0)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("NextStep() mismatch (-want +got):\n%s", diff)
			}
			if got.Finalized() != got.State.Finished() {
				t.Errorf("Finalized() = %v for state %s", got.Finalized(), got.State)
			}
		})
	}
}

func TestRescueState(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		attempt, max int
		cancel       bool
		want         JobState
	}{{1, 3, false, JobStateAvailable}, {3, 3, false, JobStateDead}, {1, 3, true, JobStateCancelled}, {3, 3, true, JobStateCancelled}} {
		if got := RescueState(tt.attempt, tt.max, tt.cancel); got != tt.want {
			t.Errorf("RescueState(%d, %d, %v) = %s, want %s", tt.attempt, tt.max, tt.cancel, got, tt.want)
		}
	}
	if e := RescueError(2, t0); e.Attempt != 2 || !e.At.Equal(t0) || e.Message != LeaseLostMessage {
		t.Errorf("RescueError(2) = %+v", e)
	}
}

func TestValidateReports(t *testing.T) {
	t.Parallel()
	if err := ValidateReports([]*Report{{Kind: ReportCompleted}, {Kind: ReportReleased}, {Kind: ReportReleased, Unstarted: true}}); err != nil {
		t.Errorf("ValidateReports(valid) = %v, want nil", err)
	}
	for _, bad := range [][]*Report{{{Kind: ReportCompleted}, nil}, {{Kind: 0}}, {{Kind: ReportReleased + 1}}, {{Kind: ReportSnoozed, Unstarted: true}}} {
		if err := ValidateReports(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ValidateReports(%v) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

func TestRateWindow(t *testing.T) {
	t.Parallel()
	w := RateWindow{Limit: 3, Period: time.Minute}
	if got := w.From(t0); !got.Equal(t0.Add(-time.Minute)) {
		t.Errorf("From() = %v", got)
	}
	if got := w.ForgetBefore(t0); !got.Equal(t0.Add(-2 * time.Minute)) {
		t.Errorf("ForgetBefore() = %v", got)
	}
	if got := w.Room(1); got != 2 {
		t.Errorf("Room(1) = %d, want 2", got)
	}
	if got := w.Room(5); got != 0 {
		t.Errorf("Room(5) = %d, want 0", got)
	}
	starts := []RateStart{{t0.Add(-50 * time.Second), 2}, {t0.Add(-10 * time.Second), 2}}
	// 4 starts, limit 3: a start is allowed once 2 left the window, which
	// the first row's leaving does.
	if got, want := w.FreeAt(starts), t0.Add(10*time.Second); !got.Equal(want) {
		t.Errorf("FreeAt() = %v, want %v", got, want)
	}
	if got := w.FreeAt(starts[1:]); !got.IsZero() {
		t.Errorf("FreeAt(2 starts) = %v, want zero (room left)", got)
	}
}

func TestPartitionRoom(t *testing.T) {
	t.Parallel()
	s := &QueueSettings{PartitionMaxRunning: 2, PartitionRateLimit: 5, PartitionRatePeriod: time.Second}
	for _, tt := range []struct{ limit, running, started, want int64 }{
		{10, 0, 0, 2}, {10, 1, 0, 1}, {10, 0, 4, 1}, {10, 3, 0, 0}, {1, 0, 0, 1},
	} {
		if got := s.PartitionRoom(tt.limit, tt.running, tt.started); got != tt.want {
			t.Errorf("PartitionRoom(%d, %d, %d) = %d, want %d", tt.limit, tt.running, tt.started, got, tt.want)
		}
	}
}

func TestMergeHeads(t *testing.T) {
	t.Parallel()
	heads := []Head{
		{ID: 5, Priority: 2, RunAt: t0},
		{ID: 2, Priority: 1, RunAt: t0.Add(time.Second)},
		{ID: 9, Priority: 1, RunAt: t0},
		{ID: 3, Priority: 2, RunAt: t0},
	}
	if got, want := MergeHeads(heads, 3), []int64{9, 2, 3}; !cmp.Equal(got, want) {
		t.Errorf("MergeHeads() = %v, want %v", got, want)
	}
	if got := MergeHeads(nil, 3); len(got) != 0 {
		t.Errorf("MergeHeads(nil) = %v, want none", got)
	}
}
