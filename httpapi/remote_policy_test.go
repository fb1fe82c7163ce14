package httpapi_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/httpapi"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/metrics"
	"github.com/sortiehq/sortie/store/memstore"
)

// A remote worker's failure is the runtime's: the serving client's retry
// policy for the kind decides when it runs again, the finish is announced
// as an event, and the metrics count it, as for a job run in the process.
func TestRemoteFailureFollowsTheServingClientsPolicy(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	start := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	fc := clock.NewFake(start)
	workers := sortie.NewWorkers()
	workers.AddKind("transcode", &sortie.WorkerOpts{MaxAttempts: 2, Timeout: 90 * time.Second,
		RetryPolicy: sortie.RetryPolicyFunc(func(*sortie.JobRow) time.Duration { return 42 * time.Minute })})
	c, err := sortie.NewClient(st, &sortie.Config{Logger: quiet(), Clock: fc, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var finished []*sortie.Event
	defer c.Subscribe(func(e *sortie.Event) {
		if e.Kind == sortie.EventJobFinished {
			mu.Lock()
			finished = append(finished, e)
			mu.Unlock()
		}
	})()
	col := metrics.New(c, &metrics.Options{SkipQueueJobs: true})
	t.Cleanup(col.Close)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	opts := &httpapi.Options{Logger: quiet()}
	s := &server{h: contractChecked(t, httpapi.New(c, opts), opts), st: st}

	jobID := id(t, s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "transcode", "queue": "video"}`))
	out := s.must(t, http.StatusOK, "POST", "/api/v1/fetch", `{"queue": "video"}`)
	j := out["jobs"].([]any)[0].(map[string]any)
	if j["timeout"] != "1m30s" {
		t.Errorf("fetched job's timeout = %v, want the kind's 1m30s", j["timeout"])
	}
	s.must(t, http.StatusOK, "POST", fmt.Sprintf("/api/v1/jobs/%d/fail", jobID), fmt.Sprintf(`{"claim_token": %v, "error": "codec missing"}`, j["claim_token"]))
	row := s.row(t, jobID)
	if want := start.Add(42 * time.Minute); row.State != sortie.JobStateRetrying || !row.RunAt.Equal(want) {
		t.Fatalf("job failed over HTTP: %s at %v, want retrying at %v (the kind's policy)", row.State, row.RunAt, want)
	}
	mu.Lock()
	if len(finished) != 1 || finished[0].Outcome != sortie.OutcomeRetrying || finished[0].Job.ID != jobID || finished[0].Err.Error() != "codec missing" {
		t.Errorf("finished events = %v, want one, retrying with the worker's error", finished)
	}
	mu.Unlock()
	if got := finishedCount(t, reg, "video", "transcode", "retrying"); got != 1 {
		t.Errorf("sortie_jobs_finished_total{outcome=retrying} = %v, want 1", got)
	}

	// The last attempt's failure makes it dead, counted as such.
	fc.Advance(42 * time.Minute)
	out = s.must(t, http.StatusOK, "POST", "/api/v1/fetch", `{"queue": "video"}`)
	j = out["jobs"].([]any)[0].(map[string]any)
	res := s.must(t, http.StatusOK, "POST", "/api/v1/reports", fmt.Sprintf(`{"reports": [{"id": %d, "claim_token": %v, "outcome": "fail"}]}`, jobID, j["claim_token"]))
	if got := fmt.Sprint(res["results"]); got != fmt.Sprintf("[map[id:%d recorded:true state:dead]]", jobID) {
		t.Errorf("last failure answered %s, want dead", got)
	}
	if got := finishedCount(t, reg, "video", "transcode", "dead"); got != 1 {
		t.Errorf("sortie_jobs_finished_total{outcome=dead} = %v, want 1", got)
	}
}

// finishedCount reads sortie_jobs_finished_total for queue, kind and outcome.
func finishedCount(t *testing.T, reg prometheus.Gatherer, queue, kind, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"queue": queue, "kind": kind, "outcome": outcome}
	for _, mf := range mfs {
		if mf.GetName() != "sortie_jobs_finished_total" {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
