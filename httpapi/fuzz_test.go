package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/httpapi"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// The fuzz targets send any body to each endpoint that reads one (and any
// job ID or queue name to the admin actions). Whatever the input, the API
// answers without a 5xx or a panic, every answer is a JSON object in valid
// UTF-8, and what it stored reads back as valid UTF-8 JSON. Each input runs
// on a fresh in-memory store holding job 1 (running, claim token 1), job 2
// (available) and job 3 (completed), so seeds naming them reach the paths
// that record outcomes.

// fuzzServer returns the API on a fresh store in the state above, with
// fetches that never wait.
func fuzzServer(t *testing.T) *server {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	stopping := make(chan struct{})
	close(stopping)
	s := newServer(t, st, &httpapi.Options{MaxWait: time.Second, Stopping: stopping})
	ctx := context.Background()
	for range 3 {
		if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: time.Now(),
			Jobs: []*store.NewJob{{Kind: "k", Queue: sortie.QueueDefault, Args: []byte(`{"n":1}`), Priority: 2, MaxAttempts: 3}}}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(id int64) int64 {
		rows, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: sortie.QueueDefault, Limit: 1, Worker: "w", Now: time.Now(), Lease: time.Minute}))
		if err != nil || len(rows) != 1 || rows[0].ID != id {
			t.Fatalf("JobFetch = %v, %v; want job %d", rows, err, id)
		}
		return rows[0].ClaimToken
	}
	if tok := claim(1); tok != 1 {
		t.Fatalf("job 1 claimed with token %d, want 1 (the seeds use it)", tok)
	}
	// Job 3 is claimed and completed; job 2 is claimed and released.
	tok2 := claim(2)
	tok3 := claim(3)
	if _, err := st.JobFinish(ctx, &store.JobFinishParams{Now: time.Now(), Reports: []*store.Report{
		{ID: 2, ClaimToken: tok2, Kind: store.ReportReleased},
		{ID: 3, ClaimToken: tok3, Kind: store.ReportCompleted, Result: []byte(`{"ok":true}`)}}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// fuzzCall sends the request and checks the answer: no 5xx, a JSON object
// in valid UTF-8 (and, through the server's handler, as openapi.json says,
// for a request that may be anything).
func (s *server) fuzzCall(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req := malformed(httptest.NewRequest(method, path, strings.NewReader(body)))
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("%s %s %q: status %d %s", method, path, body, rec.Code, rec.Body)
	}
	out := rec.Body.Bytes()
	if !utf8.Valid(out) {
		t.Fatalf("%s %s %q: answer %q is not valid UTF-8", method, path, body, out)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s %s %q: answer %q is not a JSON object: %v", method, path, body, out, err)
	}
	if rec.Code >= 400 {
		if msg, _ := v["error"].(string); msg == "" {
			t.Fatalf("%s %s %q: status %d with no error message: %s", method, path, body, rec.Code, out)
		}
	}
	return rec.Code, v
}

// checkStored reads every job back through the API and checks that it is
// served as valid UTF-8 JSON.
func (s *server) checkStored(t *testing.T) {
	t.Helper()
	_, page := s.fuzzCall(t, "GET", "/api/v1/jobs?limit=1000", "")
	jobs, _ := page["jobs"].([]any)
	for _, j := range jobs {
		job, _ := j.(map[string]any)
		if kind, _ := job["kind"].(string); strings.ContainsRune(kind, utf8.RuneError) {
			t.Fatalf("job %v stored with kind %q, holding U+FFFD: invalid UTF-8 was replaced, not refused", job["id"], kind)
		}
		s.fuzzCall(t, "GET", fmt.Sprintf("/api/v1/jobs/%v", job["id"]), "")
	}
	for id := int64(1); id <= 3; id++ {
		row, err := s.st.JobGet(context.Background(), &store.JobGetParams{ID: id})
		if err != nil {
			continue
		}
		for what, b := range map[string][]byte{"args": row.Args, "meta": row.Meta, "result": row.Result} {
			if len(b) > 0 && (!utf8.Valid(b) || !json.Valid(b)) {
				t.Fatalf("job %d stored %s %q: not valid UTF-8 JSON", id, what, b)
			}
		}
	}
}

// bodySeeds are inputs every body target starts from: broken JSON, the
// wrong shapes, and text that is not valid UTF-8.
var bodySeeds = []string{
	``, ` `, `null`, `[]`, `{}`, `{`, `"x"`, `1e999`, `{} {}`, `{"a":1,"a":2}`,
	"{\"kind\": \"k\xff\"}", `{"kind": "\ud800"}`, `{"Kind": "k"}`,
	strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
	`{"kind": "k", "args": ` + strings.Repeat(`{"a":`, 2000) + `1` + strings.Repeat(`}`, 2000) + `}`,
}

func addSeeds(f *testing.F, seeds ...string) {
	for _, s := range append(seeds, bodySeeds...) {
		f.Add(s)
	}
}

func FuzzEnqueue(f *testing.F) {
	addSeeds(f,
		`{"kind": "email.send", "args": {"to": "ada@example.com"}, "queue": "mail", "priority": 1, "max_attempts": 3,
			"tags": ["a"], "meta": {"by": "x"}, "timeout": "30s", "unique_key": "u", "partition_key": "p"}`,
		`{"kind": "k", "run_at": "2030-01-02T15:04:05Z"}`, `{"kind": "k", "run_at": "2030-01-02T15:04:05Z", "run_in": "1h"}`,
		`{"kind": "k", "run_in": "-1s"}`, `{"kind": "k", "priority": 9223372036854775807}`, `{"kind": "k", "max_attempts": 2147483648}`,
		`{"kind": "k", "depends_on": [1, 3, 99]}`, `{"kind": "k", "depends_on": [-1]}`, `{"kind": "k", "args": "\ud83d\ude00"}`,
		`{"kind": "k", "tags": ["", "x"]}`, `{"kind": "k", "meta": {"a": {"a": 1, "a": 2}}}`, `{"kind": "k", "timeout": "9999999h"}`,
		`{"kind": "k", "queue": "`+strings.Repeat("q", 200)+`"}`, "{\"kind\": \"k\", \"unique_key\": \"\xc3\x28\"}",
	)
	f.Fuzz(func(t *testing.T, body string) {
		s := fuzzServer(t)
		s.fuzzCall(t, "POST", "/api/v1/jobs", body)
		s.checkStored(t)
	})
}

func FuzzEnqueueBatch(f *testing.F) {
	addSeeds(f,
		`{"jobs": [{"kind": "a"}, {"kind": "b", "queue": "mail", "args": [1, 2]}]}`, `{"jobs": []}`, `{"jobs": null}`,
		`{"jobs": [{"kind": "a", "unique_key": "u"}, {"kind": "a", "unique_key": "u"}]}`, `{"jobs": [{}]}`,
		`{"jobs": [{"kind": "a"}], "jobs": [{"kind": "b"}]}`, "{\"jobs\": [{\"kind\": \"a\", \"args\": {\"\xff\": 1}}]}",
		`{"jobs": [{"kind": "a", "depends_on": [2]}, {"kind": "b", "run_at": "yesterday"}]}`, `{"jobs": {"kind": "a"}}`,
	)
	f.Fuzz(func(t *testing.T, body string) {
		s := fuzzServer(t)
		s.fuzzCall(t, "POST", "/api/v1/jobs/batch", body)
		s.checkStored(t)
	})
}

func FuzzFetch(f *testing.F) {
	addSeeds(f,
		`{"queue": "default", "kinds": ["k"], "limit": 10, "worker": "py-1", "lease": "1m", "wait": "100ms"}`,
		`{"kinds": [""]}`, `{"queue": ""}`, `{"limit": -1}`, `{"limit": 1001}`, `{"lease": "0s"}`, `{"wait": "-1s"}`,
		`{"wait": "2s"}`, `{"queue": "no spaces"}`, "{\"worker\": \"w\xff\"}", `{"kinds": null, "limit": null}`,
	)
	f.Fuzz(func(t *testing.T, body string) {
		s := fuzzServer(t)
		code, out := s.fuzzCall(t, "POST", "/api/v1/fetch", body)
		if code == http.StatusOK {
			if _, ok := out["jobs"].([]any); !ok {
				t.Fatalf("fetch %q answered %v, want jobs", body, out)
			}
		}
		s.checkStored(t)
	})
}

// reportEndpoints are the single-job reports, chosen by the fuzzer.
var reportEndpoints = []string{"complete", "fail", "snooze", "release", "heartbeat"}

func FuzzJobReport(f *testing.F) {
	seeds := []string{
		`{"claim_token": 1}`, `{"claim_token": 1, "result": {"bytes": 2048}}`, `{"claim_token": 1, "result": null}`,
		`{"claim_token": 1, "error": "boom", "retry_in": "1s"}`, `{"claim_token": 1, "discard": true}`,
		`{"claim_token": 1, "discard": true, "retry_in": "1s"}`, `{"claim_token": 1, "run_in": "1h"}`,
		`{"claim_token": 1, "lease": "2m", "progress": 40}`, `{"claim_token": 1, "progress": -1}`, `{"claim_token": 2}`,
		`{"claim_token": 0}`, `{"claim_token": 1.5}`, `{"claim_token": "1"}`, "{\"claim_token\": 1, \"error\": \"\xff\"}",
		`{"claim_token": 1, "result": "\udc00"}`, `{"claim_token": 1, "claim_token": 1}`, `{"Claim_Token": 1}`,
	}
	for i := range reportEndpoints {
		for _, s := range append(seeds, bodySeeds...) {
			f.Add(uint8(i), "1", s)
		}
		for _, job := range []string{"2", "3", "99", "0", "x", "1/../2"} {
			f.Add(uint8(i), job, `{"claim_token": 1}`)
		}
	}
	f.Fuzz(func(t *testing.T, endpoint uint8, job, body string) {
		s := fuzzServer(t)
		path := fmt.Sprintf("/api/v1/jobs/%s/%s", url.PathEscape(job), reportEndpoints[int(endpoint)%len(reportEndpoints)])
		s.fuzzCall(t, "POST", path, body)
		s.checkStored(t)
	})
}

func FuzzReports(f *testing.F) {
	addSeeds(f,
		`{"reports": [{"id": 1, "claim_token": 1, "outcome": "complete", "result": {"ok": true}}]}`,
		`{"reports": [{"id": 1, "claim_token": 1, "outcome": "fail", "error": "x"}, {"id": 3, "claim_token": 3, "outcome": "complete"}]}`,
		`{"reports": [{"id": 1, "claim_token": 1, "outcome": "cancel"}, {"id": 99, "claim_token": 1, "outcome": "release"}]}`,
		`{"reports": [{"id": 1, "claim_token": 1, "outcome": "snooze", "run_in": "1s"}]}`,
		`{"reports": [{"id": 1, "claim_token": 1, "outcome": "release"}, {"id": 1, "claim_token": 1, "outcome": "complete"}]}`,
		`{"reports": [{"id": 1, "claim_token": 1, "outcome": "done"}]}`, `{"reports": []}`, `{"reports": [{}]}`,
		`{"reports": [{"id": 1, "claim_token": 1, "outcome": "fail", "result": 1}]}`,
		`{"reports": [{"id": 9223372036854775807, "claim_token": -1, "outcome": "fail", "retry_in": "0s"}]}`,
	)
	f.Fuzz(func(t *testing.T, body string) {
		s := fuzzServer(t)
		code, out := s.fuzzCall(t, "POST", "/api/v1/reports", body)
		if code == http.StatusOK {
			if _, ok := out["results"].([]any); !ok {
				t.Fatalf("reports %q answered %v, want results", body, out)
			}
		}
		s.checkStored(t)
	})
}

func FuzzHeartbeat(f *testing.F) {
	addSeeds(f, `{"claim_token": 1}`, `{"claim_token": 1, "lease": "10m", "progress": 99.5}`, `{"claim_token": 1, "lease": "2h"}`,
		`{"claim_token": 2, "progress": 1e308}`, `{"claim_token": 1, "progress": null}`, `{"claim_token": 1, "Lease": "1m"}`)
	f.Fuzz(func(t *testing.T, body string) {
		s := fuzzServer(t)
		for _, job := range []string{"1", "2", "99"} {
			code, out := s.fuzzCall(t, "POST", "/api/v1/jobs/"+job+"/heartbeat", body)
			if code == http.StatusOK {
				if _, ok := out["held"].(bool); !ok {
					t.Fatalf("heartbeat %q on job %s answered %v, want held", body, job, out)
				}
			}
		}
	})
}

// adminActions are the admin endpoints: a method and a path with %s for
// the job ID or queue name the fuzzer gives.
var adminActions = [][2]string{
	{"POST", "/api/v1/jobs/%s/retry"}, {"POST", "/api/v1/jobs/%s/cancel"}, {"DELETE", "/api/v1/jobs/%s"},
	{"GET", "/api/v1/jobs/%s"}, {"POST", "/api/v1/queues/%s/pause"}, {"POST", "/api/v1/queues/%s/resume"},
}

func FuzzAdmin(f *testing.F) {
	for i := range adminActions {
		for _, target := range []string{"1", "2", "3", "99", "-1", "0", "9223372036854775808", "default", "mail", "", "a b", "q\xff", strings.Repeat("q", 200)} {
			f.Add(uint8(i), target, "")
			f.Add(uint8(i), target, `{"x": 1}`)
		}
	}
	f.Fuzz(func(t *testing.T, action uint8, target, body string) {
		s := fuzzServer(t)
		a := adminActions[int(action)%len(adminActions)]
		s.fuzzCall(t, a[0], fmt.Sprintf(a[1], url.PathEscape(target)), body)
		s.checkStored(t)
		s.fuzzCall(t, "GET", "/api/v1/queues", "")
	})
}
