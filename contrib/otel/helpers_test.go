package otel_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sortiehq/sortie"
	sortieotel "github.com/sortiehq/sortie/contrib/otel"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// Greet is the job of these tests.
type Greet struct {
	Name string `json:"name"`
}

func (Greet) Kind() string { return "greet" }

// Other is a second kind, for batches of several kinds.
type Other struct{}

func (Other) Kind() string { return "other" }

// newTracing returns a tracer provider that samples every span and exports
// each one as it ends into the returned exporter, and Options using it with
// the W3C trace context.
func newTracing(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter, *sortieotel.Options) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() {
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Errorf("TracerProvider.Shutdown() = %v", err)
		}
	})
	return tp, exp, &sortieotel.Options{TracerProvider: tp, Propagator: propagation.TraceContext{}}
}

func newMemStore(t *testing.T) store.Store {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func openSQLite(t *testing.T, path string) store.Store {
	t.Helper()
	st, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatalf("sqlitestore.Open(%q) = %v", filepath.Base(path), err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// newClient makes a client on st that logs nothing.
func newClient(t *testing.T, st store.Store, cfg *sortie.Config) *sortie.Client {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	c, err := sortie.NewClient(st, cfg)
	if err != nil {
		t.Fatalf("NewClient() = %v", err)
	}
	return c
}

// startClient starts c with ctx and stops it when the test ends.
func startClient(t *testing.T, ctx context.Context, c *sortie.Client) {
	t.Helper()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop() = %v", err)
		}
	})
}

// workerConfig is a config working the default queue with one worker
// running handle for Greet jobs, retrying failures at once.
func workerConfig(handle func(ctx context.Context, job *sortie.Job[Greet]) error) *sortie.Config {
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(handle), nil)
	return &sortie.Config{
		Queues:      map[string]sortie.QueueConfig{sortie.QueueDefault: {MaxWorkers: 1}},
		Workers:     workers,
		RetryPolicy: sortie.RetryPolicyFunc(func(*sortie.JobRow) time.Duration { return 0 }),
	}
}

// finishes returns a channel receiving c's finished attempts. Call it
// before c starts. The tests finish a few attempts each, well within its
// buffer; an attempt beyond it is dropped rather than blocking the client.
func finishes(t *testing.T, c *sortie.Client) <-chan *sortie.Event {
	t.Helper()
	ch := make(chan *sortie.Event, 64)
	t.Cleanup(c.Subscribe(func(ev *sortie.Event) {
		if ev.Kind != sortie.EventJobFinished {
			return
		}
		select {
		case ch <- ev:
		default:
		}
	}))
	return ch
}

// waitFinished waits for an attempt of job id to finish and returns its
// event. Work spans end before the attempt's outcome is recorded, so the
// exporter holds the attempt's span by then.
func waitFinished(t *testing.T, ch <-chan *sortie.Event, id int64) *sortie.Event {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case ev := <-ch:
			if ev.Job.ID == id {
				return ev
			}
		case <-timeout.C:
			t.Fatalf("timed out waiting for an attempt of job %d to finish", id)
		}
	}
}

// spansNamed returns the spans named name, in the order they ended.
func spansNamed(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	return found
}

// spanNamed returns the one span named name.
func spanNamed(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	found := spansNamed(spans, name)
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1; spans: %s", len(found), name, spanNames(spans))
	}
	return found[0]
}

func spanNames(spans tracetest.SpanStubs) string {
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// checkAttrs checks that span has the attributes of want, each with its
// value as attribute.Value.String writes it, and none of the keys of absent.
func checkAttrs(t *testing.T, span tracetest.SpanStub, want map[string]string, absent ...string) {
	t.Helper()
	got := make(map[string]string, len(span.Attributes))
	for _, kv := range span.Attributes {
		got[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("span %q: attribute %s = %q (present: %t), want %q", span.Name, k, g, ok, v)
		}
	}
	for _, k := range absent {
		if g, ok := got[k]; ok {
			t.Errorf("span %q: attribute %s = %q, want none", span.Name, k, g)
		}
	}
}

// checkParent checks that child is in parent's trace, with parent as its
// parent.
func checkParent(t *testing.T, child tracetest.SpanStub, parent trace.SpanContext) {
	t.Helper()
	if got, want := child.SpanContext.TraceID(), parent.TraceID(); got != want {
		t.Errorf("span %q is in trace %s, want %s", child.Name, got, want)
	}
	if got, want := child.Parent.SpanID(), parent.SpanID(); got != want {
		t.Errorf("span %q has parent %s, want %s", child.Name, got, want)
	}
}

// metaFields returns job id's Meta as a JSON object's fields.
func metaFields(t *testing.T, c *sortie.Client, id int64) map[string]json.RawMessage {
	t.Helper()
	row, err := c.JobGet(context.Background(), id)
	if err != nil {
		t.Fatalf("JobGet(%d) = %v", id, err)
	}
	var fields map[string]json.RawMessage
	if len(row.Meta) > 0 {
		if err := json.Unmarshal(row.Meta, &fields); err != nil {
			t.Fatalf("job %d: Meta %s is not a JSON object: %v", id, row.Meta, err)
		}
	}
	return fields
}

// carried returns the W3C trace context in job id's Meta under key.
func carried(t *testing.T, c *sortie.Client, id int64, key string) trace.SpanContext {
	t.Helper()
	raw, ok := metaFields(t, c, id)[key]
	if !ok {
		t.Fatalf("job %d: Meta has no %q key", id, key)
	}
	var carrier propagation.MapCarrier
	if err := json.Unmarshal(raw, &carrier); err != nil {
		t.Fatalf("job %d: Meta[%q] = %s, not an object of strings: %v", id, key, raw, err)
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	if !sc.IsValid() {
		t.Fatalf("job %d: Meta[%q] = %s holds no valid trace context", id, key, raw)
	}
	return sc
}

// hasEvent reports whether span recorded an event named name.
func hasEvent(span tracetest.SpanStub, name string) bool {
	for _, ev := range span.Events {
		if ev.Name == name {
			return true
		}
	}
	return false
}

// keys returns the keys of fields, sorted.
func keys(fields map[string]json.RawMessage) []string {
	return slices.Sorted(maps.Keys(fields))
}
