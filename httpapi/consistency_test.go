package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A known path with another method is 405 naming the methods it takes,
// in the Allow header too; an unknown path stays 404.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	s := memServer(t, nil)
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/api/v1/fetch", "POST"},
		{"PUT", "/api/v1/jobs", "GET, POST, HEAD"},
		{"POST", "/api/v1/jobs/7", "GET, DELETE, HEAD"},
		{"GET", "/api/v1/queues/q/pause", "POST"},
	} {
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, strings.NewReader("{}")))
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != c.allow ||
			!strings.Contains(rec.Body.String(), "method not allowed") {
			t.Errorf("%s %s: %d, Allow %q, %s; want 405 with Allow %q", c.method, c.path, rec.Code, rec.Header().Get("Allow"), rec.Body, c.allow)
		}
	}
	if code, out := s.call(t, "GET", "/api/v1/nothing", ""); code != http.StatusNotFound {
		t.Errorf("GET /api/v1/nothing: %d %v, want 404", code, out)
	}
}

// An enqueue to a queue the store did not know is stored, with a warning
// saying so, once; a known queue gets none.
func TestEnqueueWarnsOfUnknownQueue(t *testing.T) {
	t.Parallel()
	s := memServer(t, nil)
	out := s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "emial"}`)
	if w := fmt.Sprint(out["warnings"]); !strings.Contains(w, `queue "emial" was not known to the store`) {
		t.Errorf("enqueue to a new queue: warnings %v", out["warnings"])
	}
	if out := s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "emial"}`); out["warnings"] != nil {
		t.Errorf("second enqueue to the queue warned again: %v", out["warnings"])
	}
	out = s.must(t, http.StatusCreated, "POST", "/api/v1/jobs/batch", `{"jobs": [{"kind": "k", "queue": "emial"}, {"kind": "k", "queue": "other"}]}`)
	res := out["results"].([]any)
	if res[0].(map[string]any)["warnings"] != nil || !strings.Contains(fmt.Sprint(res[1].(map[string]any)["warnings"]), `"other"`) {
		t.Errorf("batch results %v: want a warning on the second job only", res)
	}
}
