package metrics

import (
	"math"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of io.prometheus.client's messages (client_model's
// metrics.proto) that protoSink writes.
const (
	fieldFamilyName   = 1 // MetricFamily.name
	fieldFamilyHelp   = 2 // MetricFamily.help
	fieldFamilyType   = 3 // MetricFamily.type
	fieldFamilyMetric = 4 // MetricFamily.metric

	fieldMetricLabel     = 1 // Metric.label
	fieldMetricGauge     = 2 // Metric.gauge
	fieldMetricCounter   = 3 // Metric.counter
	fieldMetricHistogram = 7 // Metric.histogram

	fieldLabelName  = 1 // LabelPair.name
	fieldLabelValue = 2 // LabelPair.value

	fieldValue          = 1 // Gauge.value, Counter.value
	fieldCounterCreated = 3 // Counter.created_timestamp

	fieldHistogramCount   = 1  // Histogram.sample_count
	fieldHistogramSum     = 2  // Histogram.sample_sum
	fieldHistogramBucket  = 3  // Histogram.bucket
	fieldHistogramCreated = 15 // Histogram.created_timestamp

	fieldBucketCount = 1 // Bucket.cumulative_count
	fieldBucketBound = 2 // Bucket.upper_bound

	fieldTimestampSeconds = 1 // google.protobuf.Timestamp.seconds
	fieldTimestampNanos   = 2 // google.protobuf.Timestamp.nanos
)

// protoSink writes the delimited protobuf format: each MetricFamily
// message preceded by its length as a varint. It writes the fields
// client_golang sets, so a decoder reads the same dto.MetricFamily a
// Registry gathers.
type protoSink struct {
	out *bufWriter
	fam []byte // the current family's Metric fields
	m   []byte // scratch: one Metric
	sub []byte // scratch: its Counter, Gauge or Histogram
	bkt []byte // scratch: one Bucket
}

func (p *protoSink) begin(*family) { p.fam = p.fam[:0] }

// end writes the family, unless it has no series: a Registry leaves such a
// family out.
func (p *protoSink) end(f *family) {
	if len(p.fam) == 0 {
		return
	}
	size := protowire.SizeTag(fieldFamilyName) + protowire.SizeBytes(len(f.name)) +
		protowire.SizeTag(fieldFamilyHelp) + protowire.SizeBytes(len(f.help)) +
		protowire.SizeTag(fieldFamilyType) + protowire.SizeVarint(uint64(f.typ)) +
		len(p.fam)
	b := protowire.AppendVarint(p.out.b, uint64(size))
	b = appendString(b, fieldFamilyName, f.name)
	b = appendString(b, fieldFamilyHelp, f.help)
	b = protowire.AppendTag(b, fieldFamilyType, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(f.typ))
	p.out.b = append(b, p.fam...)
	p.out.flushIfFull()
}

func (p *protoSink) sample(f *family, vals []string, v float64, created time.Time) {
	p.sub = appendDouble(p.sub[:0], fieldValue, v)
	field := fieldMetricGauge
	if f.typ == dto.MetricType_COUNTER {
		field = fieldMetricCounter
		p.sub = appendTimestamp(p.sub, fieldCounterCreated, created)
	}
	p.m = appendLabelPairs(p.m[:0], f, vals)
	p.m = appendMessage(p.m, protowire.Number(field), p.sub)
	p.fam = appendMessage(p.fam, fieldFamilyMetric, p.m)
}

func (p *protoSink) histogram(f *family, vals []string, h *histogram) {
	var cum uint64
	for _, n := range h.counts {
		cum += n
	}
	s := protowire.AppendTag(p.sub[:0], fieldHistogramCount, protowire.VarintType)
	s = protowire.AppendVarint(s, cum)
	s = appendDouble(s, fieldHistogramSum, h.sum)
	// Buckets up to the last finite bound; the +Inf one is sample_count.
	cum = 0
	for i, bound := range f.bounds {
		cum += h.counts[i]
		bk := protowire.AppendTag(p.bkt[:0], fieldBucketCount, protowire.VarintType)
		bk = protowire.AppendVarint(bk, cum)
		bk = appendDouble(bk, fieldBucketBound, bound)
		s = appendMessage(s, fieldHistogramBucket, bk)
		p.bkt = bk
	}
	p.sub = appendTimestamp(s, fieldHistogramCreated, h.created)
	p.m = appendLabelPairs(p.m[:0], f, vals)
	p.m = appendMessage(p.m, fieldMetricHistogram, p.sub)
	p.fam = appendMessage(p.fam, fieldFamilyMetric, p.m)
}

// appendLabelPairs appends the LabelPair fields of f's series with values
// vals.
func appendLabelPairs(b []byte, f *family, vals []string) []byte {
	for i := range f.labels {
		l := &f.labels[i]
		v := l.of(vals)
		b = protowire.AppendTag(b, fieldMetricLabel, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(fieldLabelName)+protowire.SizeBytes(len(l.name))+
			protowire.SizeTag(fieldLabelValue)+protowire.SizeBytes(len(v))))
		b = appendString(b, fieldLabelName, l.name)
		b = appendString(b, fieldLabelValue, v)
	}
	return b
}

// appendTimestamp appends a google.protobuf.Timestamp field, whose zero
// fields are left out as in proto3.
func appendTimestamp(b []byte, num protowire.Number, t time.Time) []byte {
	secs, nanos := t.Unix(), t.Nanosecond()
	size := 0
	if secs != 0 {
		size += protowire.SizeTag(fieldTimestampSeconds) + protowire.SizeVarint(uint64(secs))
	}
	if nanos != 0 {
		size += protowire.SizeTag(fieldTimestampNanos) + protowire.SizeVarint(uint64(nanos))
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	if secs != 0 {
		b = protowire.AppendTag(b, fieldTimestampSeconds, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(secs))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, fieldTimestampNanos, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(nanos))
	}
	return b
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendDouble(b []byte, num protowire.Number, v float64) []byte {
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}
