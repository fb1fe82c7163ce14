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
	s := newServer(b, st, &httpapi.Options{Logger: quiet()})
	srv := httptest.NewServer(s.h)
	b.Cleanup(srv.Close)
	return srv.URL + "/api/v1"
}

// benchPost posts body and decodes the answer, which must have status want.
func benchPost(url, body string, want int) (map[string]any, error) {
	res, err := http.Post(url, "application/json", bytes.NewBufferString(body))
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
