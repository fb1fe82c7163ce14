package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/httpapi"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// The common failures' messages, exactly: each names the request's own
// field or the job, once, in the API's words.
func TestErrorTexts(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	c, err := sortie.NewClient(st, &sortie.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.QueueConfigure(context.Background(), "small", store.QueueSettings{MaxDepth: 1}); err != nil {
		t.Fatal(err)
	}
	opts := &httpapi.Options{Logger: quiet()}
	s := &server{h: contractChecked(t, httpapi.New(c, opts), opts), st: st}
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "small"}`)
	for _, tt := range []struct {
		method, path, body string
		status             int
		msg                string
	}{
		{"GET", "/api/v1/jobs/42", ``, 404, "job 42 not found"},
		{"POST", "/api/v1/jobs/42/retry", ``, 404, "job 42 not found"},
		{"POST", "/api/v1/jobs/42/cancel", ``, 404, "job 42 not found"},
		{"DELETE", "/api/v1/jobs/42", ``, 404, "job 42 not found"},
		{"POST", "/api/v1/jobs", `{"kind": "k", "priority": 9}`, 400, "priority must be between 1 and 4, got 9"},
		{"POST", "/api/v1/jobs", `{"kind": "k", "max_attempts": -1}`, 400, "max_attempts must be between 1 and 1000000, got -1"},
		{"POST", "/api/v1/jobs", `{"kind": "k", "run_at": "tomorrow"}`, 400, `run_at must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got "tomorrow"`},
		{"POST", "/api/v1/jobs", `{"kind": "k", "queue": "a b"}`, 400, `queue "a b" may only contain letters, digits, '_', '-', '.' and ':'`},
		{"POST", "/api/v1/jobs/batch", `{"jobs": [{"kind": "k"}, {"kind": "k", "priority": 9}]}`, 400, "jobs[1].priority must be between 1 and 4, got 9"},
		{"POST", "/api/v1/jobs", `{"kind": "k"`, 400, "request body is not valid JSON: it ends before its value does (at byte 12)"},
		{"POST", "/api/v1/jobs", `{"kind": "k", "prio": 1}`, 400, `request body has unknown field "prio"`},
		{"POST", "/api/v1/queues/a%20b/pause", ``, 400, `queue: queue name "a b" may only contain letters, digits, '_', '-', '.' and ':'`},
	} {
		code, out := s.malformedOnPurpose().call(t, tt.method, tt.path, tt.body)
		if code != tt.status || out["error"] != tt.msg {
			t.Errorf("%s %s %s:\n got %d %q\nwant %d %q", tt.method, tt.path, tt.body, code, out["error"], tt.status, tt.msg)
		}
	}
	code, out := s.call(t, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "small"}`)
	if want := `queue "small" is full: it holds at most 1 queued jobs, has 1 and was given 1 more`; code != http.StatusTooManyRequests || out["error"] != want {
		t.Errorf("enqueue into a full queue: %d %q, want 429 %q", code, out["error"], want)
	}
}

// A connection the server will close after an answer is closed with
// "Connection: close" in that answer, so a client never sends its next
// request on it (a POST sent there gets EOF, and no client may resend
// it); every other answer keeps the connection. The server closes after a
// request whose body it did not read to the end: over the limit, or left
// unread by a handler that refused the request first.
func TestAnswersSayWhenTheyClose(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	c, err := sortie.NewClient(st, &sortie.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	// With a request log, as sortie serve runs it: the handler's writer is
	// then not the server's own.
	srv := httptest.NewServer(httpapi.New(c, &httpapi.Options{Logger: quiet(), RequestLog: quiet()}))
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	pad := func(n int) string { return `{"kind": "k", "args": {"pad": "` + strings.Repeat("x", n) + `"}}` }
	for _, tt := range []struct {
		what, path, body string
		status           int
		closes           bool
	}{
		{"a body over the limit", "/api/v1/jobs", pad(2 << 20), 413, true},
		{"a large body left unread (bad job ID)", "/api/v1/jobs/seven/complete", pad(600 << 10), 400, true},
		{"a small body left unread (bad job ID)", "/api/v1/jobs/seven/complete", `{"claim_token": 7}`, 400, false},
		{"an empty batch", "/api/v1/jobs/batch", `{"jobs": []}`, 400, false},
		{"an enqueue", "/api/v1/jobs", `{"kind": "k"}`, 201, false},
	} {
		res, err := hc.Post(srv.URL+tt.path, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatalf("%s: %v", tt.what, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		if res.StatusCode != tt.status || res.Close != tt.closes {
			t.Errorf("%s: %d, Connection: close %v; want %d and %v", tt.what, res.StatusCode, res.Close, tt.status, tt.closes)
		}
	}
}
