package otel_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sortiehq/sortie"
	sortieotel "github.com/sortiehq/sortie/contrib/otel"
)

// The environment of the worker process TestTwoProcesses starts: the SQLite
// file, the job to wait for, and where to write the spans.
const (
	envHelperDB    = "SORTIE_OTEL_HELPER_DB"
	envHelperJob   = "SORTIE_OTEL_HELPER_JOB"
	envHelperSpans = "SORTIE_OTEL_HELPER_SPANS"
)

// spanRecord is a span as the worker process reports it.
type spanRecord struct {
	Name         string `json:"name"`
	TraceID      string `json:"trace_id"`
	SpanID       string `json:"span_id"`
	ParentSpanID string `json:"parent_span_id"`
}

// TestTwoProcesses enqueues a job under a span into a SQLite file, and runs
// it in another process, a worker on the same file: the worker's span is
// in the enqueue's trace, a child of the enqueue span.
func TestTwoProcesses(t *testing.T) {
	t.Parallel()
	tp, exp, opts := newTracing(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "sortie.db")

	c := newClient(t, openSQLite(t, db), &sortie.Config{
		EnqueueMiddleware: []sortie.EnqueueMiddleware{sortieotel.EnqueueMiddleware(opts)},
	})
	ctx, root := tp.Tracer("test").Start(context.Background(), "request")
	res, err := c.Enqueue(ctx, Greet{Name: "ada"}, nil)
	root.End()
	if err != nil {
		t.Fatalf("Enqueue() = %v", err)
	}
	enqueue := spanNamed(t, exp.GetSpans(), "enqueue greet")

	spans := runWorkerProcess(t, db, res.ID, filepath.Join(dir, "spans.json"))
	if len(spans) != 1 || spans[0].Name != "work greet" {
		t.Fatalf("worker process reported spans %+v, want one named %q", spans, "work greet")
	}
	work := spans[0]
	if want := root.SpanContext().TraceID().String(); work.TraceID != want {
		t.Errorf("worker's span is in trace %s, want the enqueue's trace %s", work.TraceID, want)
	}
	if want := enqueue.SpanContext.SpanID().String(); work.ParentSpanID != want {
		t.Errorf("worker's span has parent %s, want the enqueue span %s", work.ParentSpanID, want)
	}
}

// runWorkerProcess runs TestHelperProcess in a new process of this test
// binary, working job id from the SQLite file db, and returns the spans it
// wrote to out.
func runWorkerProcess(t *testing.T, db string, id int64, out string) []spanRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.timeout=90s")
	cmd.Env = append(os.Environ(),
		envHelperDB+"="+db, envHelperJob+"="+strconv.FormatInt(id, 10), envHelperSpans+"="+out)
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("worker process: %v; its output:\n%s", err, output)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("read the worker process's spans: %v", err)
	}
	var spans []spanRecord
	if err := json.Unmarshal(data, &spans); err != nil {
		t.Fatalf("decode the worker process's spans %s: %v", data, err)
	}
	return spans
}

// TestHelperProcess is the worker process of TestTwoProcesses: it works the
// SQLite file until the job has finished an attempt, then writes its spans
// as JSON. Run on its own, it skips.
func TestHelperProcess(t *testing.T) {
	db := os.Getenv(envHelperDB)
	if db == "" {
		t.Skip("the worker process of TestTwoProcesses")
	}
	id, err := strconv.ParseInt(os.Getenv(envHelperJob), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", envHelperJob, err)
	}
	_, exp, opts := newTracing(t)
	cfg := workerConfig(func(context.Context, *sortie.Job[Greet]) error { return nil })
	cfg.WorkMiddleware = []sortie.WorkMiddleware{sortieotel.WorkMiddleware(opts)}
	c := newClient(t, openSQLite(t, db), cfg)
	done := finishes(t, c)
	startClient(t, context.Background(), c)
	waitFinished(t, done, id)

	data, err := json.Marshal(spanRecords(exp.GetSpans()))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv(envHelperSpans), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func spanRecords(spans tracetest.SpanStubs) []spanRecord {
	recs := make([]spanRecord, len(spans))
	for i, s := range spans {
		recs[i] = spanRecord{Name: s.Name, TraceID: s.SpanContext.TraceID().String(),
			SpanID: s.SpanContext.SpanID().String(), ParentSpanID: parentID(s.Parent)}
	}
	return recs
}

// parentID is the parent's span ID, or "" for a root span.
func parentID(parent trace.SpanContext) string {
	if !parent.IsValid() {
		return ""
	}
	return parent.SpanID().String()
}
