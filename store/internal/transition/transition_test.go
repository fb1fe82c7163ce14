package transition

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sortiehq/sortie/store"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func TestNextStep(t *testing.T) {
	t.Parallel()
	later := t0.Add(time.Minute)
	boom := &store.AttemptError{Message: "boom"}
	tests := []struct {
		name         string
		report       store.Report
		attempt, max int
		want         Step
	}{
		{"completed keeps result", store.Report{Kind: store.ReportCompleted, Result: []byte("1")}, 1, 3,
			Step{State: store.JobStateCompleted, Result: []byte("1")}},
		{"failed retries at RunAt", store.Report{Kind: store.ReportFailed, Error: boom, RunAt: later}, 1, 3,
			Step{State: store.JobStateRetrying, RunAt: later, Error: &store.AttemptError{Attempt: 1, At: t0, Message: "boom"}}},
		{"failed without RunAt retries now", store.Report{Kind: store.ReportFailed}, 2, 3,
			Step{State: store.JobStateRetrying, RunAt: t0, Error: &store.AttemptError{Attempt: 2, At: t0, Message: store.NoErrorMessage}}},
		{"failed on the last attempt is dead", store.Report{Kind: store.ReportFailed, Error: boom, RunAt: later}, 3, 3,
			Step{State: store.JobStateDead, Error: &store.AttemptError{Attempt: 3, At: t0, Message: "boom"}}},
		{"cancelled without error records none", store.Report{Kind: store.ReportCancelled}, 1, 3, Step{State: store.JobStateCancelled}},
		{"cancelled with error", store.Report{Kind: store.ReportCancelled, Error: boom}, 1, 3,
			Step{State: store.JobStateCancelled, Error: &store.AttemptError{Attempt: 1, At: t0, Message: "boom"}}},
		{"snoozed later is scheduled", store.Report{Kind: store.ReportSnoozed, RunAt: later}, 3, 3,
			Step{State: store.JobStateScheduled, RunAt: later, Uncount: true}},
		{"snoozed now is available", store.Report{Kind: store.ReportSnoozed}, 1, 3,
			Step{State: store.JobStateAvailable, RunAt: t0, Uncount: true}},
		{"released keeps RunAt", store.Report{Kind: store.ReportReleased, RunAt: later}, 1, 3,
			Step{State: store.JobStateAvailable, Uncount: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Next(&tt.report, tt.attempt, tt.max, t0)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Next() mismatch (-want +got):\n%s", diff)
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
		want         store.JobState
	}{{1, 3, false, store.JobStateAvailable}, {3, 3, false, store.JobStateDead}, {1, 3, true, store.JobStateCancelled}, {3, 3, true, store.JobStateCancelled}} {
		if got := RescueState(tt.attempt, tt.max, tt.cancel); got != tt.want {
			t.Errorf("RescueState(%d, %d, %v) = %s, want %s", tt.attempt, tt.max, tt.cancel, got, tt.want)
		}
	}
	if e := RescueError(2, t0); e.Attempt != 2 || !e.At.Equal(t0) || e.Message != store.LeaseLostMessage {
		t.Errorf("RescueError(2) = %+v", e)
	}
}

func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		next   store.JobState
		failed bool
		want   store.HistoryOutcome
		counts bool
	}{
		{"completed", store.JobStateCompleted, false, store.HistoryCompleted, true},
		{"cancelled", store.JobStateCancelled, false, store.HistoryCancelled, true},
		{"dead after a failure", store.JobStateDead, true, store.HistoryDead, true},
		{"failure with attempts left", store.JobStateRetrying, true, store.HistoryRetried, true},
		{"lease lost, available again", store.JobStateAvailable, true, store.HistoryRetried, true},
		{"snoozed", store.JobStateScheduled, false, "", false},
		{"released", store.JobStateAvailable, false, "", false},
		{"promoted or retried by an operator", store.JobStateAvailable, false, "", false},
		{"claimed", store.JobStateRunning, true, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := OutcomeOf(tt.next, tt.failed)
			if got != tt.want || ok != tt.counts {
				t.Errorf("OutcomeOf(%s, %v) = %q, %v; want %q, %v", tt.next, tt.failed, got, ok, tt.want, tt.counts)
			}
		})
	}
}
