package metrics

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// BenchmarkScrape times a whole /metrics scrape (HTTP, gzipped as
// Prometheus and the Go client ask, unzipped by the client) of a collector
// that saw 1,000 (queue, kind) pairs, every series filled in, with the queue
// gauges read from a SQLite store holding jobs in 1,000 queues: the text
// format (what Prometheus 3 gets by default, and curl) and the protobuf
// format (what it asks for first with native histograms on), served by
// Collector.Handler as sortie serve serves them. docs/benchmarks.md has
// the current figures.
//
//	go test -run '^$' -bench Scrape -benchtime 20x -count 10 ./metrics/
func BenchmarkScrape(b *testing.B) {
	ctx := context.Background()
	st, err := sqlitestore.Open(filepath.Join(b.TempDir(), "scrape.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const queues, kinds = 100, 10
	var jobs []*store.NewJob
	for q := range 1000 {
		jobs = append(jobs, &store.NewJob{Kind: "k", Queue: fmt.Sprintf("queue-%04d", q), Args: []byte(`{}`), Priority: 2, MaxAttempts: 25})
	}
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: time.Now()}); err != nil {
		b.Fatal(err)
	}
	client, err := sortie.NewClient(st, nil)
	if err != nil {
		b.Fatal(err)
	}
	c := newCollector(client.JobCounts, nil)
	for q := range queues {
		for k := range kinds {
			queue, kind := fmt.Sprintf("queue-%04d", q), fmt.Sprintf("kind-%02d", k)
			c.observe(event(sortie.EventJobEnqueued, queue, kind, nil))
			c.observe(event(sortie.EventJobStarted, queue, kind, nil))
			for _, o := range []sortie.Outcome{sortie.OutcomeCompleted, sortie.OutcomeRetrying, sortie.OutcomeDead, sortie.OutcomeCancelled} {
				c.observe(event(sortie.EventJobFinished, queue, kind, func(e *sortie.Event) { e.Outcome, e.Duration = o, time.Second }))
			}
		}
	}
	handler := httptest.NewServer(c.Handler(nil))
	defer handler.Close()
	const text, protobuf = "text/plain;version=0.0.4", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
	for _, f := range []struct {
		name, accept string
		srv          *httptest.Server
	}{
		{"text", text, handler},
		{"protobuf", protobuf, handler},
	} {
		srv := f.srv
		b.Run(f.name, func(b *testing.B) {
			var size, zipped int64
			start := time.Now()
			for b.Loop() {
				size, zipped = scrapeGzipped(b, srv, f.accept)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/scrape")
			b.ReportMetric(float64(size)/1024, "KiB/scrape")
			b.ReportMetric(float64(zipped)/1024, "gzKiB/scrape")
		})
	}
}

// scrapeGzipped gets srv's metrics in the format accept asks for, gzipped,
// and unzips them, as Prometheus does. It returns the size of the answer
// unzipped and zipped.
func scrapeGzipped(b *testing.B, srv *httptest.Server, accept string) (size, zipped int64) {
	b.Helper()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Accept", accept)
	// Asked for explicitly, gzip is left to the caller to unzip.
	req.Header.Set("Accept-Encoding", "gzip")
	res, err := srv.Client().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Encoding") != "gzip" {
		b.Fatalf("GET /metrics: %s, Content-Encoding %q; want 200, gzip", res.Status, res.Header.Get("Content-Encoding"))
	}
	counted := &countingReader{r: res.Body}
	zr, err := gzip.NewReader(counted)
	if err != nil {
		b.Fatal(err)
	}
	if size, err = io.Copy(io.Discard, zr); err != nil {
		b.Fatal(err)
	}
	return size, counted.n
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
