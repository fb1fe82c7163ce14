package otel_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sortiehq/sortie"
	sortieotel "github.com/sortiehq/sortie/contrib/otel"
)

// traced adds both middlewares with opts to cfg.
func traced(cfg *sortie.Config, opts *sortieotel.Options) *sortie.Config {
	cfg.EnqueueMiddleware = []sortie.EnqueueMiddleware{sortieotel.EnqueueMiddleware(opts)}
	cfg.WorkMiddleware = []sortie.WorkMiddleware{sortieotel.WorkMiddleware(opts)}
	return cfg
}

func TestWorkSpan(t *testing.T) {
	t.Parallel()
	tp, exp, opts := newTracing(t)
	handled := make(chan trace.SpanContext, 1)
	cfg := traced(workerConfig(func(ctx context.Context, job *sortie.Job[Greet]) error {
		handled <- trace.SpanContextFromContext(ctx)
		return nil
	}), opts)
	cfg.ID = "worker-1"
	c := newClient(t, newMemStore(t), cfg)
	done := finishes(t, c)
	startClient(t, context.Background(), c)

	ctx, root := tp.Tracer("test").Start(context.Background(), "request")
	res, err := c.Enqueue(ctx, Greet{Name: "ada"}, nil)
	root.End()
	if err != nil {
		t.Fatalf("Enqueue() = %v", err)
	}
	waitFinished(t, done, res.ID)

	spans := exp.GetSpans()
	enqueue := spanNamed(t, spans, "enqueue greet")
	work := spanNamed(t, spans, "work greet")
	if work.SpanKind != trace.SpanKindConsumer {
		t.Errorf("span kind = %v, want consumer", work.SpanKind)
	}
	checkParent(t, work, enqueue.SpanContext)
	checkParent(t, enqueue, root.SpanContext())
	checkAttrs(t, work, map[string]string{
		"messaging.system":           "sortie",
		"messaging.operation.name":   "work",
		"messaging.operation.type":   "process",
		"messaging.destination.name": sortie.QueueDefault,
		"messaging.message.id":       strconv.FormatInt(res.ID, 10),
		"messaging.client.id":        "worker-1",
		"sortie.job.kind":            "greet",
		"sortie.job.attempt":         "1",
	}, "error.type")
	if work.Status.Code != codes.Unset {
		t.Errorf("span status = %+v, want unset", work.Status)
	}
	if got := <-handled; got.SpanID() != work.SpanContext.SpanID() {
		t.Errorf("the handler's context holds span %s, want the work span %s", got.SpanID(), work.SpanContext.SpanID())
	}
}

func TestWorkOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		handle    func() error
		wantCode  codes.Code
		wantDesc  string
		wantEvent string
	}{
		{name: "completed", handle: func() error { return nil }, wantCode: codes.Unset},
		{name: "failed", handle: func() error { return errors.New("smtp down") },
			wantCode: codes.Error, wantDesc: "smtp down", wantEvent: "exception"},
		{name: "cancelled", handle: func() error { return sortie.Cancel(errors.New("unsubscribed")) },
			wantCode: codes.Error, wantDesc: "job cancelled: unsubscribed", wantEvent: "exception"},
		{name: "snoozed", handle: func() error { return sortie.Snooze(time.Hour) },
			wantCode: codes.Unset, wantEvent: "job snoozed"},
		{name: "panicked", handle: func() error { panic("out of envelopes") },
			wantCode: codes.Error, wantDesc: "handler panicked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, exp, opts := newTracing(t)
			cfg := traced(workerConfig(func(context.Context, *sortie.Job[Greet]) error { return tt.handle() }), opts)
			c := newClient(t, newMemStore(t), cfg)
			done := finishes(t, c)
			startClient(t, context.Background(), c)

			res, err := c.Enqueue(context.Background(), Greet{}, &sortie.EnqueueOpts{MaxAttempts: 1})
			if err != nil {
				t.Fatalf("Enqueue() = %v", err)
			}
			waitFinished(t, done, res.ID)

			work := spanNamed(t, exp.GetSpans(), "work greet")
			if work.Status.Code != tt.wantCode || work.Status.Description != tt.wantDesc {
				t.Errorf("span status = %+v, want %v %q", work.Status, tt.wantCode, tt.wantDesc)
			}
			if tt.wantEvent != "" && !hasEvent(work, tt.wantEvent) {
				t.Errorf("span events = %v, want %q", work.Events, tt.wantEvent)
			}
		})
	}
}

// TestWorkRetries fails a job's first attempt: both attempts have a span,
// each a child of the enqueue span.
func TestWorkRetries(t *testing.T) {
	t.Parallel()
	_, exp, opts := newTracing(t)
	cfg := traced(workerConfig(func(_ context.Context, job *sortie.Job[Greet]) error {
		if job.Attempt == 1 {
			return errors.New("flaky")
		}
		return nil
	}), opts)
	c := newClient(t, newMemStore(t), cfg)
	done := finishes(t, c)
	startClient(t, context.Background(), c)

	res, err := c.Enqueue(context.Background(), Greet{}, nil)
	if err != nil {
		t.Fatalf("Enqueue() = %v", err)
	}
	if ev := waitFinished(t, done, res.ID); ev.Outcome != sortie.OutcomeRetrying {
		t.Fatalf("first attempt ended %s, want %s", ev.Outcome, sortie.OutcomeRetrying)
	}
	waitFinished(t, done, res.ID)

	spans := exp.GetSpans()
	enqueue := spanNamed(t, spans, "enqueue greet")
	works := spansNamed(spans, "work greet")
	if len(works) != 2 {
		t.Fatalf("%d work spans, want 2; spans: %s", len(works), spanNames(spans))
	}
	for i, work := range works {
		checkParent(t, work, enqueue.SpanContext)
		checkAttrs(t, work, map[string]string{"sortie.job.attempt": strconv.Itoa(i + 1)})
	}
	if works[0].Status.Code != codes.Error || works[1].Status.Code != codes.Unset {
		t.Errorf("span statuses = %v, %v; want error, unset", works[0].Status.Code, works[1].Status.Code)
	}
}

// TestWorkNewTrace runs a job that carries no trace context on a client
// started inside a span: the attempt starts a trace of its own rather than
// joining the client's.
func TestWorkNewTrace(t *testing.T) {
	t.Parallel()
	tp, exp, opts := newTracing(t)
	cfg := workerConfig(func(context.Context, *sortie.Job[Greet]) error { return nil })
	cfg.WorkMiddleware = []sortie.WorkMiddleware{sortieotel.WorkMiddleware(opts)}
	c := newClient(t, newMemStore(t), cfg)
	done := finishes(t, c)
	ctx, process := tp.Tracer("test").Start(context.Background(), "process")
	defer process.End()
	startClient(t, ctx, c)

	res, err := c.Enqueue(context.Background(), Greet{}, nil)
	if err != nil {
		t.Fatalf("Enqueue() = %v", err)
	}
	waitFinished(t, done, res.ID)

	work := spanNamed(t, exp.GetSpans(), "work greet")
	if work.Parent.IsValid() {
		t.Errorf("span has parent %s, want none", work.Parent.SpanID())
	}
	if work.SpanContext.TraceID() == process.SpanContext().TraceID() {
		t.Errorf("span is in the trace of the client's start, want a trace of its own")
	}
}

// TestWorkBaggage carries baggage along with the trace context, under
// another Meta key.
func TestWorkBaggage(t *testing.T) {
	t.Parallel()
	_, exp, opts := newTracing(t)
	opts.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	opts.MetaKey = "trace"
	tenants := make(chan string, 1)
	cfg := traced(workerConfig(func(ctx context.Context, _ *sortie.Job[Greet]) error {
		tenants <- baggage.FromContext(ctx).Member("tenant").Value()
		return nil
	}), opts)
	c := newClient(t, newMemStore(t), cfg)
	done := finishes(t, c)
	startClient(t, context.Background(), c)

	member, err := baggage.NewMember("tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(baggage.ContextWithBaggage(context.Background(), bag), Greet{}, nil)
	if err != nil {
		t.Fatalf("Enqueue() = %v", err)
	}
	waitFinished(t, done, res.ID)

	if got := <-tenants; got != "acme" {
		t.Errorf("the handler's baggage has tenant %q, want %q", got, "acme")
	}
	meta := metaFields(t, c, res.ID)
	if _, ok := meta[sortieotel.DefaultMetaKey]; ok {
		t.Errorf("Meta has keys %v, want the context under %q only", keys(meta), "trace")
	}
	spans := exp.GetSpans()
	checkParent(t, spanNamed(t, spans, "work greet"), carried(t, c, res.ID, "trace"))
}
