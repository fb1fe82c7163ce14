package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/httpapi"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
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

// An enqueue to a queue no running process works is stored, with a
// warning saying so; a worked queue gets none, and so does every queue
// while no process is registered (nothing is known then).
func TestEnqueueWarnsOfUnworkedQueue(t *testing.T) {
	t.Parallel()
	s := memServer(t, nil)
	if out := s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "emial"}`); out["warnings"] != nil {
		t.Errorf("warned with no process registered: %v", out["warnings"])
	}
	s2 := memServer(t, nil)
	now := time.Now()
	if _, err := s2.st.ProcessBeat(t.Context(), &store.ProcessBeatParams{Now: now, Process: store.ProcessRow{ID: "w", StartedAt: now,
		Queues: []store.ProcessQueue{{Queue: "mail", Workers: 1}, {Queue: "default", Workers: 1}}}}); err != nil {
		t.Fatal(err)
	}
	out := s2.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "emial"}`)
	if w := fmt.Sprint(out["warnings"]); !strings.Contains(w, `no running worker works queue "emial"`) {
		t.Errorf("enqueue to an unworked queue: warnings %v", out["warnings"])
	}
	if out := s2.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "mail"}`); out["warnings"] != nil {
		t.Errorf("enqueue to a worked queue warned: %v", out["warnings"])
	}
	out = s2.must(t, http.StatusCreated, "POST", "/api/v1/jobs/batch", `{"jobs": [{"kind": "k"}, {"kind": "k", "queue": "other"}]}`)
	res := out["results"].([]any)
	if res[0].(map[string]any)["warnings"] != nil || !strings.Contains(fmt.Sprint(res[1].(map[string]any)["warnings"]), `"other"`) {
		t.Errorf("batch results %v: want a warning on the second job only", res)
	}

	// sortie serve alone: only its own client, which works no queue, is
	// registered; a queue a remote worker fetches from through the API
	// counts as worked.
	s3 := memServer(t, nil)
	if _, err := s3.st.ProcessBeat(t.Context(), &store.ProcessBeatParams{Now: now, Process: store.ProcessRow{ID: "serve", StartedAt: now}}); err != nil {
		t.Fatal(err)
	}
	out = s3.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "mail"}`)
	if w := fmt.Sprint(out["warnings"]); !strings.Contains(w, `no running worker works queue "mail"`) {
		t.Errorf("enqueue beside sortie serve alone: warnings %v, want one", out["warnings"])
	}
	s3.must(t, http.StatusOK, "POST", "/api/v1/fetch", `{"queue": "mail", "wait": "0s"}`)
	if out := s3.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "mail"}`); out["warnings"] != nil {
		t.Errorf("enqueue to a queue a remote worker fetches from warned: %v", out["warnings"])
	}
}

// POST /api/v1/jobs/bulk acts on the jobs a filter matches, at most max a
// request, newest first, and says where to go on.
func TestBulk(t *testing.T) {
	t.Parallel()
	s := memServer(t, nil)
	for range 5 {
		s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "bulk"}`)
	}
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "keep"}`)
	out := s.must(t, http.StatusOK, "POST", "/api/v1/jobs/bulk", `{"action": "cancel", "queue": "bulk", "max": 3}`)
	if out["changed"] != float64(3) || out["next_after"] == float64(0) || fmt.Sprint(out["failed"]) != "[]" {
		t.Fatalf("first batch: %v, want 3 changed and a next_after", out)
	}
	out = s.must(t, http.StatusOK, "POST", "/api/v1/jobs/bulk",
		fmt.Sprintf(`{"action": "cancel", "queue": "bulk", "max": 3, "after": %v}`, out["next_after"]))
	if out["changed"] != float64(2) || out["next_after"] != float64(0) {
		t.Fatalf("second batch: %v, want the last 2 and next_after 0", out)
	}
	list := s.must(t, http.StatusOK, "GET", "/api/v1/jobs?state=cancelled&limit=100", "")
	if n := len(list["jobs"].([]any)); n != 5 {
		t.Errorf("%d jobs cancelled, want the 5 of queue bulk", n)
	}
	for _, c := range []struct{ body, want string }{
		{`{"queue": "bulk"}`, "action is required"},
		{`{"action": "purge", "queue": "bulk"}`, `action must be retry, cancel or delete, got "purge"`},
		{`{"action": "retry"}`, "a filter is required"},
		{`{"action": "retry", "state": "gone"}`, `state "gone" is not a job state`},
		{`{"action": "retry", "queue": "q", "max": 0}`, "max must be 1 to 10000, got 0"},
	} {
		if code, out := s.malformedOnPurpose().call(t, "POST", "/api/v1/jobs/bulk", c.body); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), c.want) {
			t.Errorf("bulk %s: %d %v, want 400 %q", c.body, code, out, c.want)
		}
	}
}

// PATCH /api/v1/queues/{queue} changes the settings it names and keeps
// the others; bad values are refused by their JSON names.
func TestConfigureQueue(t *testing.T) {
	t.Parallel()
	s := memServer(t, nil)
	out := s.must(t, http.StatusOK, "PATCH", "/api/v1/queues/mail?create=true", `{"max_running": 4, "rate_limit": 10, "rate_period": "1s"}`)
	if st := out["settings"].(map[string]any); st["max_running"] != float64(4) || st["rate_limit"] != float64(10) || st["rate_period"] != "1s" {
		t.Fatalf("after PATCH: %v", out)
	}
	out = s.must(t, http.StatusOK, "PATCH", "/api/v1/queues/mail", `{"max_running": 0, "max_depth": 100, "overflow": "drop-oldest"}`)
	if st := out["settings"].(map[string]any); st["max_running"] != nil || st["rate_limit"] != float64(10) || st["max_depth"] != float64(100) || st["overflow"] != "drop-oldest" {
		t.Errorf("second PATCH kept or changed the wrong settings: %v", out)
	}
	for _, c := range []struct{ body, want string }{
		{`{}`, "request body changes no setting"},
		{`{"max_running": -1}`, "max_running must not be negative"},
		{`{"partition_rate_limit": 3}`, "partition_rate_limit is 3 but partition_rate_period is not set"},
		{`{"rate_period": "soon"}`, `rate_period must be a positive duration like 1s or 1m, got "soon"`},
		{`{"overflow": "spill"}`, `overflow must be reject or drop-oldest, got "spill"`},
		{`{"maxRunning": 3}`, `unknown field "maxRunning"`},
	} {
		if code, out := s.malformedOnPurpose().call(t, "PATCH", "/api/v1/queues/mail", c.body); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), c.want) {
			t.Errorf("PATCH %s: %d %v, want 400 %q", c.body, code, out, c.want)
		}
	}
}

// Pausing, resuming or configuring a queue nothing uses is refused with the
// known queues, unless ?create=true makes it on purpose; DELETE removes an
// empty queue and refuses one with jobs.
func TestQueueTyposAndDelete(t *testing.T) {
	t.Parallel()
	s := memServer(t, nil)
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "mail"}`)
	for _, c := range []struct{ method, path, body, hint string }{
		{"POST", "/api/v1/queues/mial/pause", "", "; add ?create=true to make it"},
		{"POST", "/api/v1/queues/mial/resume", "", ""},
		{"PATCH", "/api/v1/queues/mial", `{"max_running": 2}`, "; add ?create=true to make it"},
		{"DELETE", "/api/v1/queues/mial", "", ""},
	} {
		want := `unknown queue "mial": no job, setting, pause or running process uses it (known queues: mail)` + c.hint
		if code, out := s.call(t, c.method, c.path, c.body); code != http.StatusNotFound || out["error"] != want {
			t.Errorf("%s %s: %d %v, want 404 %q", c.method, c.path, code, out, want)
		}
	}
	if code, out := s.malformedOnPurpose().call(t, "POST", "/api/v1/queues/mial/pause?create=yes", ""); code != 400 || out["error"] != `create must be true or false, got "yes"` {
		t.Errorf("pause?create=yes: %d %v, want 400", code, out)
	}
	if out := s.must(t, http.StatusOK, "POST", "/api/v1/queues/mial/pause?create=true", ""); out["paused"] != true {
		t.Errorf("pause?create=true: %v", out)
	}
	code, out := s.call(t, "DELETE", "/api/v1/queues/mail", "")
	if code != http.StatusConflict || out["error"] != `queue is not empty: queue "mail" holds 1 job: delete its jobs (or let retention prune the finished ones) first` {
		t.Errorf("DELETE of a queue with a job: %d %v, want 409", code, out)
	}
	if out := s.must(t, http.StatusOK, "DELETE", "/api/v1/queues/mial", ""); out["deleted"] != "mial" {
		t.Errorf("DELETE of an empty queue: %v", out)
	}
	list := s.must(t, http.StatusOK, "GET", "/api/v1/queues", "")
	if qs := list["queues"].([]any); len(qs) != 1 || qs[0].(map[string]any)["name"] != "mail" {
		t.Errorf("queues after DELETE: %v, want mail only", list)
	}
}

// GET /api/v1/processes lists the registry; POST .../quiet|stop sends a
// command, 404 for an unknown process or command.
func TestProcessesEndpoints(t *testing.T) {
	t.Parallel()
	s := memServer(t, nil)
	now := time.Now()
	if _, err := s.st.ProcessBeat(t.Context(), &store.ProcessBeatParams{Now: now, Process: store.ProcessRow{ID: "w-1", Host: "h", PID: 7,
		StartedAt: now, Queues: []store.ProcessQueue{{Queue: "q", Workers: 2}}}}); err != nil {
		t.Fatal(err)
	}
	out := s.must(t, http.StatusOK, "GET", "/api/v1/processes", "")
	ps := out["processes"].([]any)
	if len(ps) != 1 || ps[0].(map[string]any)["id"] != "w-1" || ps[0].(map[string]any)["alive"] != true {
		t.Fatalf("processes = %v", out)
	}
	if out := s.must(t, http.StatusOK, "POST", "/api/v1/processes/w-1/stop", ""); out["stop"] != true {
		t.Errorf("after stop: %v", out)
	}
	if code, out := s.call(t, "POST", "/api/v1/processes/nobody/quiet", ""); code != 404 || !strings.Contains(fmt.Sprint(out["error"]), `process "nobody" not found`) {
		t.Errorf("quiet of an unknown process: %d %v", code, out)
	}
	if code, _ := s.malformedOnPurpose().call(t, "POST", "/api/v1/processes/w-1/pause", ""); code != 404 {
		t.Errorf("unknown command: %d, want 404", code)
	}
}

// The API refuses to quiet or stop the client that serves it (it would
// keep answering with no rescue and no retention, and quiet would stop the
// remote workers' fetches), and its health says when that client is
// stopped some other way.
func TestProcessCommandRefusesItsOwnClient(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	c, err := sortie.NewClient(st, &sortie.Config{ID: "serve-1", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	opts := &httpapi.Options{Logger: quiet()}
	s := &server{h: contractChecked(t, httpapi.New(c, opts), opts), st: st}
	for _, cmd := range []string{"stop", "quiet"} {
		code, out := s.call(t, "POST", "/api/v1/processes/serve-1/"+cmd, "")
		if code != http.StatusConflict || !strings.Contains(fmt.Sprint(out["error"]), `process "serve-1" is the one serving this API: stop it with SIGTERM`) {
			t.Errorf("%s of the serving client: %d %v, want 409 saying to stop the server with SIGTERM", cmd, code, out)
		}
	}
	if c.Stopped() {
		t.Fatal("the serving client stopped")
	}
	s.must(t, http.StatusOK, "GET", "/api/v1/health", "")
	if err := c.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	code, out := s.call(t, "GET", "/api/v1/health", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(out["error"]), "the client serving this API (process serve-1) is stopped") {
		t.Errorf("health with the serving client stopped: %d %v, want 503 saying so", code, out)
	}
}

// Once the serving client's own work found the store corrupt, health
// answers 500 with the damage, not 200 or an outage's 503.
func TestHealthReportsCorruption(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	t.Cleanup(func() { _ = inner.Close() })
	st := storefault.New(inner)
	t.Cleanup(st.Heal)
	c, err := sortie.NewClient(st, &sortie.Config{RescueInterval: time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	opts := &httpapi.Options{Logger: quiet()}
	s := &server{h: contractChecked(t, httpapi.New(c, opts), opts), st: st}
	s.must(t, http.StatusOK, "GET", "/api/v1/health", "")
	st.Fail("JobRescue", fmt.Errorf("/data/sortie.db is corrupt: database disk image is malformed; restore it from a backup: %w", store.ErrCorrupt))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n := st.Calls("JobRescue")
	if err := st.WaitCalls(ctx, "JobRescue", n+2); err != nil { // one failed and was recorded
		t.Fatal(err)
	}
	code, out := s.call(t, "GET", "/api/v1/health", "")
	if code != http.StatusInternalServerError || !strings.Contains(fmt.Sprint(out["error"]), "/data/sortie.db is corrupt: ") {
		t.Errorf("health with a corrupt store: %d %v, want 500 naming the damage", code, out)
	}
}

// GET /api/v1/periodic lists the schedules with their live runners.
func TestPeriodicEndpoint(t *testing.T) {
	t.Parallel()
	s := memServer(t, nil)
	now := time.Now()
	if _, err := s.st.ProcessBeat(t.Context(), &store.ProcessBeatParams{Now: now, Process: store.ProcessRow{ID: "w-1", StartedAt: now,
		Periodic: []store.ProcessSchedule{{Name: "tick", Spec: "every 1m0s", Misfire: "skip", Next: now.Add(time.Minute)}}}}); err != nil {
		t.Fatal(err)
	}
	out := s.must(t, http.StatusOK, "GET", "/api/v1/periodic", "")
	sc := out["schedules"].([]any)
	if len(sc) != 1 || sc[0].(map[string]any)["spec"] != "every 1m0s" || fmt.Sprint(sc[0].(map[string]any)["run_by"]) != "[w-1]" {
		t.Errorf("schedules = %v", out)
	}
}

// GET /api/v1/jobs searches by tag, args and error text too, capped at
// scan_max jobs a request.
func TestSearchJobs(t *testing.T) {
	t.Parallel()
	s := memServer(t, nil)
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "tags": ["vip"], "args": {"user": {"id": 42}}}`)
	for range 5 {
		s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "args": {"user": {"id": 7}}}`)
	}
	out := s.must(t, http.StatusOK, "GET", "/api/v1/jobs?tag=vip", "")
	if jobs := out["jobs"].([]any); len(jobs) != 1 || out["capped"] != false {
		t.Errorf("tag=vip: %v", out)
	}
	out = s.must(t, http.StatusOK, "GET", "/api/v1/jobs?args=user.id%3D7&limit=2", "")
	if jobs := out["jobs"].([]any); len(jobs) != 2 || out["next_after"] == float64(0) {
		t.Errorf("args=user.id=7&limit=2: %v", out)
	}
	out = s.must(t, http.StatusOK, "GET", "/api/v1/jobs?desc=true&tag=vip&scan_max=3", "")
	if jobs := out["jobs"].([]any); len(jobs) != 0 || out["capped"] != true || out["scanned"] != float64(3) || out["next_after"] == float64(0) {
		t.Errorf("a capped search: %v", out)
	}
	for _, c := range []struct{ query, want string }{
		{"args=user.id", `args: "user.id" is not PATH=VALUE`},
		{"scan_max=0", "scan_max must be an integer from 1 to 100000"},
		{"created_after=yesterday", "created_after must be an RFC 3339 time"},
		{"colour=red", `unknown query parameter "colour"`},
	} {
		if code, out := s.malformedOnPurpose().call(t, "GET", "/api/v1/jobs?"+c.query, ""); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), c.want) {
			t.Errorf("%s: %d %v, want 400 %q", c.query, code, out, c.want)
		}
	}
}
