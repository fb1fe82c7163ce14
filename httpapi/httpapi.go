// Package httpapi serves sortie over HTTP: JSON under /api/v1, so programs
// in any language enqueue jobs, inspect and administer them, and run them as
// remote workers (a long-poll fetch, then complete, fail, snooze, release
// and heartbeat with the claim's token, one job a request or many reports
// in one).
//
// The handler works on a sortie.Client and through it on any store. Every
// request but the health check needs a bearer token when Options.Tokens is
// set; bodies are JSON of at most Options.MaxBodyBytes; a bad request gets a
// 4xx status and {"error": "..."} naming what is wrong.
package httpapi

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/auth"
	"github.com/sortiehq/sortie/internal/crosssite"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/strictjson"
)

// Options configure the handler. The zero value serves without
// authentication, with the defaults below.
type Options struct {
	// Tokens are bearer tokens accepted in the Authorization header with
	// every scope (auth.ScopeAdmin), when Keyring is nil. Tokens and
	// Keyring empty means no authentication: serve on loopback only.
	Tokens []string
	// Keyring holds named tokens with scopes (see package auth), and may
	// be changed while the handler serves. An endpoint needs a token
	// allowing its scope: enqueue, work (the remote worker's endpoints),
	// read (GET) or admin.
	Keyring *auth.Keyring
	// Throttle, when set, answers 429 to an address that sent too many
	// tokens that were not accepted, without looking at its token.
	Throttle *auth.Throttle
	// RequestLog, when set, gets a line per request (method, route,
	// status, duration, token name) and one per job a remote worker
	// starts or finishes.
	RequestLog *slog.Logger
	// MaxBodyBytes caps a request body. Defaults to 1 MiB.
	MaxBodyBytes int64
	// MaxResultBytes caps a result reported by a remote worker. Defaults to
	// 64 KiB, the library's default.
	MaxResultBytes int
	// MaxWait caps a fetch's long-poll. Defaults to 60 s.
	MaxWait time.Duration
	// Logger logs failed store calls. Defaults to slog.Default().
	Logger *slog.Logger
	// Stopping, when closed, makes waiting fetches answer at once with the
	// jobs they have (none), so a server shutting down gracefully is not
	// held up by long polls. Nil means never.
	Stopping <-chan struct{}
}

const (
	defaultMaxBody   = 1 << 20
	defaultMaxResult = 64 << 10
	defaultMaxWait   = 60 * time.Second
	// maxBatch caps the jobs of one batch enqueue and one fetch.
	maxBatch = 1000
)

// api is the handler's state.
type api struct {
	c     *sortie.Client
	opts  Options
	keys  *auth.Keyring
	known workedQueues
	// quiet keeps the warnings of failed store calls to one a minute: an
	// outage fails every request (health probes every second).
	quiet health.Quiet
}

// New returns the handler of the API on c.
func New(c *sortie.Client, opts *Options) http.Handler {
	a := &api{c: c}
	if opts != nil {
		a.opts = *opts
	}
	if a.opts.MaxBodyBytes <= 0 {
		a.opts.MaxBodyBytes = defaultMaxBody
	}
	if a.opts.MaxResultBytes <= 0 {
		a.opts.MaxResultBytes = defaultMaxResult
	}
	if a.opts.MaxWait <= 0 {
		a.opts.MaxWait = defaultMaxWait
	}
	if a.opts.Logger == nil {
		a.opts.Logger = slog.Default()
	}
	a.keys = auth.Plain(a.opts.Keyring, a.opts.Tokens)
	mux := http.NewServeMux()
	for _, rt := range a.routes() {
		h := a.serve(rt.handler)
		if rt.scope != "" {
			h = a.authorized(rt.scope, h)
		}
		mux.Handle(rt.pattern, h)
	}
	notFound := a.serve(func(w http.ResponseWriter, r *http.Request) error {
		if seg, ok := missingJobID(r.URL.Path); ok {
			return httperr.Errorf(http.StatusNotFound, "no such endpoint: %s %s (%s is not a job ID: was the ID left out of /api/v1/jobs/{id}/%s?)",
				r.Method, r.URL.Path, shown(seg), seg)
		}
		if allow := allowed(mux, r); len(allow) > 0 && cleanPath(r.URL.Path) {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			return httperr.Errorf(http.StatusMethodNotAllowed, "%s %s: method not allowed; this endpoint takes %s", r.Method, r.URL.Path, strings.Join(allow, " or "))
		}
		return httperr.Errorf(http.StatusNotFound, "no such endpoint: %s %s (the API is under /api/v1)", r.Method, r.URL.Path)
	})
	mux.Handle("/", notFound)
	return a.logged(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cleanPath(r.URL.Path) {
			// The mux would redirect to the cleaned path, which a client
			// following it turns from a POST into a GET.
			notFound.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// route is an endpoint of the API: its method pattern, the scope a token
// needs for it (none for the health check) and its handler. openapi.json
// describes each, and a test holds the two to each other.
type route struct {
	pattern string
	scope   auth.Scope
	handler func(w http.ResponseWriter, r *http.Request) error
}

// routes lists the API's endpoints.
func (a *api) routes() []route {
	return []route{
		{"POST /api/v1/jobs", auth.ScopeEnqueue, a.enqueue},
		{"POST /api/v1/jobs/batch", auth.ScopeEnqueue, a.enqueueBatch},
		{"GET /api/v1/jobs", auth.ScopeRead, a.list},
		{"GET /api/v1/jobs/{id}", auth.ScopeRead, a.get},
		{"POST /api/v1/jobs/{id}/retry", auth.ScopeAdmin, a.retry},
		{"POST /api/v1/jobs/{id}/cancel", auth.ScopeAdmin, a.cancel},
		{"DELETE /api/v1/jobs/{id}", auth.ScopeAdmin, a.delete},
		{"GET /api/v1/queues", auth.ScopeRead, a.queues},
		{"GET /api/v1/queues/history", auth.ScopeRead, a.queuesHistory},
		{"POST /api/v1/queues/{queue}/pause", auth.ScopeAdmin, a.pause},
		{"POST /api/v1/queues/{queue}/resume", auth.ScopeAdmin, a.resume},
		{"PATCH /api/v1/queues/{queue}", auth.ScopeAdmin, a.configure},
		{"DELETE /api/v1/queues/{queue}", auth.ScopeAdmin, a.deleteQueue},
		{"GET /api/v1/processes", auth.ScopeRead, a.processes},
		{"GET /api/v1/periodic", auth.ScopeRead, a.periodic},
		{"POST /api/v1/processes/{id}/{command}", auth.ScopeAdmin, a.processCommand},
		{"POST /api/v1/jobs/bulk", auth.ScopeAdmin, a.bulk},
		{"POST /api/v1/fetch", auth.ScopeWork, a.fetch},
		{"POST /api/v1/jobs/{id}/complete", auth.ScopeWork, a.complete},
		{"POST /api/v1/jobs/{id}/fail", auth.ScopeWork, a.fail},
		{"POST /api/v1/jobs/{id}/snooze", auth.ScopeWork, a.snooze},
		{"POST /api/v1/jobs/{id}/release", auth.ScopeWork, a.release},
		{"POST /api/v1/reports", auth.ScopeWork, a.reports},
		{"POST /api/v1/jobs/{id}/heartbeat", auth.ScopeWork, a.heartbeat},
		{"GET /api/v1/jobs/{id}/steps", auth.ScopeRead, a.steps},
		{"POST /api/v1/jobs/{id}/steps", auth.ScopeWork, a.recordStep},
		{"GET /api/v1/health", "", a.health},
		{"GET /api/v1/openapi.json", auth.ScopeRead, a.openAPI},
	}
}

// cleanPath reports whether p has no empty, "." or ".." segment, so the
// mux serves it rather than redirect.
func cleanPath(p string) bool {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// serve runs h and writes its error, if any, as {"error": ...}.
func (a *api) serve(h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, a.opts.MaxBodyBytes)
		var err error
		if why := crosssite.Refusal(r); why != "" && r.Method != http.MethodGet && r.Method != http.MethodHead {
			err = httperr.Errorf(http.StatusForbidden, "cross-origin request refused: %s; the API is not for web pages of other sites", why)
		} else {
			err = h(w, r)
		}
		if err == nil || r.Context().Err() != nil {
			// Done, or the client went away before the answer.
			return
		}
		status := statusOf(err)
		if status == http.StatusServiceUnavailable {
			kind := health.Kind(err)
			if httperr.Own(err) {
				kind = "api" // the API's own 503 (a stopped client)
			}
			if ok, held := a.quiet.Allow(kind, time.Now()); ok {
				a.opts.Logger.WarnContext(r.Context(), "http api: store call failed", slog.String("method", r.Method),
					slog.String("path", r.URL.Path), slog.String("error", err.Error()), slog.Int("failed_since_last_line", held))
			}
		}
		writeJSON(w, status, map[string]string{"error": message(err)})
	})
}

// bearer returns the token of an Authorization header of the Bearer
// scheme, whose name is case-insensitive (RFC 9110, section 11.1).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// decode reads the request's JSON body into v, strictly (package
// strictjson): field names match exactly, a key given twice, invalid UTF-8,
// unknown fields and trailing data are refused, like a body over the limit,
// with a message naming the JSON field. The Content-Type is not checked:
// the body is JSON whatever a client (curl -d) labels it.
func decode(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return httperr.Errorf(http.StatusRequestEntityTooLarge, "request body is over %d bytes", tooBig.Limit)
	case err != nil:
		return httperr.Errorf(http.StatusBadRequest, "request body could not be read: %v", err)
	case len(bytes.TrimSpace(body)) == 0:
		return httperr.Errorf(http.StatusBadRequest, "request body is empty: send a JSON object")
	}
	err = strictjson.Unmarshal(body, v)
	var syntax *strictjson.SyntaxError
	var invalid *strictjson.Error
	switch {
	case errors.As(err, &syntax):
		return httperr.Errorf(http.StatusBadRequest, "request body is not valid JSON: %v", syntax)
	case errors.As(err, &invalid):
		return httperr.Errorf(http.StatusBadRequest, "%s", invalid.Describe("request body"))
	case err != nil:
		return httperr.Errorf(http.StatusBadRequest, "request body is not valid: %v", err)
	}
	return nil
}

// pathID parses the {id} of the path.
func pathID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, httperr.Errorf(http.StatusBadRequest, "%q is not a job ID (a positive integer)", s)
	}
	return id, nil
}

// duration parses an optional Go duration ("90s") named field.
func duration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, httperr.Errorf(http.StatusBadRequest, "%s %s is not a duration like 90s or 1h30m", field, shown(s))
	}
	if d < 0 {
		return 0, httperr.Errorf(http.StatusBadRequest, "%s must not be negative, got %s", field, s)
	}
	return d, nil
}

// timeOf parses an optional RFC 3339 time named field.
func timeOf(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, httperr.Errorf(http.StatusBadRequest, "%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got %s", field, shown(s))
	}
	return t, nil
}

// shown quotes a value of the request for a message, cut short when long.
func shown(s string) string {
	const maxShown = 64
	if len(s) <= maxShown {
		return strconv.Quote(s)
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:cut], len(s))
}

// health: GET /api/v1/health, 200 {"ok": true} while the store answers
// and the client serving the API runs (or was never started); 503 with
// what is wrong otherwise, 500 once the store was found corrupt.
func (a *api) health(w http.ResponseWriter, r *http.Request) error {
	if a.c.Stopped() {
		return httperr.Errorf(http.StatusServiceUnavailable, "the client serving this API (process %s) is stopped: it rescues and prunes no jobs; restart the server", a.c.ID())
	}
	if err := a.c.StoreCorruption(); err != nil {
		return err
	}
	if _, err := a.c.JobCounts(r.Context(), ""); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, healthAnswer(a.c.ServerProblems()))
	return nil
}

// healthProblem is a store server problem in the health check's answer.
type healthProblem struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// healthAnswer is the health check's answer: ok (the store answered), and
// the store server's problems when it has any (sortie.ServerProblem).
func healthAnswer(problems []sortie.ServerProblem) any {
	if len(problems) == 0 {
		return map[string]bool{"ok": true}
	}
	out := struct {
		OK       bool            `json:"ok"`
		Problems []healthProblem `json:"problems"`
	}{OK: true}
	for _, p := range problems {
		out.Problems = append(out.Problems, healthProblem{p.Code, p.Message})
	}
	return out
}

// openAPIDoc is the API's OpenAPI 3.1 document, written by hand: every
// route above, its scope, bodies, parameters and answers. Keep it in step
// with the handlers; openapi_test.go checks every request and answer of
// the package's tests against it.
//
//go:embed openapi.json
var openAPIDoc []byte

// openAPI: GET /api/v1/openapi.json, the document above.
func (a *api) openAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
	return nil
}

// jobActions are the last segments of /api/v1/jobs/{id}/ACTION.
var jobActions = []string{"retry", "cancel", "complete", "fail", "snooze", "release", "heartbeat", "steps"}

// missingJobID reports whether p is /api/v1/jobs/ACTION, an action on a
// job whose ID was left out (a client that joined an empty ID and a
// collapsed "//"), and returns ACTION. The mux would take ACTION for the
// ID and answer 405, as if the path were right and the method wrong.
func missingJobID(p string) (string, bool) {
	seg, ok := strings.CutPrefix(p, "/api/v1/jobs/")
	seg = strings.TrimPrefix(seg, "/")
	if !ok || !slices.Contains(jobActions, seg) {
		return "", false
	}
	return seg, true
}

// allowed returns the methods mux serves r's path with, other than the
// catch-all "/": the Allow header of a 405.
func allowed(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			out = append(out, m)
		}
	}
	if slices.Contains(out, http.MethodGet) {
		out = append(out, http.MethodHead)
	}
	return out
}

// statusOf returns the HTTP status err is answered with (httperr.Status): a
// job whose kind no worker handles is invalid input.
func statusOf(err error) int {
	var ue *sortie.UnknownKindError
	if errors.As(err, &ue) {
		return http.StatusBadRequest
	}
	return httperr.Status(err)
}

// message returns the text to answer err with: a job field's range error
// names the field as the request spells it (max_attempts must be between 1
// and 1000000, got 2147483648), not as the Go API does; other invalid
// arguments and a full queue lose the library's "sortie: " prefix; other
// errors say what they say.
// A job of a batch is named by its place in the request's jobs array.
func message(err error) string {
	var fe *sortie.FieldError
	if !errors.As(err, &fe) {
		if errors.Is(err, sortie.ErrInvalidArgument) || errors.Is(err, sortie.ErrQueueFull) || errors.Is(err, sortie.ErrQueueNotEmpty) {
			// The request's own words, without the library's prefix.
			return strings.TrimPrefix(err.Error(), "sortie: ")
		}
		return err.Error()
	}
	var be *sortie.BatchJobError
	if errors.As(err, &be) {
		return fmt.Sprintf("jobs[%d].%s", be.Index, fe.Error())
	}
	return fe.Error()
}
