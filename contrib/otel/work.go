package otel

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sortiehq/sortie"
)

// WorkMiddleware returns work middleware that starts a consumer span for
// every attempt, whose parent is the trace context in the job's Meta, and
// runs the handler with the span in its context. A handler's error or panic
// marks the span failed; a Snooze does not. A nil opts means all defaults.
func WorkMiddleware(opts *Options) sortie.WorkMiddleware {
	s := newSettings(opts)
	return func(next sortie.WorkHandler) sortie.WorkHandler {
		return func(ctx context.Context, job *sortie.JobRow) error {
			ctx, span := s.tracer.Start(s.extract(ctx, job.Meta), "work "+job.Kind,
				trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(workAttrs(job)...))
			returned := false
			defer func() {
				// A panic passes through untouched, for sortie to
				// record with its stack; the span only notes it.
				if !returned {
					span.SetStatus(codes.Error, "handler panicked")
				}
				span.End()
			}()
			err := next(ctx, job)
			returned = true
			endWork(span, err)
			return err
		}
	}
}

// extract returns ctx with the trace context carried in meta as its span
// context, or with none: a span the worker's own context holds (from the
// context the client was started with) is never a job's parent.
func (s *settings) extract(ctx context.Context, meta []byte) context.Context {
	ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	if carrier := carrierOf(meta, s.metaKey); carrier != nil {
		ctx = s.prop.Extract(ctx, carrier)
	}
	return ctx
}

// workAttrs are the attributes of an attempt's span.
func workAttrs(job *sortie.JobRow) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		keySystem.String(system),
		keyOperationName.String("work"),
		keyOperationType.String("process"),
		keyDestination.String(job.Queue),
		keyMessageID.String(strconv.FormatInt(job.ID, 10)),
		keyKind.String(job.Kind),
		keyAttempt.Int(job.Attempt),
	}
	if job.AttemptedBy != "" {
		attrs = append(attrs, keyClientID.String(job.AttemptedBy))
	}
	return attrs
}

// endWork records the handler's error on span: a failure, or a snooze.
func endWork(span trace.Span, err error) {
	if err == nil {
		return
	}
	if d, ok := sortie.SnoozeDuration(err); ok {
		span.AddEvent("job snoozed", trace.WithAttributes(keySnooze.String(d.String())))
		return
	}
	fail(span, err)
}
