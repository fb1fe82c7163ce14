package store

import (
	"strings"
	"testing"
	"time"
)

func TestQueueSettingsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    QueueSettings
		want string // "" means valid
	}{
		{"zero", QueueSettings{}, ""},
		{"all set", QueueSettings{MaxRunning: 3, RateLimit: 10, RatePeriod: time.Second, PartitionMaxRunning: 1,
			PartitionRateLimit: 2, PartitionRatePeriod: time.Minute, MaxDepth: 100, Overflow: OverflowDropOldest}, ""},
		{"negative max running", QueueSettings{MaxRunning: -1}, "MaxRunning must not be negative, got -1"},
		{"negative depth", QueueSettings{MaxDepth: -5}, "MaxDepth must not be negative, got -5"},
		{"negative period", QueueSettings{RatePeriod: -time.Second}, "RatePeriod must not be negative, got -1s"},
		{"limit without period", QueueSettings{RateLimit: 5}, "RateLimit is 5 but RatePeriod is not set"},
		{"partition limit without period", QueueSettings{PartitionRateLimit: 2}, "PartitionRateLimit is 2 but PartitionRatePeriod is not set"},
		{"unknown overflow", QueueSettings{Overflow: 7}, "unknown Overflow 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.s.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestJobStateHoldsBack(t *testing.T) {
	t.Parallel()
	// want[0]: the dependent does not ignore failures; want[1]: it does.
	for s, want := range map[JobState][2]bool{
		JobStateWaiting: {true, true}, JobStateScheduled: {true, true}, JobStateAvailable: {true, true},
		JobStateRunning: {true, true}, JobStateRetrying: {true, true},
		JobStateCompleted: {false, false}, JobStateCancelled: {true, false}, JobStateDead: {true, false},
		"bogus": {false, false},
	} {
		for i, ignore := range []bool{false, true} {
			if got := s.HoldsBack(ignore); got != want[i] {
				t.Errorf("JobState(%q).HoldsBack(%v) = %v, want %v", s, ignore, got, want[i])
			}
		}
	}
}
