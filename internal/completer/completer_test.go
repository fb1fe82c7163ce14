package completer_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/completer"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/held"
	"github.com/sortiehq/sortie/store"
)

// finisher applies every report.
type finisher struct{ calls int }

func (f *finisher) JobFinish(_ context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	f.calls++
	res := make([]store.ReportResult, len(p.Reports))
	for i := range res {
		res[i] = store.ReportResult{Applied: true, State: store.JobStateCompleted}
	}
	return res, nil
}

// Stop records what was added, drops its claims from the held set and
// hands each result to Finished.
func TestStopRecordsPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var hs held.Set
	var finished []int64
	cp := completer.New(ctx, completer.Config[*store.Report]{
		Store: &finisher{}, Clock: clock.Real{}, Logger: logger, Held: &hs,
		Health:   &health.Health{Logger: logger, What: "store"},
		Report:   func(r *store.Report) *store.Report { return r },
		Finished: func(_ context.Context, r *store.Report, _ store.ReportResult) { finished = append(finished, r.ID) },
	})
	go cp.Loop()
	for id := int64(1); id <= 3; id++ {
		hs.Add(&held.Job{ID: id, Token: 1, Cancel: func(error) {}})
		cp.Add(&store.Report{ID: id, ClaimToken: 1, Kind: store.ReportCompleted})
	}
	if n, err := cp.Stop(ctx); n != 0 || err != nil {
		t.Fatalf("Stop() = %d, %v; want 0, nil", n, err)
	}
	if len(finished) != 3 {
		t.Errorf("Finished called for %v, want jobs 1, 2 and 3", finished)
	}
	if n := hs.Len(); n != 0 {
		t.Errorf("held jobs after Stop = %d, want 0", n)
	}
}
