package held_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sortiehq/sortie/internal/held"
)

type run struct{}

func (run) InTx() bool                       { return false }
func (run) Suspended() bool                  { return false }
func (run) TakeDueProgress() (float64, bool) { return 0, false }

// A cancel request is acted on once and keeps the job held; a lost lease
// drops it, and a stale token touches nothing.
func TestSetCancel(t *testing.T) {
	t.Parallel()
	var s held.Set
	ctx, cancel := context.WithCancelCause(context.Background())
	s.Add(&held.Job{ID: 1, Token: 7, Cancel: cancel, Run: run{}})
	cause := errors.New("requested")
	if !s.CancelRequested(1, 7, cause) || s.CancelRequested(1, 7, cause) {
		t.Fatal("CancelRequested() twice: want true, then false")
	}
	if got := context.Cause(ctx); got != cause {
		t.Errorf("job context cause = %v, want %v", got, cause)
	}
	if s.LeaseLost(1, 8, cause) {
		t.Error("LeaseLost() with another claim's token = true, want false")
	}
	if !s.LeaseLost(1, 7, cause) {
		t.Error("LeaseLost() = false, want true")
	}
	if n := s.Len(); n != 0 {
		t.Errorf("Len() after a lost lease = %d, want 0", n)
	}
}
