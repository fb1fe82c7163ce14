package httpapi

import (
	"fmt"
	"testing"

	"github.com/sortiehq/sortie"
)

func TestStatusOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want int
	}{
		{&sortie.UnknownKindError{Kind: "k"}, 400},
		{fmt.Errorf("enqueue: %w", sortie.ErrInvalidArgument), 400},
		{fmt.Errorf("get job 4: %w", sortie.ErrNotFound), 404},
		{fmt.Errorf("list: %w", sortie.ErrClosed), 503},
	} {
		if got := statusOf(tt.err); got != tt.want {
			t.Errorf("statusOf(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestMessageNamesTheBatchJob(t *testing.T) {
	t.Parallel()
	fe := &sortie.FieldError{Field: "max_attempts", Problem: "must be between 1 and 1000000, got 0"}
	err := &sortie.BatchJobError{Index: 2, Len: 3, Err: fmt.Errorf("sortie: EnqueueOpts.MaxAttempts: %w", fe)}
	if got, want := message(err), "jobs[2]."+fe.Error(); got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
	if got, want := message(fmt.Errorf("sortie: queue %q is full: %w", "mail", sortie.ErrQueueFull)), `queue "mail" is full: `+sortie.ErrQueueFull.Error(); got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}
