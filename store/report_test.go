package store

import (
	"errors"
	"testing"
)

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
