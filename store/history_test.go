package store

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		next   JobState
		failed bool
		want   HistoryOutcome
		counts bool
	}{
		{"completed", JobStateCompleted, false, HistoryCompleted, true},
		{"cancelled", JobStateCancelled, false, HistoryCancelled, true},
		{"dead after a failure", JobStateDead, true, HistoryDead, true},
		{"failure with attempts left", JobStateRetrying, true, HistoryRetried, true},
		{"lease lost, available again", JobStateAvailable, true, HistoryRetried, true},
		{"snoozed", JobStateScheduled, false, "", false},
		{"released", JobStateAvailable, false, "", false},
		{"promoted or retried by an operator", JobStateAvailable, false, "", false},
		{"claimed", JobStateRunning, true, "", false},
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

func TestHistoryMinute(t *testing.T) {
	t.Parallel()
	in := time.Date(2024, 5, 1, 14, 7, 59, 999_999_000, time.FixedZone("x", 2*3600))
	want := time.Date(2024, 5, 1, 12, 7, 0, 0, time.UTC)
	if got := HistoryMinute(in); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("HistoryMinute(%v) = %v, want %v in UTC", in, got, want)
	}
}

func TestHistoryTally(t *testing.T) {
	t.Parallel()
	var a, b HistoryTally
	a.Add("q", t0.Add(10*time.Second), HistoryRetried, 1)
	a.Add("q", t0.Add(50*time.Second), HistoryCompleted, 2)
	a.Add("a", t0.Add(time.Minute), HistoryCompleted, 1)
	b.Add("q", t0, HistoryCompleted, 3)
	b.Add("a", t0, HistoryDead, 1)
	a.Merge(&b)
	want := []HistoryRow{
		{Queue: "a", At: t0, Outcome: HistoryDead, Count: 1},
		{Queue: "q", At: t0, Outcome: HistoryCompleted, Count: 5},
		{Queue: "q", At: t0, Outcome: HistoryRetried, Count: 1},
		{Queue: "a", At: t0.Add(time.Minute), Outcome: HistoryCompleted, Count: 1},
	}
	if diff := cmp.Diff(want, a.Rows()); diff != "" {
		t.Errorf("Rows() mismatch (-want +got):\n%s", diff)
	}
	if a.Reset(); a.Len() != 0 {
		t.Errorf("Len() after Reset = %d, want 0", a.Len())
	}
}

func TestOldestDue(t *testing.T) {
	t.Parallel()
	now := t0
	tests := []struct {
		name               string
		available, waiting time.Time
		want               time.Time
	}{
		{"nothing", time.Time{}, time.Time{}, time.Time{}},
		{"available only", now.Add(-time.Minute), time.Time{}, now.Add(-time.Minute)},
		{"waiting, not due", time.Time{}, now.Add(time.Second), time.Time{}},
		{"waiting, due now", time.Time{}, now, now},
		{"due waiting older than available", now.Add(-time.Second), now.Add(-time.Hour), now.Add(-time.Hour)},
		{"available older than due waiting", now.Add(-time.Hour), now.Add(-time.Second), now.Add(-time.Hour)},
		{"available, waiting not due", now.Add(-time.Hour), now.Add(time.Hour), now.Add(-time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := OldestDue(tt.available, tt.waiting, now); !got.Equal(tt.want) {
				t.Errorf("OldestDue(%v, %v) = %v, want %v", tt.available, tt.waiting, got, tt.want)
			}
		})
	}
}
