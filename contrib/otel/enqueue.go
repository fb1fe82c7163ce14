package otel

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sortiehq/sortie"
)

// EnqueueMiddleware returns enqueue middleware that starts a producer span
// for every enqueue call, a child of the span in the caller's context, and
// writes the span's context into the Meta of each job, under
// Options.MetaKey. Put it first in Config.EnqueueMiddleware, so that its span
// covers the other middleware. A nil opts means all defaults.
func EnqueueMiddleware(opts *Options) sortie.EnqueueMiddleware {
	s := newSettings(opts)
	return func(next sortie.EnqueueFunc) sortie.EnqueueFunc {
		return func(ctx context.Context, jobs []*sortie.NewJob) ([]sortie.EnqueueResult, error) {
			ctx, span := s.tracer.Start(ctx, enqueueSpanName(jobs),
				trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(enqueueAttrs(jobs)...))
			defer span.End()
			s.inject(ctx, span, jobs)
			res, err := next(ctx, jobs)
			if err != nil {
				fail(span, err)
				return res, err
			}
			if len(jobs) == 1 && len(res) == 1 {
				span.SetAttributes(keyMessageID.String(strconv.FormatInt(res[0].ID, 10)),
					keyDuplicate.Bool(res[0].Duplicate))
			}
			return res, nil
		}
	}
}

// inject writes the context of ctx's span into the Meta of each job. A job
// whose Meta cannot take it keeps its Meta, and span records why.
func (s *settings) inject(ctx context.Context, span trace.Span, jobs []*sortie.NewJob) {
	carrier := propagation.MapCarrier{}
	s.prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return // nothing to carry: no propagator, or no valid span
	}
	for i, j := range jobs {
		meta, err := withCarrier(j.Meta, s.metaKey, carrier)
		if err != nil {
			span.AddEvent("trace context not carried", trace.WithAttributes(
				attribute.Int("sortie.job.index", i), keyKind.String(j.Kind), attribute.String("error.message", err.Error())))
			continue
		}
		j.Meta = meta
	}
}

// enqueueSpanName is "enqueue KIND", or "enqueue" for jobs of several kinds.
func enqueueSpanName(jobs []*sortie.NewJob) string {
	if kind, ok := shared(jobs, func(j *sortie.NewJob) string { return j.Kind }); ok {
		return "enqueue " + kind
	}
	return "enqueue"
}

// enqueueAttrs are the attributes of an enqueue span known at its start.
func enqueueAttrs(jobs []*sortie.NewJob) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		keySystem.String(system),
		keyOperationName.String("enqueue"),
		keyOperationType.String("send"),
	}
	if queue, ok := shared(jobs, func(j *sortie.NewJob) string { return j.Queue }); ok {
		attrs = append(attrs, keyDestination.String(queue))
	}
	if kind, ok := shared(jobs, func(j *sortie.NewJob) string { return j.Kind }); ok {
		attrs = append(attrs, keyKind.String(kind))
	}
	if len(jobs) > 1 {
		attrs = append(attrs, keyBatchCount.Int(len(jobs)))
	}
	return attrs
}

// shared returns field's value when every job has the same one.
func shared(jobs []*sortie.NewJob, field func(*sortie.NewJob) string) (string, bool) {
	if len(jobs) == 0 {
		return "", false
	}
	v := field(jobs[0])
	for _, j := range jobs[1:] {
		if field(j) != v {
			return "", false
		}
	}
	return v, true
}
