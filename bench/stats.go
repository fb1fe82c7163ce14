package bench

import (
	"math"
	"slices"
	"time"
)

// percentiles holds latency percentiles in milliseconds.
type percentiles struct {
	p50, p95, p99, max float64
}

// percentilesOf returns the nearest-rank percentiles of ds. It sorts ds.
func percentilesOf(ds []time.Duration) percentiles {
	if len(ds) == 0 {
		return percentiles{}
	}
	slices.Sort(ds)
	at := func(p float64) float64 {
		// Nearest rank: the smallest value with at least p of the samples
		// at or below it.
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		i = max(0, min(i, len(ds)-1))
		return ms(ds[i])
	}
	return percentiles{p50: at(0.50), p95: at(0.95), p99: at(0.99), max: ms(ds[len(ds)-1])}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// SetThroughput fills in r's Jobs, Seconds and JobsPerSec for n jobs in took.
func (r *Result) SetThroughput(n int, took time.Duration) {
	r.Jobs, r.Seconds, r.JobsPerSec = n, took.Seconds(), float64(n)/took.Seconds()
}

// SetPercentiles fills in r's nearest-rank percentiles of ds and what they
// measure (LatencyEnqueueCall or LatencyEnqueueStart). It sorts ds.
func (r *Result) SetPercentiles(ds []time.Duration, what string) {
	p := percentilesOf(ds)
	r.P50ms, r.P95ms, r.P99ms, r.MaxMs = p.p50, p.p95, p.p99, p.max
	r.LatencyOf = what
}

// Median returns the results' field-by-field median: each figure (seconds,
// jobs per second, each percentile) is the median of that figure over the
// runs, so one run disturbed by a neighbour on the machine moves none of
// them; MaxInWindow, a limit's worst case, is the largest of the runs. The
// descriptive fields come from the first result; Runs is the number of
// results. All results should be of one store and workload.
func Median(results []Result) Result {
	if len(results) == 0 {
		return Result{}
	}
	m := results[0]
	m.Runs = len(results)
	med := func(get func(*Result) float64) float64 {
		vals := make([]float64, len(results))
		for i := range results {
			vals[i] = get(&results[i])
		}
		slices.Sort(vals)
		n := len(vals)
		if n%2 == 1 {
			return vals[n/2]
		}
		return (vals[n/2-1] + vals[n/2]) / 2
	}
	m.Seconds = med(func(r *Result) float64 { return r.Seconds })
	m.JobsPerSec = med(func(r *Result) float64 { return r.JobsPerSec })
	m.P50ms = med(func(r *Result) float64 { return r.P50ms })
	m.P95ms = med(func(r *Result) float64 { return r.P95ms })
	m.P99ms = med(func(r *Result) float64 { return r.P99ms })
	m.MaxMs = med(func(r *Result) float64 { return r.MaxMs })
	if m.RateErrorPct != nil {
		e := med(func(r *Result) float64 {
			if r.RateErrorPct == nil {
				return 0
			}
			return *r.RateErrorPct
		})
		m.RateErrorPct = &e
	}
	for _, r := range results {
		m.MaxInWindow = max(m.MaxInWindow, r.MaxInWindow)
	}
	if m.Steps != nil {
		m.Steps = medianSteps(results, med)
	}
	return m
}

// medianSteps returns the field-by-field median of the results' steps
// figures (see Median).
func medianSteps(results []Result, med func(func(*Result) float64) float64) *StepsFigures {
	s := *results[0].Steps
	of := func(get func(*StepsFigures) float64) float64 {
		return med(func(r *Result) float64 {
			if r.Steps == nil {
				return 0
			}
			return get(r.Steps)
		})
	}
	s.RecordMs = of(func(f *StepsFigures) float64 { return f.RecordMs })
	s.HeartbeatMs = of(func(f *StepsFigures) float64 { return f.HeartbeatMs })
	s.RecordPerHeartbeat = of(func(f *StepsFigures) float64 { return f.RecordPerHeartbeat })
	s.SteppedUnitsPerSec = of(func(f *StepsFigures) float64 { return f.SteppedUnitsPerSec })
	s.PlainUnitsPerSec = of(func(f *StepsFigures) float64 { return f.PlainUnitsPerSec })
	s.OneStepUnitsPerSec = of(func(f *StepsFigures) float64 { return f.OneStepUnitsPerSec })
	s.SteppedPerPlain = of(func(f *StepsFigures) float64 { return f.SteppedPerPlain })
	s.SteppedPerOneStep = of(func(f *StepsFigures) float64 { return f.SteppedPerOneStep })
	s.ResumeP50ms = of(func(f *StepsFigures) float64 { return f.ResumeP50ms })
	s.ResumeP99ms = of(func(f *StepsFigures) float64 { return f.ResumeP99ms })
	s.ResumeMaxMs = of(func(f *StepsFigures) float64 { return f.ResumeMaxMs })
	s.ResumeFinalizedP99ms = of(func(f *StepsFigures) float64 { return f.ResumeFinalizedP99ms })
	s.AwaitMs = of(func(f *StepsFigures) float64 { return f.AwaitMs })
	return &s
}
