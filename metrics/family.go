package metrics

import (
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
)

// family is one metric family a Collector exports, with what the
// exposition writers need precomputed.
type family struct {
	name string
	help string
	typ  dto.MetricType
	desc *prometheus.Desc
	// labels are the labels of every series, sorted by name as the
	// exposition formats list them: the constant ones and the variable
	// ones, whose values a series passes in the order of the Desc.
	labels []labelSlot
	// bounds are a histogram's bucket upper bounds, +Inf left out.
	bounds []float64
	// le are the text format's le labels of the buckets, +Inf included:
	// `le="0.005"`.
	le []string
}

// labelSlot is one label of a family: a constant value, or the value at
// index v of the values a series passes.
type labelSlot struct {
	name  string
	value string // when v < 0
	v     int
}

// of returns the label's value for a series with variable values vals.
func (l *labelSlot) of(vals []string) string {
	if l.v < 0 {
		return l.value
	}
	return vals[l.v]
}

// newFamily makes a family named namespace_name with labels variable
// after constLabels. Its Desc records any error, as prometheus.NewDesc does.
func newFamily(namespace, name, help string, typ dto.MetricType, variable []string, constLabels prometheus.Labels) *family {
	f := &family{
		name: prometheus.BuildFQName(namespace, "", name),
		help: help,
		typ:  typ,
	}
	f.desc = prometheus.NewDesc(f.name, help, variable, constLabels)
	for n, v := range constLabels {
		f.labels = append(f.labels, labelSlot{name: n, value: v, v: -1})
	}
	for i, n := range variable {
		f.labels = append(f.labels, labelSlot{name: n, v: i})
	}
	slices.SortFunc(f.labels, func(a, b labelSlot) int { return strings.Compare(a.name, b.name) })
	return f
}

// withBuckets sets a histogram family's buckets (sorted, as checked
// before), dropping a final +Inf as client_golang does.
func (f *family) withBuckets(bounds []float64) *family {
	if n := len(bounds); n > 0 && isPosInf(bounds[n-1]) {
		bounds = bounds[:n-1]
	}
	f.bounds = slices.Clone(bounds)
	for _, b := range f.bounds {
		f.le = append(f.le, `le="`+string(appendFloat(nil, b))+`"`)
	}
	f.le = append(f.le, `le="+Inf"`)
	return f
}

// legacyNames reports whether the family's name and label names are valid
// in the classic Prometheus character set, which every exposition format
// and name escaping scheme leaves as they are.
func (f *family) legacyNames() bool {
	if !model.LegacyValidation.IsValidMetricName(f.name) {
		return false
	}
	for _, l := range f.labels {
		if !model.LegacyValidation.IsValidLabelName(l.name) {
			return false
		}
	}
	return true
}

// A sink receives a Collector's metrics from walk: begin, the family's
// series, end, for each family. vals are the values of the family's
// variable labels, in the order of its Desc; a sink must not keep them.
type sink interface {
	begin(f *family)
	// sample is the value of a counter or gauge; created is zero for gauges.
	sample(f *family, vals []string, v float64, created time.Time)
	histogram(f *family, vals []string, h *histogram)
	end(f *family)
}

// walk sends c's metrics to s, family by family in name order, each
// family's series in the order of their label values: the order of a
// prometheus.Registry's Gather. It leaves out the families include rejects
// (nil includes all), families without series, and the queue gauges when
// jobs is nil.
func (c *Collector) walk(s sink, include func(*family) bool, jobs *queueJobs) {
	var all []*series
	sorted := false
	vals := make([]string, 3)
	var h histogram
	for _, f := range c.families {
		if include != nil && !include(f) {
			continue
		}
		if !sorted && f != c.queueJobs && f != c.storeUp && f != c.storeProblem {
			all, sorted = c.series.sorted(), true
		}
		s.begin(f)
		switch f {
		case c.enqueued, c.started:
			for _, sr := range all {
				sr.mu.Lock()
				ct := sr.enqueued
				if f == c.started {
					ct = sr.started
				}
				sr.mu.Unlock()
				if !ct.created.IsZero() {
					vals[0], vals[1] = sr.queue, sr.kind
					s.sample(f, vals[:2], float64(ct.n), ct.created)
				}
			}
		case c.finished:
			for _, fc := range finishedSorted(all) {
				vals[0], vals[1], vals[2] = fc.s.queue, fc.s.kind, fc.outcome
				s.sample(f, vals, float64(fc.n), fc.created)
			}
		case c.latency, c.duration:
			for _, sr := range all {
				sr.mu.Lock()
				if f == c.latency {
					sr.latency.snapshot(&h)
				} else {
					sr.duration.snapshot(&h)
				}
				sr.mu.Unlock()
				if !h.created.IsZero() {
					vals[0], vals[1] = sr.queue, sr.kind
					s.histogram(f, vals[:2], &h)
				}
			}
		case c.queueJobs:
			if jobs != nil {
				for _, q := range jobs.queues {
					for i, st := range sortedStates {
						vals[0], vals[1] = q.queue, st
						s.sample(f, vals[:2], float64(q.counts[i]), time.Time{})
					}
				}
			}
		case c.storeProblem:
			if c.problems != nil {
				var codes []string
				for _, p := range c.problems() {
					codes = append(codes, p.Code)
				}
				slices.Sort(codes)
				for _, code := range codes {
					vals[0] = code
					s.sample(f, vals[:1], 1, time.Time{})
				}
			}
		case c.storeUp:
			if jobs != nil {
				up := 0.0
				if jobs.up {
					up = 1
				}
				s.sample(f, nil, up, time.Time{})
			}
		}
		s.end(f)
	}
}

// seriesOutcome is the finished counter of one series and outcome.
type seriesOutcome struct {
	s *series
	outcomeCount
}

// finishedSorted returns the finished counters of all (sorted by kind,
// then queue) by kind, outcome and queue: the order of their label values.
func finishedSorted(all []*series) []seriesOutcome {
	var out, run []seriesOutcome
	var outcomes []string
	for i := 0; i < len(all); {
		// The series of one kind, in queue order: list their counters
		// outcome by outcome.
		run, outcomes = run[:0], outcomes[:0]
		kind := all[i].kind
		for ; i < len(all) && all[i].kind == kind; i++ {
			sr := all[i]
			sr.mu.Lock()
			for _, oc := range sr.finished {
				run = append(run, seriesOutcome{sr, oc})
				if !slices.Contains(outcomes, oc.outcome) {
					outcomes = append(outcomes, oc.outcome)
				}
			}
			sr.mu.Unlock()
		}
		slices.Sort(outcomes)
		for _, o := range outcomes {
			for _, so := range run {
				if so.outcome == o {
					out = append(out, so)
				}
			}
		}
	}
	return out
}

// metricSink sends the metrics it receives to a prometheus.Collector's
// channel, for a Registry to gather.
type metricSink chan<- prometheus.Metric

func (ms metricSink) begin(*family) {}
func (ms metricSink) end(*family)   {}

func (ms metricSink) sample(f *family, vals []string, v float64, created time.Time) {
	if f.typ == dto.MetricType_COUNTER {
		ms <- prometheus.MustNewConstMetricWithCreatedTimestamp(f.desc, prometheus.CounterValue, v, created, vals...)
		return
	}
	ms <- prometheus.MustNewConstMetric(f.desc, prometheus.GaugeValue, v, vals...)
}

func (ms metricSink) histogram(f *family, vals []string, h *histogram) {
	buckets := make(map[float64]uint64, len(f.bounds))
	var cum uint64
	for i, b := range f.bounds {
		cum += h.counts[i]
		buckets[b] = cum
	}
	cum += h.counts[len(f.bounds)]
	ms <- prometheus.MustNewConstHistogramWithCreatedTimestamp(f.desc, cum, h.sum, buckets, h.created, vals...)
}
