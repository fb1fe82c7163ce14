package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/responses"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/auth"
	"github.com/sortiehq/sortie/httpapi"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store/memstore"
)

// The contract: openapi.json describes the API, and every server the
// package's tests make (newServer, newServerWith, contractChecked) checks
// each request and each answer against it with libopenapi-validator: the
// request's path, query and body against its operation, and the answer's
// status, headers and body against that operation's response. Strict mode
// makes a field, query parameter or header that the document does not
// declare a mismatch too, though the document leaves responses open for
// fields added later; args, meta and results are the application's own
// JSON and are not looked into.
//
// A test that sends a malformed request on purpose (bad JSON, an unknown
// field, a value out of range) marks it with malformed: its request is not
// checked, and its answer still is. A request to a path or method the
// document does not have must be answered 404 or 405 as the document's
// components.responses.NoSuchEndpoint and MethodNotAllowed say.

// contract is openapi.json, parsed once for the whole package.
type contract struct {
	doc   libopenapi.Document
	model *v3.Document
	// open checks requests to a server without tokens, which checks none;
	// secured those to a server with tokens, whose requests must carry
	// one.
	open, secured validator.Validator
}

var loadContract = sync.OnceValues(func() (*contract, error) {
	spec, err := os.ReadFile("openapi.json")
	if err != nil {
		return nil, err
	}
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		return nil, fmt.Errorf("parse openapi.json: %w", err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("build the model of openapi.json: %w", err)
	}
	opts := []config.Option{
		config.WithFormatAssertions(),
		config.WithCustomFormat("int64", int64Format),
		// Paths as the server matches them: /api/v1/jobs/ is not
		// /api/v1/jobs. The document names no server, so it is the one
		// that serves it.
		config.WithStrictServerMatching(),
		config.WithStrictMode(),
		config.WithStrictIgnorePaths(
			// The application's own JSON, whatever it holds.
			"$.body**.args", "$.body**.meta", "$.body**.result",
			// The members of this document, which TestOpenAPIDocumentIsValid checks.
			"$.body.info", "$.body.servers", "$.body.tags", "$.body.paths", "$.body.components"),
		// Sent by browsers; the server reads it to refuse cross-site requests.
		config.WithStrictIgnoredHeadersExtra("Sec-Fetch-Site"),
	}
	return &contract{
		doc:     doc,
		model:   &m.Model,
		open:    validator.NewValidatorFromV3Model(&m.Model, append(opts, config.WithoutSecurityValidation())...),
		secured: validator.NewValidatorFromV3Model(&m.Model, opts...),
	}, nil
})

// int64Format replaces the validator's int64 format, which reads a body's
// numbers as float64 and then refuses 9223372036854775807, read as 2^63.
// A float64 cannot tell the two apart, so this one takes both.
func int64Format(v any) error {
	var ok bool
	switch n := v.(type) {
	case float64:
		ok = n == math.Trunc(n) && n >= math.MinInt64 && n <= math.MaxInt64
	case json.Number:
		_, err := n.Int64()
		ok = err == nil
	default:
		return nil // not a number: the schema's type says what it must be
	}
	if !ok {
		return fmt.Errorf("%v is not a 64-bit integer", v)
	}
	return nil
}

// loadedContract returns the parsed openapi.json, failing t if it cannot
// be read.
func loadedContract(t testing.TB) *contract {
	t.Helper()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// contractChecked returns h, the API served with opts, behind the checks
// of every request and answer against openapi.json, reported on t.
func contractChecked(t testing.TB, h http.Handler, opts *httpapi.Options) http.Handler {
	t.Helper()
	c := loadedContract(t)
	v := c.open
	if opts != nil && (len(opts.Tokens) > 0 || opts.Keyring.Len() > 0) {
		v = c.secured
	}
	return &checker{t: t, next: h, c: c, v: v}
}

type malformedKey struct{}

// malformed marks r as malformed on purpose: openapi.json does not have to
// allow it, but the answer must match the document still.
func malformed(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), malformedKey{}, true))
}

// checker serves requests with next and checks each request and answer
// against the document with v. It is safe for concurrent use, as the
// validator is.
type checker struct {
	t    testing.TB
	next http.Handler
	c    *contract
	v    validator.Validator
}

func (h *checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		h.t.Errorf("%s %s: reading the request body: %v", r.Method, r.URL, err)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	sent := r.Clone(r.Context()) // as sent, before the mux fills in its pattern
	cw := &captured{ResponseWriter: w}
	h.next.ServeHTTP(cw, r)
	if cw.status == 0 && r.Context().Err() != nil {
		return // the client went away, and nothing was answered
	}
	h.check(sent, body, cw)
}

// check checks the request sent, with its body, and the answer cw.
func (h *checker) check(sent *http.Request, body []byte, cw *captured) {
	h.t.Helper()
	route := sent.Method + " " + sent.URL.RequestURI()
	status := cw.status
	if status == 0 {
		status = http.StatusOK // net/http's answer when a handler writes nothing
	}
	answer := func() *http.Response {
		return &http.Response{StatusCode: status, Header: cw.Header().Clone(), Request: sent,
			Body: io.NopCloser(bytes.NewReader(cw.body.Bytes()))}
	}
	if ok, errs := h.v.ValidateHttpResponse(sent, answer()); !ok {
		if noOperation(errs) {
			h.checkNoRoute(route, answer())
			return
		}
		h.t.Errorf("openapi.json: %s answered %d %.300s, which the document does not allow:\n%s", route, status, cw.body.Bytes(), describe(errs))
	}
	if sent.Context().Value(malformedKey{}) != nil {
		return
	}
	req := sent.Clone(sent.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	if len(body) > 0 && req.Header.Get("Content-Type") == "" {
		// The server reads any body as JSON whatever its label (curl -d
		// sends none); the document says application/json.
		req.Header.Set("Content-Type", "application/json")
	}
	if ok, errs := h.v.ValidateHttpRequestSync(req); !ok {
		h.t.Errorf("openapi.json: request %s %.300s does not match the document (if the test sends it so on purpose, mark it malformed):\n%s", route, body, describe(errs))
	}
}

// checkNoRoute checks the answer to a request the document has no
// operation for: 404 or 405 as its components.responses say.
func (h *checker) checkNoRoute(route string, answer *http.Response) {
	h.t.Helper()
	body, _ := io.ReadAll(answer.Body)
	name := map[int]string{http.StatusNotFound: "NoSuchEndpoint", http.StatusMethodNotAllowed: "MethodNotAllowed"}[answer.StatusCode]
	if name == "" {
		h.t.Errorf("openapi.json has no operation %s, yet the server answered %d %.300s: document the route", route, answer.StatusCode, body)
		return
	}
	resp := h.c.model.Components.Responses.GetOrZero(name)
	if ct := answer.Header.Get("Content-Type"); ct != "application/json" {
		h.t.Errorf("%s answered %d with Content-Type %q, want application/json as components.responses.%s says", route, answer.StatusCode, ct, name)
	}
	schema := resp.Content.GetOrZero("application/json").Schema.Schema()
	if ok, errs := schema_validation.NewSchemaValidator().ValidateSchemaBytes(schema, body); !ok {
		h.t.Errorf("openapi.json: %s answered %d %.300s, not components.responses.%s:\n%s", route, answer.StatusCode, body, name, describe(errs))
	}
	if ok, errs := responses.ValidateResponseHeaders(answer.Request, answer, resp.Headers, "", strconv.Itoa(answer.StatusCode)); !ok {
		h.t.Errorf("openapi.json: %s answered %d with headers %v, not components.responses.%s:\n%s", route, answer.StatusCode, answer.Header, name, describe(errs))
	}
}

// noOperation reports whether errs say the document has no operation for
// the request's path and method.
func noOperation(errs []*liberrors.ValidationError) bool {
	for _, e := range errs {
		if e.ValidationType == helpers.PathValidation {
			return true
		}
	}
	return false
}

// describe lists the validator's errors, with the fields they name.
func describe(errs []*liberrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "  - %s: %s", e.Message, e.Reason)
		for _, f := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n      %s: %s", f.FieldPath, f.Reason)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// captured passes an answer through and keeps its status and body.
type captured struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (c *captured) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *captured) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.body.Write(b)
	return c.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (c *captured) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// The document is valid OpenAPI 3.1.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	c := loadedContract(t)
	if got := c.model.Version; got != "3.1.0" {
		t.Errorf("openapi.json is OpenAPI %s, want 3.1.0", got)
	}
	v, errs := validator.NewValidator(c.doc)
	if len(errs) > 0 {
		t.Fatalf("NewValidator: %v", errs)
	}
	if ok, errs := v.ValidateDocument(); !ok {
		t.Errorf("openapi.json is not a valid OpenAPI document:\n%s", describe(errs))
	}
}

// The server serves the document as it is in the repository.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	s := memServer(t, nil)
	out := s.must(t, http.StatusOK, "GET", "/api/v1/openapi.json", "")
	if out["openapi"] != "3.1.0" {
		t.Errorf("GET /api/v1/openapi.json: openapi %v, want 3.1.0", out["openapi"])
	}
	rec := s.serve(malformed(newRequest("GET", "/api/v1/openapi.json", "")))
	if !bytes.Equal(rec.Body.Bytes(), want) {
		t.Errorf("GET /api/v1/openapi.json served %d bytes, not the %d of openapi.json", rec.Body.Len(), len(want))
	}
}

// operation is an operation of openapi.json: its method and path as the
// mux spells them, the scope it needs ("" for none), its path with the
// examples of its path parameters, and the example of its request body.
type operation struct {
	method, path, scope, target, example string
}

// pattern is the mux's pattern of op.
func (op operation) pattern() string { return op.method + " " + op.path }

// operations lists the operations of openapi.json, each with its
// examples.
func operations(t *testing.T) []operation {
	t.Helper()
	var ops []operation
	for path, item := range loadedContract(t).model.Paths.PathItems.FromOldest() {
		for method, o := range item.GetOperations().FromOldest() {
			op := operation{method: strings.ToUpper(method), path: path, target: path}
			var scopes []string
			for _, req := range o.Security {
				scopes = append(scopes, req.Requirements.GetOrZero("bearerAuth")...)
			}
			if len(scopes) > 1 {
				t.Errorf("openapi.json: %s needs scopes %v, want one", op.pattern(), scopes)
			}
			op.scope = strings.Join(scopes, ",")
			for _, p := range append(slices.Clone(item.Parameters), o.Parameters...) {
				if p.In != "path" {
					continue
				}
				if p.Example == nil {
					t.Fatalf("openapi.json: path parameter %s of %s has no example", p.Name, op.pattern())
				}
				op.target = strings.ReplaceAll(op.target, "{"+p.Name+"}", p.Example.Value)
			}
			if o.RequestBody != nil {
				ex := o.RequestBody.Content.GetOrZero("application/json").Example
				if ex == nil {
					t.Fatalf("openapi.json: the request body of %s has no example", op.pattern())
				}
				op.example = example(t, op, ex)
			}
			ops = append(ops, op)
		}
	}
	return ops
}

// example returns the JSON of a request body's example.
func example(t *testing.T, op operation, node interface{ Decode(any) error }) string {
	t.Helper()
	var v any
	if err := node.Decode(&v); err != nil {
		t.Fatalf("openapi.json: the example body of %s: %v", op.pattern(), err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every operation documents the 405 its path answers to another method,
// as the document's description promises.
func TestOpenAPIEveryOperationHas405(t *testing.T) {
	t.Parallel()
	for path, item := range loadedContract(t).model.Paths.PathItems.FromOldest() {
		for method, o := range item.GetOperations().FromOldest() {
			if o.Responses == nil || o.Responses.Codes.GetOrZero("405") == nil {
				t.Errorf("openapi.json: %s %s documents no 405", strings.ToUpper(method), path)
			}
		}
	}
}

// Every route the mux serves is in the document with the scope it needs,
// and every operation of the document is served: asked with a token of
// no scope, each names its own route and scope in the 403; with a token of
// the documented scope and the document's example body, it is let through.
func TestOpenAPIHasEveryRoute(t *testing.T) {
	t.Parallel()
	ops := operations(t)
	documented := map[string]string{}
	for _, op := range ops {
		documented[op.pattern()] = op.scope
	}
	if diff := cmp.Diff(httpapi.Routes(), documented); diff != "" {
		t.Fatalf("routes and their scopes, in the mux (-) and in openapi.json (+):\n%s", diff)
	}

	tokens := []auth.Token{{Name: "none", Secret: "no-scope-secret-0123456789"}}
	for _, sc := range auth.Scopes {
		tokens = append(tokens, auth.Token{Name: string(sc), Secret: string(sc) + "-secret-0123456789", Scopes: []auth.Scope{sc}})
	}
	s := memServer(t, &httpapi.Options{Keyring: auth.NewKeyring(tokens)})
	for _, op := range ops {
		if op.scope == "" {
			if rec := s.serve(newRequest(op.method, op.target, op.example)); rec.Code != http.StatusOK {
				t.Errorf("%s %s without a token: %d %s, want 200", op.method, op.target, rec.Code, rec.Body)
			}
			continue
		}
		rec := s.serve(malformed(newRequest(op.method, op.target, op.example, "Authorization", "Bearer no-scope-secret-0123456789")))
		if want := fmt.Sprintf("may not do this: %s needs a token with the %s scope", op.pattern(), op.scope); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s %s with a token of no scope: %d %s, want 403 saying %q", op.method, op.target, rec.Code, rec.Body, want)
		}
		rec = s.serve(newRequest(op.method, op.target, op.example, "Authorization", "Bearer "+op.scope+"-secret-0123456789"))
		if rec.Code == http.StatusUnauthorized || rec.Code == http.StatusForbidden {
			t.Errorf("%s %s with a token of scope %s: %d %s, want it let through", op.method, op.target, op.scope, rec.Code, rec.Body)
		}
	}
}

// With the store down, every operation that reads or writes it answers
// 503, as the document says.
func TestOpenAPIStoreDown(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	t.Cleanup(func() { _ = inner.Close() })
	st := storefault.New(inner)
	s := newServer(t, st, nil)
	st.Fail("*", errors.New("connection refused"))
	for _, op := range operations(t) {
		want := http.StatusServiceUnavailable
		if op.pattern() == "GET /api/v1/openapi.json" {
			want = http.StatusOK
		}
		if rec := s.serve(newRequest(op.method, op.target, op.example)); rec.Code != want {
			t.Errorf("%s %s with the store down: %d %s, want %d", op.method, op.target, rec.Code, rec.Body, want)
		}
	}
}

// An address that sent too many refused tokens is answered 429 with
// Retry-After, as the document says of every operation but the health
// check.
func TestOpenAPIThrottled(t *testing.T) {
	t.Parallel()
	s := memServer(t, &httpapi.Options{Tokens: []string{"s3cret-0123456789"}, Throttle: &auth.Throttle{Burst: 1}})
	for _, want := range []int{http.StatusUnauthorized, http.StatusTooManyRequests} {
		rec := s.serve(malformed(newRequest("GET", "/api/v1/queues", "", "Authorization", "Bearer wrong")))
		if rec.Code != want {
			t.Errorf("GET /api/v1/queues with a wrong token: %d %s, want %d", rec.Code, rec.Body, want)
		}
	}
}

// errorsKept is a testing.TB that keeps the errors reported to it.
type errorsKept struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (e *errorsKept) Helper() {}

func (e *errorsKept) Errorf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// The checks catch an API that strays from the document: each case is a
// handler answering as the server must not, or a request the document
// does not allow, and the checks must report it; the first is right and
// must pass.
func TestContractCatchesMismatches(t *testing.T) {
	t.Parallel()
	const job = `"id": 1, "kind": "k", "queue": "default", "state": "available", "priority": 2, "attempt": 0,
		"max_attempts": 25, "args": {}, "run_at": "2026-01-02T15:04:05Z", "created_at": "2026-01-02T15:04:05Z"`
	for _, tt := range []struct {
		name         string
		tokens       bool
		method, path string
		body         string
		header       []string // the request's
		status       int
		answerType   string // the answer's Content-Type; application/json if empty
		answer       string
		caught       bool
	}{
		{name: "right", method: "GET", path: "/api/v1/jobs/1", status: 200, answer: "{" + job + "}"},
		{name: "undeclared field", method: "GET", path: "/api/v1/jobs/1", status: 200, answer: "{" + job + `, "owner": "ada"}`, caught: true},
		{name: "missing field", method: "GET", path: "/api/v1/jobs/1", status: 200, answer: `{"id": 1}`, caught: true},
		{name: "wrong type", method: "GET", path: "/api/v1/jobs/1", status: 200, answer: "{" + strings.Replace(job, `"attempt": 0`, `"attempt": "0"`, 1) + "}", caught: true},
		{name: "time not RFC 3339", method: "GET", path: "/api/v1/jobs/1", status: 200, answer: "{" + strings.Replace(job, `"run_at": "2026-01-02T15:04:05Z"`, `"run_at": "tomorrow"`, 1) + "}", caught: true},
		{name: "undocumented status", method: "GET", path: "/api/v1/queues", status: 404, answer: `{"error": "no"}`, caught: true},
		{name: "error shape", method: "POST", path: "/api/v1/jobs", body: `{"kind": "k"}`, status: 400, answer: `{"message": "no"}`, caught: true},
		{name: "not JSON", method: "POST", path: "/api/v1/jobs", body: `{"kind": "k"}`, status: 201, answerType: "text/plain", answer: "ok", caught: true},
		{name: "405 without Allow", method: "PUT", path: "/api/v1/jobs", status: 405, answer: `{"error": "no"}`, caught: true},
		{name: "401 without WWW-Authenticate", tokens: true, method: "GET", path: "/api/v1/queues", status: 401, header: []string{"Authorization", "Bearer x"}, answer: `{"error": "no"}`, caught: true},
		{name: "undocumented route", method: "GET", path: "/api/v1/things", status: 200, answer: `{}`, caught: true},
		{name: "unknown request field", method: "POST", path: "/api/v1/jobs", body: `{"kind": "k", "prio": 1}`, status: 201,
			answer: `{"id": 1, "duplicate": false, "state": "available"}`, caught: true},
		{name: "request value out of range", method: "POST", path: "/api/v1/fetch", body: `{"queue": "q", "limit": 0}`, status: 200, answer: `{"jobs": []}`, caught: true},
		{name: "unknown query parameter", method: "GET", path: "/api/v1/jobs?stat=dead", status: 200, answer: `{"jobs": []}`, caught: true},
		{name: "report field of another outcome", method: "POST", path: "/api/v1/reports", body: `{"reports": [{"id": 1, "claim_token": 1, "outcome": "fail", "run_in": "1s"}]}`,
			status: 200, answer: `{"results": [{"id": 1, "recorded": true, "state": "retrying"}]}`, caught: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if tt.answerType != "" {
					w.Header().Set("Content-Type", tt.answerType)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.answer)
			})
			opts := &httpapi.Options{}
			if tt.tokens {
				opts.Tokens = []string{"x"}
			}
			kept := &errorsKept{TB: t}
			contractChecked(kept, h, opts).ServeHTTP(httptest.NewRecorder(), newRequest(tt.method, tt.path, tt.body, tt.header...))
			if caught := len(kept.errs) > 0; caught != tt.caught {
				t.Errorf("%s %s answered %d %s: reported %q, want reported %v", tt.method, tt.path, tt.status, tt.answer, kept.errs, tt.caught)
			}
		})
	}
}

// shapeArgs are the args of the workflow TestOpenAPIShapes enqueues.
type shapeArgs struct {
	Step int `json:"step"`
}

func (shapeArgs) Kind() string { return "shape" }

// Jobs in every state, with every field a job can have, and queues with
// settings and dropped jobs, read back through the API: the shapes the
// other tests do not reach are checked against openapi.json too.
func TestOpenAPIShapes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	c, err := sortie.NewClient(st, &sortie.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	for name, settings := range map[string]sortie.QueueSettings{
		"limited": {MaxRunning: 5, RateLimit: 100, RatePeriod: time.Minute, PartitionMaxRunning: 2,
			PartitionRateLimit: 10, PartitionRatePeriod: time.Second, MaxDepth: 100},
		"tiny": {MaxDepth: 1, Overflow: sortie.OverflowDropOldest},
	} {
		if _, err := c.QueueConfigure(ctx, name, settings); err != nil {
			t.Fatal(err)
		}
	}
	wf := sortie.NewWorkflow()
	wf.Add(shapeArgs{Step: 2}, &sortie.EnqueueOpts{Queue: "flow"}, wf.Add(shapeArgs{Step: 1}, &sortie.EnqueueOpts{Queue: "flow"}))
	if _, err := c.EnqueueWorkflow(ctx, wf); err != nil {
		t.Fatal(err)
	}
	opts := &httpapi.Options{Logger: quiet()}
	s := &server{h: contractChecked(t, httpapi.New(c, opts), opts), st: st}

	// Every field of an enqueue; the job runs, heartbeats, is asked to
	// cancel, and dies, which cancels its dependent before it ran.
	parent := id(t, s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "full", "args": {"a": [1]}, "queue": "limited",
		"priority": 1, "max_attempts": 1, "unique_key": "u", "tags": ["t"], "meta": {"m": true}, "timeout": "1m", "partition_key": "p"}`))
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", fmt.Sprintf(`{"kind": "child", "queue": "other", "depends_on": [%d]}`, parent))
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", fmt.Sprintf(`{"kind": "tolerant", "queue": "other", "depends_on": [%d], "ignore_dep_failure": true}`, parent))
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "later", "queue": "other", "run_in": "1h"}`)
	j := s.must(t, http.StatusOK, "POST", "/api/v1/fetch", `{"queue": "limited", "worker": "w-1"}`)["jobs"].([]any)[0].(map[string]any)
	token := j["claim_token"]
	s.must(t, http.StatusOK, "POST", fmt.Sprintf("/api/v1/jobs/%d/heartbeat", parent), fmt.Sprintf(`{"claim_token": %v, "progress": 50}`, token))
	s.must(t, http.StatusOK, "POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", parent), "")
	s.must(t, http.StatusOK, "GET", fmt.Sprintf("/api/v1/jobs/%d", parent), "")
	s.must(t, http.StatusOK, "POST", fmt.Sprintf("/api/v1/jobs/%d/fail", parent), fmt.Sprintf(`{"claim_token": %v, "error": "no"}`, token))

	// Completed with a result; retrying with an error.
	for _, q := range []string{"done", "again"} {
		s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", fmt.Sprintf(`{"kind": "k", "queue": %q, "max_attempts": 3}`, q))
	}
	j = s.must(t, http.StatusOK, "POST", "/api/v1/fetch", `{"queue": "done"}`)["jobs"].([]any)[0].(map[string]any)
	s.must(t, http.StatusOK, "POST", fmt.Sprintf("/api/v1/jobs/%v/complete", j["id"]), fmt.Sprintf(`{"claim_token": %v, "result": [1, "a"]}`, j["claim_token"]))
	j = s.must(t, http.StatusOK, "POST", "/api/v1/fetch", `{"queue": "again"}`)["jobs"].([]any)[0].(map[string]any)
	s.must(t, http.StatusOK, "POST", fmt.Sprintf("/api/v1/jobs/%v/fail", j["id"]), fmt.Sprintf(`{"claim_token": %v, "error": "later", "retry_in": "1h"}`, j["claim_token"]))

	// The tiny queue drops its oldest job to make room.
	for range 2 {
		s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "tiny"}`)
	}

	page := s.must(t, http.StatusOK, "GET", "/api/v1/jobs?limit=1000", "")
	states := map[string]bool{}
	for _, j := range page["jobs"].([]any) {
		states[j.(map[string]any)["state"].(string)] = true
	}
	for _, want := range []string{"waiting", "scheduled", "available", "retrying", "completed", "cancelled", "dead"} {
		if !states[want] {
			t.Errorf("no job %s among %v", want, page["jobs"])
		}
	}
	queues := s.must(t, http.StatusOK, "GET", "/api/v1/queues", "")
	if got := fmt.Sprint(queues["queues"]); !strings.Contains(got, "dropped:1") || !strings.Contains(got, "overflow:drop-oldest") {
		t.Errorf("queues = %s, want tiny with a dropped job and its settings", got)
	}
}

// A store outage fails every request, health probes included: the API
// warns of it once a minute, not once a request, and its request log
// keeps the 503s at the info level.
func TestStoreDownWarnedOnce(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	t.Cleanup(func() { _ = inner.Close() })
	st := storefault.New(inner)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := newServer(t, st, &httpapi.Options{Logger: log, RequestLog: log})
	st.Fail("*", errors.New("connection refused"))
	for range 5 {
		if rec := s.serve(newRequest("GET", "/api/v1/health", "")); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("GET /api/v1/health with the store down: %d %s, want 503", rec.Code, rec.Body)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "store call failed"); n != 1 {
		t.Errorf("5 requests with the store down logged %d warnings, want 1:\n%s", n, out)
	}
	if n, warned := strings.Count(out, `msg="http request"`), strings.Count(out, `level=WARN msg="http request"`); n != 5 || warned != 0 {
		t.Errorf("request log: %d lines, %d of them warnings; want 5 at info:\n%s", n, warned, out)
	}
}
