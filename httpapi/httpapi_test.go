package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/httpapi"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// server is the API on a store, with the store at hand to check effects.
// Its handler checks every request and answer against openapi.json
// (openapi_test.go).
type server struct {
	h  http.Handler
	st store.Store
	// malformed marks the requests call and must send as malformed on
	// purpose: their answers are checked against openapi.json, the requests
	// themselves not.
	malformed bool
}

func newServer(t testing.TB, st store.Store, opts *httpapi.Options) *server {
	t.Helper()
	return newServerWith(t, st, &sortie.Config{Logger: quiet()}, opts)
}

// newServerWith is newServer with the serving client's config.
func newServerWith(t testing.TB, st store.Store, cfg *sortie.Config, opts *httpapi.Options) *server {
	t.Helper()
	if opts == nil {
		opts = &httpapi.Options{}
	}
	return &server{h: contractChecked(t, newHandler(t, st, cfg, opts), opts), st: st}
}

// newHandler returns the API on st, unchecked (for benchmarks).
func newHandler(t testing.TB, st store.Store, cfg *sortie.Config, opts *httpapi.Options) http.Handler {
	t.Helper()
	c, err := sortie.NewClient(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if opts == nil {
		opts = &httpapi.Options{}
	}
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	return httpapi.New(c, opts)
}

// malformedOnPurpose returns s sending its requests as malformed on purpose.
func (s *server) malformedOnPurpose() *server {
	m := *s
	m.malformed = true
	return &m
}

func memServer(t *testing.T, opts *httpapi.Options) *server {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	return newServer(t, st, opts)
}

// onStores runs test on the API over a memstore, and over Redis when
// SORTIE_TEST_REDIS_URL names a server, as parallel subtests.
func onStores(t *testing.T, test func(*testing.T, *server)) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		new  func(*testing.T) store.Store
	}{
		{"memory", func(t *testing.T) store.Store {
			st := memstore.New()
			t.Cleanup(func() { _ = st.Close() })
			return st
		}},
		{"redis", redisStore},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			test(t, newServer(t, tt.new(t), nil))
		})
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newRequest returns a request with body and the headers named, in name,
// value pairs.
func newRequest(method, path, body string, header ...string) *http.Request {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// serve sends req and returns the answer.
func (s *server) serve(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req)
	return rec
}

// exactNumbers replaces, in a decoded JSON value, each whole number too
// large for %v to print as digits (job IDs and claim tokens: Redis's
// follow its clock in microseconds) with a json.Number of its digits, so
// the tests send back exactly what they got.
func exactNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = exactNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = exactNumbers(e)
		}
	case float64:
		if x == math.Trunc(x) && math.Abs(x) >= 1e6 && math.Abs(x) < 1<<53 {
			return json.Number(strconv.FormatInt(int64(x), 10))
		}
	}
	return v
}

// idOf returns a job ID of a decoded JSON answer.
func idOf(v any) int64 {
	switch x := v.(type) {
	case json.Number:
		n, _ := x.Int64()
		return n
	case float64:
		return int64(x)
	}
	return 0
}

// call sends a request and returns the status and the decoded JSON body.
func (s *server) call(t *testing.T, method, path, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req := newRequest(method, path, body, header...)
	if s.malformed {
		req = malformed(req)
	}
	rec := s.serve(req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: body %q is not a JSON object: %v", method, path, rec.Body.String(), err)
	}
	exactNumbers(out)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return rec.Code, out
}

// must sends a request that must answer want.
func (s *server) must(t *testing.T, want int, method, path, body string) map[string]any {
	t.Helper()
	code, out := s.call(t, method, path, body)
	if code != want {
		t.Fatalf("%s %s %s: status %d %v, want %d", method, path, body, code, out, want)
	}
	return out
}

func (s *server) row(t *testing.T, id int64) *store.JobRow {
	t.Helper()
	row, err := s.st.JobGet(context.Background(), &store.JobGetParams{ID: id})
	if err != nil {
		t.Fatalf("JobGet(%d): %v", id, err)
	}
	return row
}

func id(t *testing.T, out map[string]any) int64 {
	t.Helper()
	v := idOf(out["id"])
	if v == 0 {
		t.Fatalf("answer %v has no id", out)
	}
	return v
}

func TestEnqueueAndInspect(t *testing.T) { onStores(t, testEnqueueAndInspect) }

func testEnqueueAndInspect(t *testing.T, s *server) {
	out := s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "email.send", "args": {"to": "ada@example.com"},
		"queue": "mail", "priority": 1, "max_attempts": 3, "tags": ["welcome"], "meta": {"by": "signup"}, "timeout": "30s",
		"unique_key": "welcome:ada", "partition_key": "tenant-7"}`)
	welcome := id(t, out)
	if out["duplicate"] != false || out["state"] != "available" {
		t.Errorf("enqueue answered %v, want a new available job", out)
	}
	row := s.row(t, welcome)
	if row.Kind != "email.send" || row.Queue != "mail" || row.Priority != 1 || row.MaxAttempts != 3 || !slices.Equal(row.Tags, []string{"welcome"}) ||
		row.Timeout != 30*time.Second || row.UniqueKey != "welcome:ada" || row.PartitionKey != "tenant-7" ||
		string(row.Args) != `{"to":"ada@example.com"}` || string(row.Meta) != `{"by":"signup"}` {
		t.Errorf("stored job = %+v, want what was sent", row)
	}
	dup := s.must(t, http.StatusOK, "POST", "/api/v1/jobs", `{"kind": "email.send", "unique_key": "welcome:ada"}`)
	if dup["duplicate"] != true || id(t, dup) != welcome {
		t.Errorf("duplicate enqueue answered %v, want duplicate of job %d", dup, welcome)
	}
	later := id(t, s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "report", "run_in": "1h"}`))
	if st := s.row(t, later).State; st != store.JobStateScheduled {
		t.Errorf("job with run_in is %s, want scheduled", st)
	}

	// A batch is one result per job in order, or nothing at all.
	batch := s.must(t, http.StatusCreated, "POST", "/api/v1/jobs/batch", `{"jobs": [{"kind": "a"}, {"kind": "b", "queue": "mail"}]}`)
	results, _ := batch["results"].([]any)
	if len(results) != 2 {
		t.Fatalf("batch answered %v, want two results", batch)
	}
	if code, out := s.malformedOnPurpose().call(t, "POST", "/api/v1/jobs/batch", `{"jobs": [{"kind": "c"}, {"kind": "d", "priority": 9}]}`); code != http.StatusBadRequest ||
		fmt.Sprint(out["error"]) != "jobs[1].priority must be between 1 and 4, got 9" {
		t.Errorf("batch with a bad job: %d %v, want 400 naming the job and the field", code, out)
	}
	counts, err := s.st.JobCounts(context.Background(), &store.JobCountsParams{})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, c := range counts {
		total += c.Count
	}
	if total != 4 {
		t.Errorf("%d jobs stored, want 4 (the duplicate or the failed batch inserted some)", total)
	}

	// Get and list.
	got := s.must(t, http.StatusOK, "GET", fmt.Sprintf("/api/v1/jobs/%d", welcome), "")
	if got["kind"] != "email.send" || got["state"] != "available" || fmt.Sprint(got["args"]) != "map[to:ada@example.com]" {
		t.Errorf("GET job = %v", got)
	}
	page := s.must(t, http.StatusOK, "GET", "/api/v1/jobs?queue=mail&state=available&limit=1", "")
	jobs, _ := page["jobs"].([]any)
	if len(jobs) != 1 || idOf(page["next_after"]) != welcome {
		t.Fatalf("first page = %v, want job %d and next_after", page, welcome)
	}
	page = s.must(t, http.StatusOK, "GET", fmt.Sprintf("/api/v1/jobs?queue=mail&state=available&limit=1&after=%d", welcome), "")
	if jobs, _ := page["jobs"].([]any); len(jobs) != 1 || page["next_after"] != nil {
		t.Errorf("second page = %v, want the batch's mail job and no next_after", page)
	}
	queues := s.must(t, http.StatusOK, "GET", "/api/v1/queues", "")
	list, _ := queues["queues"].([]any)
	for _, q := range list {
		// The latency is the seconds since the oldest available job was
		// enqueued, moments ago.
		if m, _ := q.(map[string]any); m != nil {
			if l, ok := m["latency"].(float64); !ok || l < 0 || l > 60 {
				t.Errorf("queue %v: latency %v, want seconds since its oldest job was enqueued", m["name"], m["latency"])
			}
			delete(m, "latency")
		}
	}
	if fmt.Sprint(list) != "[map[counts:map[available:1 scheduled:1] name:default paused:false] map[counts:map[available:2] name:mail paused:false]]" {
		t.Errorf("queues = %v", queues)
	}
}

func TestAdmin(t *testing.T) { onStores(t, testAdmin) }

func testAdmin(t *testing.T, s *server) {
	job := id(t, s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "q"}`))
	path := fmt.Sprintf("/api/v1/jobs/%d", job)
	if out := s.must(t, http.StatusOK, "POST", path+"/cancel", ""); out["state"] != "cancelled" {
		t.Errorf("cancel answered %v", out)
	}
	if out := s.must(t, http.StatusOK, "POST", path+"/retry", ""); out["state"] != "available" {
		t.Errorf("retry answered %v", out)
	}
	if out := s.must(t, http.StatusOK, "POST", "/api/v1/queues/q/pause", ""); out["paused"] != true || out["name"] != "q" {
		t.Errorf("pause answered %v", out)
	}
	if out := s.must(t, http.StatusOK, "POST", "/api/v1/fetch", `{"queue": "q"}`); fmt.Sprint(out["jobs"]) != "[]" {
		t.Errorf("fetch from a paused queue = %v, want no jobs", out)
	}
	s.must(t, http.StatusOK, "POST", "/api/v1/queues/q/resume", "")
	claimed := s.must(t, http.StatusOK, "POST", "/api/v1/fetch", `{"queue": "q"}`)
	if jobs, _ := claimed["jobs"].([]any); len(jobs) != 1 {
		t.Fatalf("fetch after resume = %v, want the job", claimed)
	}
	if code, out := s.call(t, "DELETE", path, ""); code != http.StatusConflict || !strings.Contains(fmt.Sprint(out["error"]), "running") {
		t.Errorf("delete of a running job: %d %v, want 409", code, out)
	}
	if out := s.must(t, http.StatusOK, "POST", path+"/cancel", ""); out["state"] != "running" || out["cancel_requested"] != true {
		t.Errorf("cancel of a running job answered %v, want running with cancel_requested", out)
	}
	token := claimed["jobs"].([]any)[0].(map[string]any)["claim_token"]
	hb := s.must(t, http.StatusOK, "POST", path+"/heartbeat", fmt.Sprintf(`{"claim_token": %v}`, token))
	if hb["held"] != true || hb["cancel_requested"] != true {
		t.Errorf("heartbeat after cancel = %v, want held and cancel_requested", hb)
	}
	s.must(t, http.StatusOK, "POST", path+"/fail", fmt.Sprintf(`{"claim_token": %v, "error": "stopped", "discard": true}`, token))
	if out := s.must(t, http.StatusOK, "DELETE", path, ""); out["state"] != "cancelled" {
		t.Errorf("delete answered %v, want the job as it was", out)
	}
	s.must(t, http.StatusNotFound, "GET", path, "")
}

func TestRemoteWorker(t *testing.T) { onStores(t, testRemoteWorker) }

// testRemoteWorker walks a remote worker's life: claim, heartbeat with
// progress, complete with a result; fail until dead; snooze; a stale claim
// refused.
func testRemoteWorker(t *testing.T, s *server) {
	ctx := context.Background()
	fetch := func(body string) map[string]any {
		t.Helper()
		out := s.must(t, http.StatusOK, "POST", "/api/v1/fetch", body)
		jobs, _ := out["jobs"].([]any)
		if len(jobs) != 1 {
			t.Fatalf("fetch %s = %v, want one job", body, out)
		}
		return jobs[0].(map[string]any)
	}
	report := func(want int, j map[string]any, what, extra string) map[string]any {
		t.Helper()
		return s.must(t, want, "POST", fmt.Sprintf("/api/v1/jobs/%v/%s", j["id"], what), fmt.Sprintf(`{"claim_token": %v%s}`, j["claim_token"], extra))
	}

	// Complete, with progress and a result.
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "resize", "queue": "img", "args": {"w": 100}}`)
	j := fetch(`{"queue": "img", "kinds": ["resize"], "worker": "py-1", "lease": "1m"}`)
	if j["state"] != "running" || j["attempt"] != 1.0 || j["attempted_by"] != "py-1" {
		t.Errorf("claimed job = %v, want running attempt 1 by py-1", j)
	}
	if hb := report(http.StatusOK, j, "heartbeat", `, "progress": 40, "lease": "2m"`); hb["held"] != true || hb["cancel_requested"] != false {
		t.Errorf("heartbeat = %v, want held", hb)
	}
	if out := report(http.StatusOK, j, "complete", `, "result": {"bytes": 2048}`); out["state"] != "completed" {
		t.Errorf("complete answered %v", out)
	}
	row := s.row(t, idOf(j["id"]))
	if row.State != store.JobStateCompleted || string(row.Result) != `{"bytes":2048}` || row.Progress != 40 {
		t.Errorf("completed job = %s, result %s, progress %v", row.State, row.Result, row.Progress)
	}
	if out := report(http.StatusConflict, j, "complete", ""); !strings.Contains(fmt.Sprint(out["error"]), "no longer the job's") {
		t.Errorf("second complete answered %v", out)
	}

	// Fail until dead: each error kept, in order.
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "charge", "queue": "pay", "max_attempts": 2}`)
	j = fetch(`{"queue": "pay"}`)
	if out := report(http.StatusOK, j, "fail", `, "error": "card declined", "retry_in": "0s"`); out["state"] != "retrying" {
		t.Errorf("first fail answered %v, want retrying", out)
	}
	j = fetch(`{"queue": "pay"}`)
	if out := report(http.StatusOK, j, "fail", `, "error": "card declined again"`); out["state"] != "dead" {
		t.Errorf("last fail answered %v, want dead", out)
	}
	row = s.row(t, idOf(j["id"]))
	if len(row.Errors) != 2 || row.Errors[0].Message != "card declined" || row.Errors[1].Message != "card declined again" {
		t.Errorf("dead job's errors = %+v", row.Errors)
	}

	// The default backoff when the worker names none: the library's.
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "sync", "queue": "sync"}`)
	j = fetch(`{"queue": "sync"}`)
	before := time.Now()
	report(http.StatusOK, j, "fail", `, "error": "timeout"`)
	if row := s.row(t, idOf(j["id"])); row.State != store.JobStateRetrying || row.RunAt.Before(before) || row.RunAt.After(before.Add(2*time.Second)) {
		t.Errorf("after a first failure: %s at %v, want retrying about 1s after %v", row.State, row.RunAt, before)
	}

	// Snooze: later, the attempt not counted.
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "poll", "queue": "poll"}`)
	j = fetch(`{"queue": "poll"}`)
	if out := report(http.StatusOK, j, "snooze", `, "run_in": "1h"`); out["state"] != "scheduled" {
		t.Errorf("snooze answered %v", out)
	}
	if row := s.row(t, idOf(j["id"])); row.Attempt != 0 || row.RunAt.Before(time.Now().Add(59*time.Minute)) {
		t.Errorf("snoozed job: attempt %d, run at %v; want 0, in an hour", row.Attempt, row.RunAt)
	}

	// A claim whose lease ran out and was rescued is stale.
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "slow", "queue": "slow"}`)
	j = fetch(`{"queue": "slow", "lease": "1s"}`)
	if n, err := s.st.JobRescue(ctx, &store.JobRescueParams{Now: time.Now().Add(2 * time.Second), Limit: 10}); n != 1 || err != nil {
		t.Fatalf("JobRescue = %d, %v", n, err)
	}
	if hb := report(http.StatusOK, j, "heartbeat", ""); hb["held"] != false {
		t.Errorf("heartbeat of a rescued claim = %v, want held false", hb)
	}
	report(http.StatusConflict, j, "fail", `, "error": "late"`)
}

func TestReports(t *testing.T) { onStores(t, testReports) }

// testReports sends many reports in one request: each outcome recorded as
// its own endpoint would record it, in one store call; a stale claim or a
// missing job is refused on its own, in its result, and the others are
// recorded.
func testReports(t *testing.T, s *server) {
	for i := range 7 {
		s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", fmt.Sprintf(`{"kind": "k", "queue": "r", "max_attempts": 3, "args": {"n": %d}}`, i))
	}
	out := s.must(t, http.StatusOK, "POST", "/api/v1/fetch", `{"queue": "r", "limit": 7}`)
	jobs, _ := out["jobs"].([]any)
	if len(jobs) != 7 {
		t.Fatalf("fetch = %v, want 7 jobs", out)
	}
	j := make([]map[string]any, 7)
	for i := range jobs {
		j[i] = jobs[i].(map[string]any)
	}
	// Job 6 is finished already, so its claim is stale.
	s.must(t, http.StatusOK, "POST", fmt.Sprintf("/api/v1/jobs/%v/complete", j[6]["id"]), fmt.Sprintf(`{"claim_token": %v}`, j[6]["claim_token"]))

	body := fmt.Sprintf(`{"reports": [
		{"id": %v, "claim_token": %v, "outcome": "complete", "result": {"ok": true}},
		{"id": %v, "claim_token": %v, "outcome": "fail", "error": "timeout", "retry_in": "0s"},
		{"id": %v, "claim_token": %v, "outcome": "fail", "error": "busy"},
		{"id": %v, "claim_token": %v, "outcome": "cancel", "error": "bad args"},
		{"id": 424242, "claim_token": 1, "outcome": "complete"},
		{"id": %v, "claim_token": %v, "outcome": "snooze", "run_in": "1h"},
		{"id": %v, "claim_token": %v, "outcome": "complete"},
		{"id": %v, "claim_token": %v, "outcome": "release"}]}`,
		j[0]["id"], j[0]["claim_token"], j[1]["id"], j[1]["claim_token"], j[2]["id"], j[2]["claim_token"], j[3]["id"], j[3]["claim_token"],
		j[4]["id"], j[4]["claim_token"], j[6]["id"], j[6]["claim_token"], j[5]["id"], j[5]["claim_token"])
	before := time.Now()
	out = s.must(t, http.StatusOK, "POST", "/api/v1/reports", body)
	results, _ := out["results"].([]any)
	want := []string{
		fmt.Sprintf("map[id:%v recorded:true state:completed]", j[0]["id"]),
		fmt.Sprintf("map[id:%v recorded:true state:retrying]", j[1]["id"]),
		fmt.Sprintf("map[id:%v recorded:true state:retrying]", j[2]["id"]),
		fmt.Sprintf("map[id:%v recorded:true state:cancelled]", j[3]["id"]),
		"map[error:job 424242 not found: the outcome is not recorded id:424242 recorded:false status:404]",
		fmt.Sprintf("map[id:%v recorded:true state:scheduled]", j[4]["id"]),
		fmt.Sprintf("map[error:job %v: claim %v is no longer the job's (its lease ran out, or it was finished or cancelled): the outcome is not recorded id:%v recorded:false status:409]", j[6]["id"], j[6]["claim_token"], j[6]["id"]),
		fmt.Sprintf("map[id:%v recorded:true state:available]", j[5]["id"]),
	}
	if len(results) != len(want) {
		t.Fatalf("reports answered %v, want %d results", out, len(want))
	}
	for i := range want {
		if got := fmt.Sprint(results[i]); got != want[i] {
			t.Errorf("result %d = %s, want %s", i, got, want[i])
		}
	}
	row := func(i int) *store.JobRow { return s.row(t, idOf(j[i]["id"])) }
	if r := row(0); string(r.Result) != `{"ok":true}` {
		t.Errorf("completed job's result = %s", r.Result)
	}
	if r := row(1); len(r.Errors) != 1 || r.Errors[0].Message != "timeout" || r.RunAt.After(time.Now()) {
		t.Errorf("job failed with retry_in 0s: errors %+v, run at %v; want the error, due now", r.Errors, r.RunAt)
	}
	if r := row(2); r.RunAt.Before(before) || r.RunAt.After(before.Add(2*time.Second)) {
		t.Errorf("job failed with the default backoff runs at %v, want about 1s after %v", r.RunAt, before)
	}
	if r := row(3); len(r.Errors) != 1 || r.Errors[0].Message != "bad args" {
		t.Errorf("cancelled job's errors = %+v, want the worker's", r.Errors)
	}
	if r := row(4); r.Attempt != 0 || r.RunAt.Before(time.Now().Add(59*time.Minute)) {
		t.Errorf("snoozed job: attempt %d, run at %v; want 0, in an hour", r.Attempt, r.RunAt)
	}
	if r := row(5); r.State != store.JobStateAvailable || r.Attempt != 0 {
		t.Errorf("released job: %s, attempt %d; want available, attempt 0", r.State, r.Attempt)
	}

	// A malformed report refuses the whole request: nothing is recorded.
	out = s.must(t, http.StatusOK, "POST", "/api/v1/fetch", `{"queue": "r"}`)
	k := out["jobs"].([]any)[0].(map[string]any)
	code, bad := s.malformedOnPurpose().call(t, "POST", "/api/v1/reports", fmt.Sprintf(`{"reports": [{"id": %v, "claim_token": %v, "outcome": "complete"},
		{"id": 1, "claim_token": 1, "outcome": "snooze", "run_in": "-1s"}]}`, k["id"], k["claim_token"]))
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(bad["error"]), "reports[1].run_in must not be negative") {
		t.Errorf("batch with a bad report: %d %v, want 400 naming it", code, bad)
	}
	if r := s.row(t, idOf(k["id"])); r.State != store.JobStateRunning {
		t.Errorf("job of the refused batch is %s, want still running", r.State)
	}
	if out := s.must(t, http.StatusOK, "POST", fmt.Sprintf("/api/v1/jobs/%v/release", k["id"]), fmt.Sprintf(`{"claim_token": %v}`, k["claim_token"])); out["state"] != "available" {
		t.Errorf("release answered %v, want available", out)
	}
}

// A fetch with wait answers as soon as a job arrives, woken by the store
// rather than by polling; with none it answers empty once wait has passed,
// or at once when the server is stopping.
func TestFetchWaits(t *testing.T) {
	t.Parallel()
	inner, err := sqlitestore.Open(filepath.Join(t.TempDir(), "jobs.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inner.Close() })
	// The wrapper counts the store calls, so the test knows when a fetch
	// waits: it watches the queue once a claim found nothing.
	st := storefault.New(inner)
	stopping := make(chan struct{})
	s := newServerWith(t, st, &sortie.Config{Logger: quiet(), PollInterval: time.Minute}, &httpapi.Options{Stopping: stopping})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waiting := func(n int) {
		t.Helper()
		if err := st.WaitCalls(ctx, "QueueWatch", n); err != nil {
			t.Fatalf("fetch %d did not start waiting: %v", n, err)
		}
	}

	type answer struct {
		out  map[string]any
		took time.Duration
	}
	wait := func(body string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			start := time.Now()
			req := httptest.NewRequest("POST", "/api/v1/fetch", strings.NewReader(body))
			rec := httptest.NewRecorder()
			s.h.ServeHTTP(rec, req)
			var out map[string]any
			_ = json.Unmarshal(rec.Body.Bytes(), &out)
			exactNumbers(out)
			ch <- answer{out, time.Since(start)}
		}()
		return ch
	}

	got := wait(`{"queue": "q", "wait": "30s"}`)
	waiting(1)
	s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "queue": "q"}`)
	select {
	case a := <-got:
		if jobs, _ := a.out["jobs"].([]any); len(jobs) != 1 || a.took > 10*time.Second {
			t.Errorf("waiting fetch answered %v after %v, want the job", a.out, a.took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a waiting fetch did not answer within 20s of an enqueue (the poll interval is a minute)")
	}

	a := <-wait(`{"queue": "q", "wait": "300ms"}`)
	if fmt.Sprint(a.out["jobs"]) != "[]" || a.took < 300*time.Millisecond {
		t.Errorf("fetch with nothing to claim answered %v after %v, want no jobs after 300ms", a.out, a.took)
	}

	got = wait(`{"queue": "q", "wait": "30s"}`)
	waiting(3)
	close(stopping)
	select {
	case a := <-got:
		if fmt.Sprint(a.out["jobs"]) != "[]" {
			t.Errorf("fetch at shutdown answered %v, want no jobs", a.out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting fetch held up a stopping server")
	}
}

// Bad requests get a 4xx naming the problem, and change nothing.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	s := memServer(t, &httpapi.Options{MaxBodyBytes: 256}).malformedOnPurpose()
	big := `{"kind": "k", "args": {"pad": "` + strings.Repeat("x", 300) + `"}}`
	var batch strings.Builder
	batch.WriteString(`{"jobs": [`)
	for i := range 1001 {
		if i > 0 {
			batch.WriteString(",")
		}
		batch.WriteString(`{"kind":"k"}`)
	}
	batch.WriteString(`]}`)
	for _, tt := range []struct {
		method, path, body string
		want               int
		msg                string
	}{
		{"POST", "/api/v1/jobs", `{"kind": "k", "priorty": 1}`, 400, `unknown field "priorty"`},
		{"POST", "/api/v1/jobs", `{"kind": "k"`, 400, "request body is not valid"},
		{"POST", "/api/v1/jobs", ``, 400, "request body is empty"},
		{"POST", "/api/v1/jobs", `{"kind": "k"} {"kind": "k"}`, 400, "request body has more after its JSON value"},
		{"POST", "/api/v1/jobs", big, 413, "request body is over 256 bytes"},
		// Strict JSON: names match exactly, no key twice, valid UTF-8 everywhere.
		{"POST", "/api/v1/jobs", `{"Kind": "k"}`, 400, `request body has unknown field "Kind" (names are case-sensitive: did you mean "kind"?)`},
		{"POST", "/api/v1/jobs", `{"kind": "k", "kind": "j"}`, 400, `request body has the key "kind" twice`},
		{"POST", "/api/v1/jobs", `{"kind": "k", "args": {"a": 1, "a": 2}}`, 400, `args has the key "a" twice`},
		{"POST", "/api/v1/jobs", "{\"kind\": \"k\xff\"}", 400, "kind is not valid UTF-8"},
		{"POST", "/api/v1/jobs", `{"kind": "k\udc00"}`, 400, `kind is not valid Unicode: \udc00`},
		{"POST", "/api/v1/jobs", "{\"kind\": \"k\", \"args\": {\"s\": \"\xc3\x28\"}}", 400, "args.s is not valid UTF-8"},
		{"POST", "/api/v1/jobs", "{\"kind\": \"k\", \"queue\": \"q\xff\"}", 400, "queue is not valid UTF-8"},
		{"POST", "/api/v1/jobs", "{\"kind\": \"k\", \"unique_key\": \"u\xff\"}", 400, "unique_key is not valid UTF-8"},
		{"POST", "/api/v1/jobs", "{\"kind\": \"k\", \"tags\": [\"a\", \"\xff\"]}", 400, "tags[1] is not valid UTF-8"},
		{"POST", "/api/v1/jobs", "{\"kind\": \"k\", \"meta\": {\"\xff\": 1}}", 400, "meta has a key that is not valid UTF-8"},
		{"POST", "/api/v1/jobs", "{\"kind\": \"k\", \"partition_key\": \"p\xfe\"}", 400, "partition_key is not valid UTF-8"},
		{"POST", "/api/v1/jobs", `{"kind": "k", "priority": "high"}`, 400, "priority must be an integer, got a string"},
		{"POST", "/api/v1/jobs/batch", `{"jobs": [{"kind": "a"}, {"kind": "b", "Queue": "q"}]}`, 400, `jobs[1] has unknown field "Queue"`},
		{"POST", "/api/v1/jobs/batch", "{\"jobs\": [{\"kind\": \"a\", \"args\": [\"\xff\"]}]}", 400, "jobs[0].args[0] is not valid UTF-8"},
		{"POST", "/api/v1/fetch", `{"Queue": "q"}`, 400, `request body has unknown field "Queue"`},
		{"POST", "/api/v1/fetch", `{"queue": "a", "queue": "b"}`, 400, `request body has the key "queue" twice`},
		{"POST", "/api/v1/jobs/1/complete", "{\"claim_token\": 1, \"result\": {\"r\": \"\xff\"}}", 400, "result.r is not valid UTF-8"},
		{"POST", "/api/v1/jobs/1/fail", "{\"claim_token\": 1, \"error\": \"boom \xff\"}", 400, "error is not valid UTF-8"},
		{"POST", "/api/v1/jobs/1/heartbeat", `{"claim_token": 1, "claim_token": 2}`, 400, `request body has the key "claim_token" twice`},
		{"POST", "/api/v1/jobs/1/snooze", `{"claim_token": 1, "Run_In": "1s"}`, 400, `unknown field "Run_In"`},
		{"POST", "/api/v1/jobs", `{"args": {}}`, 400, "kind is required"},
		{"POST", "/api/v1/jobs", `{"kind": "k", "run_in": "soon"}`, 400, `run_in "soon" is not a duration`},
		{"POST", "/api/v1/jobs", `{"kind": "k", "run_at": "tomorrow"}`, 400, `run_at must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got "tomorrow"`},
		{"POST", "/api/v1/jobs", `{"kind": "k", "run_at": 1767225600}`, 400, `run_at must be a string, got a number`},
		{"POST", "/api/v1/jobs", `{"kind": "k", "run_at": "2030-01-01T00:00:00Z", "run_in": "1h"}`, 400, "run_at and run_in together: send one of them"},
		{"POST", "/api/v1/jobs/batch", `{"jobs": [{"kind": "k", "run_at": "2030-01-01"}]}`, 400, `jobs[0].run_at must be an RFC 3339 time`},
		{"POST", "/api/v1/jobs", `{"kind": "k", "args": [1, 2]}`, 201, ""},
		{"POST", "/api/v1/jobs", `{"kind": "k", "queue": "no spaces"}`, 400, `queue "no spaces" may only contain`},
		{"POST", "/api/v1/jobs", `{"kind": "k", "max_attempts": 2147483648}`, 400, "max_attempts must be between 1 and 1000000, got 2147483648"},
		{"POST", "/api/v1/jobs", `{"kind": "k", "max_attempts": 4611686018427387904}`, 400, "max_attempts must be between 1 and 1000000, got 4611686018427387904"},
		{"POST", "/api/v1/jobs", `{"kind": "k", "priority": 0.5}`, 400, "priority"},
		{"POST", "/api/v1/jobs/batch", `{"jobs": []}`, 400, "jobs must hold 1 to 1000 jobs, got 0"},
		{"POST", "/api/v1/jobs/batch", `{"jobs": [{"kind": "a"}, {"kind": ""}]}`, 400, "jobs[1].kind is required"},
		{"GET", "/api/v1/jobs/abc", ``, 400, `"abc" is not a job ID`},
		{"GET", "/api/v1/jobs/12345", ``, 404, "job 12345 not found"},
		{"GET", "/api/v1/jobs?stat=dead", ``, 400, `unknown query parameter "stat"`},
		{"GET", "/api/v1/jobs?limit=5000", ``, 400, "limit must be an integer from 1 to 1000"},
		{"GET", "/api/v1/jobs?state=done", ``, 400, `state "done" is not a job state`},
		{"POST", "/api/v1/fetch", `{"queue": "q", "lease": "10ms"}`, 400, "lease must be 1s to 1h0m0s"},
		{"POST", "/api/v1/fetch", `{"queue": "q", "wait": "5m"}`, 400, "wait must be at most 1m0s"},
		{"POST", "/api/v1/fetch", `{"queue": "q", "limit": 2000}`, 400, "limit must be 1 to 1000"},
		{"POST", "/api/v1/fetch", `{"queue": "q", "limit": 0}`, 400, "limit must be 1 to 1000, got 0"},
		{"POST", "/api/v1/fetch", `{"queue": "q", "kinds": ["a", ""]}`, 400, "kinds[1]: kind is empty"},
		{"POST", "/api/v1/fetch", `{"kinds": ["a"]}`, 400, `queue is required: name the queue to claim from ("default" for jobs enqueued without one)`},
		{"POST", "/api/v1/fetch", `{}`, 400, "queue is required"},
		{"POST", "/api/v1/jobs", `{"kind": "k", "args": "hi"}`, 400, `args must be a JSON object or array, got "\"hi\""`},
		{"POST", "/api/v1/jobs", `{"kind": "k", "args": 42}`, 400, "args must be a JSON object or array"},
		{"POST", "/api/v1/jobs/batch", `{"jobs": [{"kind": "k"}, {"kind": "k", "args": true}]}`, 400, "jobs[1].args must be a JSON object or array"},
		{"POST", "/api/v1/fetch", `{"queue": "` + strings.Repeat("q", 129) + `"}`, 400, "queue: queue name is longer than 128 bytes"},
		{"POST", "/api/v1/fetch", `{"queue": "no spaces"}`, 400, `queue: queue name "no spaces" may only contain`},
		{"POST", "/api/v1/jobs/99/complete", `{"claim_token": 1}`, 404, "job 99 not found"},
		{"POST", "/api/v1/jobs/99/fail", `{"claim_token": 1, "retry_in": "1s"}`, 404, "job 99 not found"},
		{"POST", "/api/v1/jobs/99/fail", `{"claim_token": 1}`, 404, "job 99 not found"},
		{"POST", "/api/v1/jobs/99/release", `{"claim_token": 1}`, 404, "job 99 not found"},
		{"POST", "/api/v1/reports", `{"reports": []}`, 400, "reports must hold 1 to 1000 reports, got 0"},
		{"POST", "/api/v1/reports", `{"reports": [{"id": 1, "claim_token": 1, "outcome": "done"}]}`, 400, `reports[0].outcome must be complete, fail, cancel, snooze or release, got "done"`},
		{"POST", "/api/v1/reports", `{"reports": [{"id": 1, "outcome": "complete"}]}`, 400, "reports[0].claim_token is required"},
		{"POST", "/api/v1/reports", `{"reports": [{"id": 0, "claim_token": 1, "outcome": "complete"}]}`, 400, "reports[0].id must be a job ID"},
		{"POST", "/api/v1/reports", `{"reports": [{"id": 1, "claim_token": 1, "outcome": "fail", "result": 1}]}`, 400, `reports[0].result does not go with outcome "fail"`},
		{"POST", "/api/v1/reports", `{"reports": [{"id": 1, "claim_token": 1, "outcome": "fail", "retry_in": "x"}]}`, 400, `reports[0].retry_in "x" is not a duration`},
		{"POST", "/api/v1/reports", `{"reports": [{"id": 1, "claim_token": 1, "outcome": "snooze", "retry_in": "1s"}]}`, 400, `reports[0].retry_in does not go with outcome "snooze"`},
		{"POST", "/api/v1/reports", `{"reports": [{"id": 1, "claim_token": 1, "outcome": "release"}, {"id": 1, "claim_token": 1, "outcome": "complete"}]}`, 400, "reports[0] and reports[1] are both about job 1"},
		{"POST", "/api/v1/reports", `{"reports": [{"id": 1, "claim_token": 1, "Outcome": "complete"}]}`, 400, `reports[0] has unknown field "Outcome"`},
		{"POST", "/api/v1/jobs/99/snooze", `{"claim_token": 1, "run_in": "1s"}`, 404, "job 99 not found"},
		{"POST", "/api/v1/jobs/99/heartbeat", `{"claim_token": 1}`, 404, "job 99 not found"},
		{"POST", "/api/v1/jobs/99/heartbeat", `{"claim_token": 1, "progress": 5}`, 404, "job 99 not found"},
		{"POST", "/api/v1/jobs/1/complete", `{}`, 400, "claim_token is required"},
		{"POST", "/api/v1/jobs/1/fail", `{"claim_token": 1, "discard": true, "retry_in": "1s"}`, 400, "discard and retry_in together"},
		{"POST", "/api/v1/jobs/1/heartbeat", `{"claim_token": 1, "progress": 120}`, 400, "progress must be 0 to 100"},
		{"POST", "/api/v1/queues/q/stop", ``, 404, "no such endpoint: POST /api/v1/queues/q/stop"},
		{"GET", "/jobs", ``, 404, "the API is under /api/v1"},
		{"POST", "/api/v1/jobs//retry", ``, 404, "no such endpoint: POST /api/v1/jobs//retry"},
		{"POST", "/api/v1/queues/../jobs", `{"kind": "k"}`, 404, "no such endpoint"},
	} {
		code, out := s.call(t, tt.method, tt.path, tt.body)
		if code != tt.want || !strings.Contains(fmt.Sprint(out["error"]), tt.msg) {
			t.Errorf("%s %s %.40q: %d %v, want %d and %q", tt.method, tt.path, tt.body, code, out, tt.want, tt.msg)
		}
	}
	s = memServer(t, nil).malformedOnPurpose()
	if code, out := s.call(t, "POST", "/api/v1/fetch", `{"queue": "`+strings.Repeat("q", 100<<10)+`"}`); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "queue name is longer than 128 bytes") {
		t.Errorf("fetch from a 100 KiB queue name: %d %.200v, want 400 as enqueue answers", code, out)
	}
	if code, out := s.call(t, "POST", "/api/v1/jobs/batch", batch.String()); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "got 1001") {
		t.Errorf("batch of 1001: %d %v, want 400", code, out)
	}
	if counts, _ := s.st.JobCounts(context.Background(), &store.JobCountsParams{}); len(counts) != 0 {
		t.Errorf("counts after the refused batch = %v, want none", counts)
	}
}

// run_at is an RFC 3339 time, in any zone, to the nanosecond.
func TestRunAt(t *testing.T) {
	t.Parallel()
	s := memServer(t, nil)
	job := id(t, s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "k", "run_at": "2030-01-02T15:04:05.5+02:00"}`))
	want := time.Date(2030, 1, 2, 13, 4, 5, 5e8, time.UTC)
	if row := s.row(t, job); row.State != store.JobStateScheduled || !row.RunAt.Equal(want) {
		t.Errorf("job with run_at: %s at %v, want scheduled at %v", row.State, row.RunAt, want)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	s := memServer(t, &httpapi.Options{Tokens: []string{"s3cret", "other"}})
	code, out := s.malformedOnPurpose().call(t, "GET", "/api/v1/queues", "")
	if code != http.StatusUnauthorized || !strings.Contains(fmt.Sprint(out["error"]), "missing bearer token") {
		t.Errorf("no token: %d %v, want 401", code, out)
	}
	if code, _ := s.call(t, "POST", "/api/v1/jobs", `{"kind": "k"}`, "Authorization", "Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", code)
	}
	if code, _ := s.call(t, "POST", "/api/v1/jobs", `{"kind": "k"}`, "Authorization", "Bearer other"); code != http.StatusCreated {
		t.Errorf("second token: %d, want 201", code)
	}
	for _, h := range []string{"bearer other", "BEARER s3cret", "  Bearer   s3cret "} {
		if code, out := s.malformedOnPurpose().call(t, "POST", "/api/v1/jobs", `{"kind": "k"}`, "Authorization", h); code != http.StatusCreated {
			t.Errorf("Authorization %q: %d %v, want 201 (the scheme is case-insensitive)", h, code, out)
		}
	}
	if code, _ := s.malformedOnPurpose().call(t, "POST", "/api/v1/jobs", `{"kind": "k"}`, "Authorization", "Basic s3cret"); code != http.StatusUnauthorized {
		t.Errorf("Basic scheme: %d, want 401", code)
	}
	if code, _ := s.call(t, "GET", "/api/v1/health", ""); code != http.StatusOK {
		t.Errorf("health without a token: %d, want 200 (load balancers send none)", code)
	}
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, malformed(httptest.NewRequest("GET", "/api/v1/jobs", nil)))
	if got := rec.Header().Get("WWW-Authenticate"); got != `Bearer realm="sortie"` {
		t.Errorf("WWW-Authenticate = %q", got)
	}
	body, _ := io.ReadAll(rec.Body)
	if strings.Contains(string(body), "s3cret") {
		t.Errorf("401 body %q reveals a token", body)
	}
}

// A web page of another site cannot act through a browser on a server on
// the visitor's machine; programs, which send no Origin, are unaffected.
func TestCrossSiteRequestsRefused(t *testing.T) {
	t.Parallel()
	s := memServer(t, nil)
	for _, tt := range []struct {
		header []string
		want   string
	}{
		{[]string{"Origin", "https://evil.example"}, `cross-origin request refused: its Origin header is "https://evil.example", not this server ("example.com")`},
		{[]string{"Origin", "null"}, `its Origin header is "null"`},
		{[]string{"Sec-Fetch-Site", "cross-site"}, `cross-origin request refused: its Sec-Fetch-Site header is "cross-site", and only same-origin or none may change anything`},
		{[]string{"Sec-Fetch-Site", "same-site"}, `its Sec-Fetch-Site header is "same-site"`},
	} {
		code, out := s.call(t, "POST", "/api/v1/jobs", `{"kind": "k"}`, tt.header...)
		if code != http.StatusForbidden || !strings.Contains(fmt.Sprint(out["error"]), tt.want) {
			t.Errorf("POST with %s: %d %v, want 403 and %q", tt.header, code, out, tt.want)
		}
	}
	if code, _ := s.call(t, "POST", "/api/v1/jobs", `{"kind": "k"}`, "Sec-Fetch-Site", "same-origin"); code != http.StatusCreated {
		t.Errorf("POST from a page of the server's own origin: %d, want 201", code)
	}
	if code, _ := s.call(t, "POST", "/api/v1/jobs", `{"kind": "k"}`, "Origin", "http://example.com"); code != http.StatusCreated {
		t.Errorf("POST from the server's own origin: %d, want 201", code)
	}
	if code, _ := s.call(t, "GET", "/api/v1/queues", "", "Origin", "https://evil.example"); code != http.StatusOK {
		t.Errorf("cross-site GET: %d, want 200 (it changes nothing and the browser keeps the answer from the page)", code)
	}
	if counts, _ := s.st.JobCounts(context.Background(), &store.JobCountsParams{}); len(counts) != 1 || counts[0].Count != 2 {
		t.Errorf("counts = %v, want the two same-origin jobs", counts)
	}
}
