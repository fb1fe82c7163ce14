// Package otel traces sortie jobs with OpenTelemetry: a span for every
// enqueue and one for every attempt at running a job, joined in one trace by
// a trace context that travels inside the job.
//
// It lives in its own module, so that the sortie module does not depend on
// OpenTelemetry. Import it under another name, since OpenTelemetry's own
// package is also called otel:
//
//	import sortieotel "github.com/sortiehq/sortie/contrib/otel"
//
//	client, err := sortie.NewClient(st, &sortie.Config{
//		EnqueueMiddleware: []sortie.EnqueueMiddleware{sortieotel.EnqueueMiddleware(nil)},
//		WorkMiddleware:    []sortie.WorkMiddleware{sortieotel.WorkMiddleware(nil)},
//		// Queues, Workers...
//	})
//
// With nil options both use the global tracer provider and the global
// propagator (otel.SetTracerProvider, otel.SetTextMapPropagator). The
// global propagator carries nothing until one is set, so set one, such as
// propagation.TraceContext{}, or pass Options.Propagator.
//
// # Enqueue
//
// EnqueueMiddleware starts a producer span for every enqueue call (one for
// a whole EnqueueMany batch, periodic jobs and workflows included), as a
// child of the span in the caller's context. It writes that span's context
// into the Meta of every job of the call, under one key (Options.MetaKey,
// "otel" by default) holding the propagator's fields:
//
//	{"tenant": "acme", "otel": {"traceparent": "00-4bf9...-00f0...-01"}}
//
// The application's own Meta keys are kept as they are. A job whose Meta
// has no room for the context (Meta is at most 64 KiB) is enqueued without
// it, and the span records an event saying so: tracing never refuses a job.
//
// # Work
//
// WorkMiddleware starts a consumer span for every attempt, whose parent is
// the context carried by the job: the request that enqueued a job, the
// enqueue and every attempt of the job, retries included, are one trace,
// even when the job runs in another process. The parent is the job's
// context only, never a span of the context the client was started with;
// a job that carries none starts a new trace. The handler's context holds
// the attempt's span, so the handler's own spans are its children.
//
// A handler's error sets the span's status to Error and is recorded on it,
// as is a panic (sortie then records the panic on the job). A Cancel is an
// error too; a Snooze is not: the span records an event with the delay.
//
// Jobs claimed with Client.Take or by workers over the HTTP API do not pass
// through work middleware; they carry the same Meta for such workers to read.
//
// # Spans
//
// Span names are the operation and the kind: "enqueue email", "work email"
// ("enqueue" alone for a batch of several kinds). Attributes follow
// OpenTelemetry's messaging conventions, with the queue as the destination:
//
//	messaging.system               "sortie"
//	messaging.operation.name       "enqueue" or "work"
//	messaging.operation.type       "send" (enqueue) or "process" (work)
//	messaging.destination.name     the queue (on an enqueue, when every job shares it)
//	messaging.message.id           the job ID (on an enqueue of one job, once inserted)
//	messaging.batch.message_count  the number of jobs, on an enqueue of several
//	messaging.client.id            the client that claimed the job (work)
//	sortie.job.kind                the kind (on an enqueue, when every job shares it)
//	sortie.job.attempt             the attempt, from 1 (work)
//	sortie.job.duplicate           true when a unique job was already pending (enqueue of one job)
//	error.type                     the Go type of the error, when the enqueue or attempt failed
package otel
