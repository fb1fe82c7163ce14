package otel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sortiehq/sortie"
	sortieotel "github.com/sortiehq/sortie/contrib/otel"
	"github.com/sortiehq/sortie/store/memstore"
)

// Email is the example's job.
type Email struct {
	To string `json:"to"`
}

func (Email) Kind() string { return "email" }

// A request enqueues a job; a worker runs it. The three spans are one
// trace: the request, its enqueue, and the attempt, a child of the enqueue.
// A real program would export to a collector and may set the globals
// (otel.SetTracerProvider, otel.SetTextMapPropagator) and pass nil options.
func Example() {
	ctx := context.Background()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer func() { _ = tp.Shutdown(ctx) }()
	opts := &sortieotel.Options{TracerProvider: tp, Propagator: propagation.TraceContext{}}

	st := memstore.New()
	defer st.Close()
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Email]) error {
		return nil // ctx holds the attempt's span: spans started from it are its children
	}), nil)
	client, err := sortie.NewClient(st, &sortie.Config{
		Queues:            map[string]sortie.QueueConfig{sortie.QueueDefault: {MaxWorkers: 1}},
		Workers:           workers,
		EnqueueMiddleware: []sortie.EnqueueMiddleware{sortieotel.EnqueueMiddleware(opts)},
		WorkMiddleware:    []sortie.WorkMiddleware{sortieotel.WorkMiddleware(opts)},
	})
	if err != nil {
		log.Fatal(err)
	}
	finished := make(chan struct{})
	unsubscribe := client.Subscribe(func(ev *sortie.Event) {
		if ev.Kind == sortie.EventJobFinished {
			close(finished) // the one job succeeds at its first attempt
		}
	})
	defer unsubscribe()

	reqCtx, request := tp.Tracer("app").Start(ctx, "request")
	if _, err := client.Enqueue(reqCtx, Email{To: "ada@example.com"}, nil); err != nil {
		log.Fatal(err)
	}
	request.End()

	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-finished
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}

	spans := exporter.GetSpans()
	for _, s := range spans {
		fmt.Printf("%s (%s)\n", s.Name, s.SpanKind)
	}
	work, enqueue := spans[2], spans[0]
	fmt.Println("one trace:", work.SpanContext.TraceID() == request.SpanContext().TraceID())
	fmt.Println("work's parent is the enqueue:", work.Parent.SpanID() == enqueue.SpanContext.SpanID())
	// Output:
	// enqueue email (producer)
	// request (internal)
	// work email (consumer)
	// one trace: true
	// work's parent is the enqueue: true
}
