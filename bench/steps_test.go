package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
)

// The steps workload runs its three parts on each store and fills in
// every figure; its median takes each figure's median.
func TestStepsWorkload(t *testing.T) {
	t.Parallel()
	for _, target := range targets(t) {
		t.Run(target.Name, func(t *testing.T) {
			t.Parallel()
			opts := &bench.Options{Jobs: 100, Workers: 20, Children: 300, Rounds: 2, StepCalls: 50, StallTimeout: 20 * time.Second}
			res, err := bench.RunRepeated(context.Background(), target, bench.Steps, opts, 2)
			if err != nil {
				t.Fatalf("Run(%s, steps) = %v, want success", target.Name, err)
			}
			s := res.Steps
			if s == nil || res.Workload != bench.Steps || res.Jobs != 100 || res.Runs != 2 {
				t.Fatalf("result %+v, want the steps figures of 100 jobs, 2 runs", res)
			}
			for name, v := range map[string]float64{"RecordMs": s.RecordMs, "HeartbeatMs": s.HeartbeatMs,
				"SteppedUnitsPerSec": s.SteppedUnitsPerSec, "OneStepUnitsPerSec": s.OneStepUnitsPerSec, "PlainUnitsPerSec": s.PlainUnitsPerSec,
				"ResumeMaxMs": s.ResumeMaxMs, "AwaitMs": s.AwaitMs} {
				if !(v > 0) {
					t.Errorf("%s = %g, want positive", name, v)
				}
			}
			if s.Children != 300 || s.Rounds != 2 || s.Calls != 50 || s.StepsPerJob != bench.StepsPerJob {
				t.Errorf("figures %+v, want 300 children, 2 rounds, 50 calls", s)
			}
			if s.ResumeP50ms > s.ResumeP99ms || s.ResumeP99ms > s.ResumeMaxMs {
				t.Errorf("resume percentiles p50 %g, p99 %g, max %g out of order", s.ResumeP50ms, s.ResumeP99ms, s.ResumeMaxMs)
			}
			var b strings.Builder
			if err := bench.WriteTableRow(&b, target.Name, res); err != nil || !strings.Contains(b.String(), "resume after 300 children") {
				t.Errorf("table row %q, %v; want the steps figures", b.String(), err)
			}
		})
	}
}
