package otel_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sortiehq/sortie"
	sortieotel "github.com/sortiehq/sortie/contrib/otel"
	"github.com/sortiehq/sortie/store"
)

func TestEnqueueSpan(t *testing.T) {
	t.Parallel()
	tp, exp, opts := newTracing(t)
	c := newClient(t, newMemStore(t), &sortie.Config{
		EnqueueMiddleware: []sortie.EnqueueMiddleware{sortieotel.EnqueueMiddleware(opts)},
	})

	ctx, root := tp.Tracer("test").Start(context.Background(), "request")
	res, err := c.Enqueue(ctx, Greet{Name: "ada"}, &sortie.EnqueueOpts{
		Queue: "mail", Meta: map[string]any{"tenant": "acme", "n": 7},
	})
	root.End()
	if err != nil {
		t.Fatalf("Enqueue() = %v", err)
	}

	span := spanNamed(t, exp.GetSpans(), "enqueue greet")
	if span.SpanKind != trace.SpanKindProducer {
		t.Errorf("span kind = %v, want producer", span.SpanKind)
	}
	checkParent(t, span, root.SpanContext())
	checkAttrs(t, span, map[string]string{
		"messaging.system":           "sortie",
		"messaging.operation.name":   "enqueue",
		"messaging.operation.type":   "send",
		"messaging.destination.name": "mail",
		"messaging.message.id":       strconv.FormatInt(res.ID, 10),
		"sortie.job.kind":            "greet",
		"sortie.job.duplicate":       "false",
	}, "messaging.batch.message_count", "error.type")
	if span.Status.Code != codes.Unset {
		t.Errorf("span status = %v, want unset", span.Status)
	}

	sc := carried(t, c, res.ID, sortieotel.DefaultMetaKey)
	if sc.TraceID() != span.SpanContext.TraceID() || sc.SpanID() != span.SpanContext.SpanID() {
		t.Errorf("job carries span %s of trace %s, want the enqueue span %s of trace %s",
			sc.SpanID(), sc.TraceID(), span.SpanContext.SpanID(), span.SpanContext.TraceID())
	}
	meta := metaFields(t, c, res.ID)
	if got := string(meta["tenant"]); got != `"acme"` {
		t.Errorf(`Meta["tenant"] = %s, want "acme"`, got)
	}
	if got := string(meta["n"]); got != `7` {
		t.Errorf(`Meta["n"] = %s, want 7`, got)
	}
}

func TestEnqueueBatch(t *testing.T) {
	t.Parallel()
	_, exp, opts := newTracing(t)
	c := newClient(t, newMemStore(t), &sortie.Config{
		EnqueueMiddleware: []sortie.EnqueueMiddleware{sortieotel.EnqueueMiddleware(opts)},
	})

	res, err := c.EnqueueMany(context.Background(), []sortie.EnqueueParams{
		{Args: Greet{Name: "ada"}, Opts: &sortie.EnqueueOpts{Queue: "mail"}},
		{Args: Other{}, Opts: &sortie.EnqueueOpts{Queue: "chores"}},
		{Args: Greet{Name: "bob"}},
	})
	if err != nil {
		t.Fatalf("EnqueueMany() = %v", err)
	}

	span := spanNamed(t, exp.GetSpans(), "enqueue")
	if span.Parent.IsValid() {
		t.Errorf("span has parent %s, want none (the caller's context has no span)", span.Parent.SpanID())
	}
	checkAttrs(t, span, map[string]string{
		"messaging.system":              "sortie",
		"messaging.operation.name":      "enqueue",
		"messaging.batch.message_count": "3",
	}, "messaging.destination.name", "sortie.job.kind", "messaging.message.id")
	for _, r := range res {
		if sc := carried(t, c, r.ID, sortieotel.DefaultMetaKey); sc.SpanID() != span.SpanContext.SpanID() {
			t.Errorf("job %d carries span %s, want the enqueue span %s", r.ID, sc.SpanID(), span.SpanContext.SpanID())
		}
	}
}

func TestEnqueueFailure(t *testing.T) {
	t.Parallel()
	_, exp, opts := newTracing(t)
	refused := errors.New("quota exceeded")
	refuse := func(sortie.EnqueueFunc) sortie.EnqueueFunc {
		return func(context.Context, []*sortie.NewJob) ([]sortie.EnqueueResult, error) { return nil, refused }
	}
	c := newClient(t, newMemStore(t), &sortie.Config{
		EnqueueMiddleware: []sortie.EnqueueMiddleware{sortieotel.EnqueueMiddleware(opts), refuse},
	})

	if _, err := c.Enqueue(context.Background(), Greet{}, nil); !errors.Is(err, refused) {
		t.Fatalf("Enqueue() = %v, want %v", err, refused)
	}
	span := spanNamed(t, exp.GetSpans(), "enqueue greet")
	if span.Status.Code != codes.Error || span.Status.Description != "quota exceeded" {
		t.Errorf("span status = %+v, want error %q", span.Status, "quota exceeded")
	}
	checkAttrs(t, span, map[string]string{"error.type": "*errors.errorString"}, "messaging.message.id")
	if !hasEvent(span, "exception") {
		t.Errorf("span events = %v, want the error recorded as an exception", span.Events)
	}
}

func TestEnqueueDuplicate(t *testing.T) {
	t.Parallel()
	_, exp, opts := newTracing(t)
	c := newClient(t, newMemStore(t), &sortie.Config{
		EnqueueMiddleware: []sortie.EnqueueMiddleware{sortieotel.EnqueueMiddleware(opts)},
	})
	ctx := context.Background()
	first, err := c.Enqueue(ctx, Greet{}, &sortie.EnqueueOpts{UniqueKey: "once"})
	if err != nil {
		t.Fatalf("Enqueue() = %v", err)
	}
	exp.Reset()
	if _, err := c.Enqueue(ctx, Greet{}, &sortie.EnqueueOpts{UniqueKey: "once"}); err != nil {
		t.Fatalf("second Enqueue() = %v", err)
	}
	checkAttrs(t, spanNamed(t, exp.GetSpans(), "enqueue greet"), map[string]string{
		"sortie.job.duplicate": "true",
		"messaging.message.id": strconv.FormatInt(first.ID, 10),
	})
}

// TestEnqueueMetaFull enqueues a job whose Meta has no room for the trace
// context: the job is enqueued as it was, and the span says why it carries
// nothing.
func TestEnqueueMetaFull(t *testing.T) {
	t.Parallel()
	_, exp, opts := newTracing(t)
	c := newClient(t, newMemStore(t), &sortie.Config{
		EnqueueMiddleware: []sortie.EnqueueMiddleware{sortieotel.EnqueueMiddleware(opts)},
	})
	big := strings.Repeat("x", store.MaxMetaBytes-len(`{"big":""}`))

	res, err := c.Enqueue(context.Background(), Greet{}, &sortie.EnqueueOpts{Meta: map[string]any{"big": big}})
	if err != nil {
		t.Fatalf("Enqueue() with a full Meta = %v", err)
	}
	meta := metaFields(t, c, res.ID)
	if _, ok := meta[sortieotel.DefaultMetaKey]; ok || len(meta) != 1 {
		t.Errorf("Meta has keys %v, want only big", keys(meta))
	}
	if span := spanNamed(t, exp.GetSpans(), "enqueue greet"); !hasEvent(span, "trace context not carried") {
		t.Errorf("span events = %v, want one saying the trace context was not carried", span.Events)
	}
}

// TestEnqueueNothingToCarry enqueues with a tracer provider that makes no
// valid spans: Meta stays as the application left it.
func TestEnqueueNothingToCarry(t *testing.T) {
	t.Parallel()
	_, _, opts := newTracing(t)
	opts.TracerProvider = noop.NewTracerProvider()
	c := newClient(t, newMemStore(t), &sortie.Config{
		EnqueueMiddleware: []sortie.EnqueueMiddleware{sortieotel.EnqueueMiddleware(opts)},
	})
	ctx := context.Background()
	plain, err := c.Enqueue(ctx, Greet{}, nil)
	if err != nil {
		t.Fatalf("Enqueue() = %v", err)
	}
	if meta := metaFields(t, c, plain.ID); len(meta) != 0 {
		t.Errorf("Meta has keys %v, want none", keys(meta))
	}
	withMeta, err := c.Enqueue(ctx, Greet{}, &sortie.EnqueueOpts{Meta: map[string]any{"tenant": "acme"}})
	if err != nil {
		t.Fatalf("Enqueue() = %v", err)
	}
	if meta := metaFields(t, c, withMeta.ID); len(meta) != 1 {
		t.Errorf("Meta has keys %v, want only tenant", keys(meta))
	}
}
