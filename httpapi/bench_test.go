package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/httpapi"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// benchServer is the API over real HTTP on loopback, on a SQLite file with
// its default durability.
func benchServer(b *testing.B) string {
	b.Helper()
	st, err := sqlitestore.Open(filepath.Join(b.TempDir(), "jobs.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	// Not checked against openapi.json: the tests send the same requests.
	srv := httptest.NewServer(newHandler(b, st, &sortie.Config{Logger: quiet()}, &httpapi.Options{Logger: quiet()}))
	b.Cleanup(srv.Close)
	return srv.URL + "/api/v1"
}

// benchPost posts body and decodes the answer, which must have status want.
func benchPost(url, body string, want int) (map[string]any, error) {
	return benchPostWith(http.DefaultClient, url, body, want)
}

// benchPostWith is benchPost through hc.
func benchPostWith(hc *http.Client, url, body string, want int) (map[string]any, error) {
	res, err := hc.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != want {
		return nil, fmt.Errorf("POST %s: %d %v %v", url, res.StatusCode, out, err)
	}
	return out, nil
}

// BenchmarkEnqueue: one job per request, from 8 clients at once (the
// store commits concurrent enqueues together).
func BenchmarkEnqueue(b *testing.B) {
	base := benchServer(b)
	b.SetParallelism(4) // 8 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := benchPost(base+"/jobs", `{"kind": "k", "args": {"n": 1}}`, http.StatusCreated); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkFetchComplete: remote workers' round trips, 8 at once, each
// claiming 10 jobs a fetch and completing each with its own request.
func BenchmarkFetchComplete(b *testing.B) {
	base := benchServer(b)
	for i := 0; i < b.N; i += 1000 {
		var jobs bytes.Buffer
		jobs.WriteString(`{"jobs": [`)
		for k := range min(1000, b.N-i) {
			if k > 0 {
				jobs.WriteString(",")
			}
			jobs.WriteString(`{"kind": "k"}`)
		}
		jobs.WriteString(`]}`)
		if _, err := benchPost(base+"/jobs/batch", jobs.String(), http.StatusCreated); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < int64(b.N) {
				out, err := benchPost(base+"/fetch", `{"limit": 10}`, http.StatusOK)
				if err != nil {
					b.Error(err)
					return
				}
				for _, j := range out["jobs"].([]any) {
					job := j.(map[string]any)
					if _, err := benchPost(fmt.Sprintf("%s/jobs/%v/complete", base, job["id"]), fmt.Sprintf(`{"claim_token": %v}`, job["claim_token"]), http.StatusOK); err != nil {
						b.Error(err)
						return
					}
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkEnqueueLoadWithRemoteWorkers: 32 connections enqueue one job a
// request while 4 remote workers fetch up to 100 jobs at a time, on a
// SQLite file with its durable default. The workers report each batch in
// one request (batch), or each job with its own request (per-job). It
// reports both rates over the same span and completed-% (completed per 100
// enqueued): remote workers must keep up with at least half the enqueue
// rate.
func BenchmarkEnqueueLoadWithRemoteWorkers(b *testing.B) {
	for _, batch := range []bool{true, false} {
		name := "batch"
		if !batch {
			name = "per-job"
		}
		b.Run(name, func(b *testing.B) { benchEnqueueLoad(b, batch) })
	}
}

func benchEnqueueLoad(b *testing.B, batch bool) {
	base := benchServer(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(hc.CloseIdleConnections)
	var enqueued, completed atomic.Int64
	stop := make(chan struct{})
	var workers sync.WaitGroup
	for w := range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			if err := benchWorker(hc, base, fmt.Sprintf("w%d", w), batch, stop, &completed); err != nil {
				b.Error(err)
			}
		}()
	}
	b.ResetTimer()
	var clients sync.WaitGroup
	for range 32 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for enqueued.Add(1) <= int64(b.N) {
				if _, err := benchPostWith(hc, base+"/jobs", `{"kind": "k", "args": {"n": 1}}`, http.StatusCreated); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	clients.Wait()
	done := completed.Load()
	b.StopTimer()
	close(stop)
	workers.Wait()
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/secs, "enqueued/s")
	b.ReportMetric(float64(done)/secs, "completed/s")
	b.ReportMetric(100*float64(done)/float64(b.N), "completed-%")
}

// benchWorker is a remote worker: fetch, then report the jobs in one
// request (batch) or one request each, until stop.
func benchWorker(hc *http.Client, base, name string, batch bool, stop <-chan struct{}, completed *atomic.Int64) error {
	fetch := fmt.Sprintf(`{"limit": 100, "worker": %q, "wait": "200ms"}`, name)
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		out, err := benchPostWith(hc, base+"/fetch", fetch, http.StatusOK)
		if err != nil {
			return err
		}
		jobs := out["jobs"].([]any)
		if batch {
			err = benchReportBatch(hc, base, jobs)
		} else {
			err = benchReportEach(hc, base, jobs)
		}
		if err != nil {
			return err
		}
		completed.Add(int64(len(jobs)))
	}
}

func benchReportBatch(hc *http.Client, base string, jobs []any) error {
	if len(jobs) == 0 {
		return nil
	}
	var reports bytes.Buffer
	reports.WriteString(`{"reports": [`)
	for i, j := range jobs {
		job := j.(map[string]any)
		if i > 0 {
			reports.WriteString(",")
		}
		fmt.Fprintf(&reports, `{"id": %v, "claim_token": %v, "outcome": "complete"}`, job["id"], job["claim_token"])
	}
	reports.WriteString(`]}`)
	res, err := benchPostWith(hc, base+"/reports", reports.String(), http.StatusOK)
	if err != nil {
		return err
	}
	for _, r := range res["results"].([]any) {
		if r.(map[string]any)["recorded"] != true {
			return fmt.Errorf("report refused: %v", r)
		}
	}
	return nil
}

func benchReportEach(hc *http.Client, base string, jobs []any) error {
	for _, j := range jobs {
		job := j.(map[string]any)
		if _, err := benchPostWith(hc, fmt.Sprintf("%s/jobs/%v/complete", base, job["id"]), fmt.Sprintf(`{"claim_token": %v}`, job["claim_token"]), http.StatusOK); err != nil {
			return err
		}
	}
	return nil
}
