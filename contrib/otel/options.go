package otel

import (
	"fmt"

	otelglobal "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer the middlewares use.
const ScopeName = "github.com/sortiehq/sortie/contrib/otel"

// DefaultMetaKey is the Meta key holding a job's trace context unless
// Options.MetaKey names another.
const DefaultMetaKey = "otel"

// Options configure the middlewares. A nil *Options means all defaults. The
// enqueue and work middlewares of every process must agree on the
// propagator and MetaKey.
type Options struct {
	// TracerProvider makes the tracer. Defaults to the global one
	// (otel.GetTracerProvider()).
	TracerProvider trace.TracerProvider
	// Propagator writes a trace context into a job's Meta and reads it
	// back. Defaults to the global one (otel.GetTextMapPropagator()), which
	// carries nothing until the application sets one.
	Propagator propagation.TextMapPropagator
	// MetaKey is the Meta key holding the trace context, for an
	// application that uses "otel" for something else. Defaults to "otel".
	MetaKey string
}

// settings are Options with the defaults filled in.
type settings struct {
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	metaKey string
}

func newSettings(o *Options) *settings {
	var opts Options
	if o != nil {
		opts = *o
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = otelglobal.GetTracerProvider()
	}
	if opts.Propagator == nil {
		opts.Propagator = otelglobal.GetTextMapPropagator()
	}
	if opts.MetaKey == "" {
		opts.MetaKey = DefaultMetaKey
	}
	return &settings{
		tracer:  opts.TracerProvider.Tracer(ScopeName),
		prop:    opts.Propagator,
		metaKey: opts.MetaKey,
	}
}

// The attributes of the spans; the package comment lists them.
const (
	keySystem        = attribute.Key("messaging.system")
	keyOperationName = attribute.Key("messaging.operation.name")
	keyOperationType = attribute.Key("messaging.operation.type")
	keyDestination   = attribute.Key("messaging.destination.name")
	keyMessageID     = attribute.Key("messaging.message.id")
	keyBatchCount    = attribute.Key("messaging.batch.message_count")
	keyClientID      = attribute.Key("messaging.client.id")
	keyKind          = attribute.Key("sortie.job.kind")
	keyAttempt       = attribute.Key("sortie.job.attempt")
	keyDuplicate     = attribute.Key("sortie.job.duplicate")
	keyErrorType     = attribute.Key("error.type")
	keySnooze        = attribute.Key("sortie.job.snooze")
)

// system is messaging.system's value.
const system = "sortie"

// fail marks span as failed with err.
func fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(keyErrorType.String(fmt.Sprintf("%T", err)))
}
