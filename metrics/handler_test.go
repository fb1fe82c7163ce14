package metrics

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sortiehq/sortie"
)

// These tests scrape Handler as Prometheus does.

const (
	acceptText     = "text/plain;version=0.0.4"
	acceptProto    = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
	acceptProtoTxt = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text"
	// acceptPrometheus is what Prometheus 3 sends by default;
	// acceptPrometheusNative with native histograms on.
	acceptPrometheus       = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
	acceptPrometheusNative = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,*/*;q=0.1"
)

// someCounts are job counts of two queues, in no particular order.
func someCounts(context.Context, string) ([]sortie.QueueStateCount, error) {
	return []sortie.QueueStateCount{
		{Queue: "mail", State: sortie.JobStateRunning, Count: 2},
		{Queue: "default", State: sortie.JobStateAvailable, Count: 3},
		{Queue: "default", State: sortie.JobStateDead, Count: 1},
	}, nil
}

// busyCollector returns a collector that saw events of several queues,
// kinds (one needing escapes) and every outcome, in no particular order.
func busyCollector(t *testing.T, counts func(context.Context, string) ([]sortie.QueueStateCount, error), opts *Options) *Collector {
	t.Helper()
	c := newCollector(counts, opts)
	kinds := []string{"email", `odd"kind\`, "digest"}
	outcomes := []sortie.Outcome{
		sortie.OutcomeRetrying, sortie.OutcomeCompleted, sortie.OutcomeDead,
		sortie.OutcomeCancelled, sortie.OutcomeSnoozed, sortie.OutcomeReleased,
	}
	for i := range 40 {
		queue, kind := fmt.Sprintf("q%d", (i*7)%5), kinds[i%len(kinds)]
		c.observe(event(sortie.EventJobEnqueued, queue, kind, nil))
		if i%4 == 3 {
			continue // some pairs are only enqueued
		}
		c.observe(event(sortie.EventJobStarted, queue, kind, func(e *sortie.Event) {
			e.At = t0.Add(time.Duration(i*i) * 37 * time.Millisecond)
		}))
		c.observe(event(sortie.EventJobFinished, queue, kind, func(e *sortie.Event) {
			e.Outcome, e.Duration = outcomes[i%len(outcomes)], time.Duration(i)*333*time.Millisecond
		}))
	}
	return c
}

// scrape serves one GET through h and returns the answer, its body
// unzipped if it was gzipped.
func scrape(t *testing.T, h http.Handler, target, accept, acceptEncoding string) (*http.Response, []byte) {
	t.Helper()
	req := httptest.NewRequest("GET", target, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	body := rec.Body.Bytes()
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("gzipped answer: %v", err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			t.Fatalf("gzipped answer: %v", err)
		}
	}
	return res, body
}

// decode reads the metric families of an answer in format.
func decode(t *testing.T, body []byte, format expfmt.Format) []*dto.MetricFamily {
	t.Helper()
	dec := expfmt.NewDecoder(bytes.NewReader(body), format)
	var mfs []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); errors.Is(err, io.EOF) {
			return mfs
		} else if err != nil {
			t.Fatalf("decoding %s: %v", format, err)
		}
		mfs = append(mfs, mf)
	}
}

// extraGatherer gathers families named to sort before, among and after a
// Collector's.
func extraGatherer(t *testing.T) prometheus.Gatherer {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, name := range []string{"aaa_total", "sortie_job_middle_total", "sortie_queue_extra_total", "zzz_total"} {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: "An extra family: " + name + "."}, []string{"x"})
		c.WithLabelValues("1").Add(3)
		c.WithLabelValues(`a"b`).Inc()
		reg.MustRegister(c)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sortie_store_zzz", Help: "Last of all."})
	g.Set(-1.5)
	reg.MustRegister(g)
	return reg
}

// families returns the names of the families an answer in format holds,
// sorted (the text decoder returns them in no order).
func families(t *testing.T, body []byte, format expfmt.Format) []string {
	t.Helper()
	var names []string
	for _, mf := range decode(t, body, format) {
		names = append(names, mf.GetName())
	}
	slices.Sort(names)
	return names
}

// TestHandlerServesAlso scrapes a Collector's Handler with another
// Gatherer in the formats Prometheus asks for: each answer holds both's
// families, and name[] keeps only the families it names.
func TestHandlerServesAlso(t *testing.T) {
	t.Parallel()
	c := busyCollector(t, someCounts, &Options{Logger: slog.New(slog.DiscardHandler)})
	h := c.Handler(extraGatherer(t))
	all := []string{
		"aaa_total", "sortie_job_middle_total", "sortie_job_run_duration_seconds",
		"sortie_job_start_latency_seconds", "sortie_jobs_enqueued_total", "sortie_jobs_finished_total",
		"sortie_jobs_started_total", "sortie_queue_extra_total", "sortie_queue_jobs",
		"sortie_store_up", "sortie_store_zzz", "zzz_total",
	}
	for _, accept := range []string{"", acceptText, acceptProto, acceptPrometheusNative} {
		res, body := scrape(t, h, "/metrics", accept, "gzip")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("Accept %q: status %d, want 200:\n%s", accept, res.StatusCode, body)
		}
		format := expfmt.Format(res.Header.Get("Content-Type"))
		if diff := cmp.Diff(all, families(t, body, format)); diff != "" {
			t.Errorf("Accept %q: families (-want +got):\n%s", accept, diff)
		}
	}
	_, body := scrape(t, h, "/metrics?name[]=sortie_queue_jobs&name[]=zzz_total&name[]=app_jobs_finished_total", acceptText, "")
	if diff := cmp.Diff([]string{"sortie_queue_jobs", "zzz_total"}, families(t, body, expfmt.NewFormat(expfmt.TypeTextPlain))); diff != "" {
		t.Errorf("name[] filter: families (-want +got):\n%s", diff)
	}
}

func TestHandlerText(t *testing.T) {
	t.Parallel()
	c := newCollector(someCounts, &Options{LatencyBuckets: []float64{1, 10}})
	c.observe(event(sortie.EventJobEnqueued, "default", "email", nil))
	c.observe(event(sortie.EventJobStarted, "default", "email", func(e *sortie.Event) { e.At = t0.Add(2 * time.Second) }))
	c.observe(event(sortie.EventJobStarted, "default", "email", func(e *sortie.Event) { e.At = t0.Add(time.Minute) }))
	c.observe(event(sortie.EventJobFinished, "default", "email", func(e *sortie.Event) {
		e.Outcome, e.Duration = sortie.OutcomeCompleted, 250*time.Millisecond
	}))

	res, body := scrape(t, c.Handler(nil), "/metrics", acceptText, "")
	if ct := res.Header.Get("Content-Type"); expfmt.Format(ct).FormatType() != expfmt.TypeTextPlain {
		t.Errorf("Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing the answer: %v\n%s", err, body)
	}
	latency := mfs["sortie_job_start_latency_seconds"].GetMetric()
	if len(latency) != 1 {
		t.Fatalf("sortie_job_start_latency_seconds has %d series, want 1", len(latency))
	}
	h := latency[0].GetHistogram()
	var buckets []string
	for _, b := range h.GetBucket() {
		buckets = append(buckets, fmt.Sprintf("le=%v:%d", b.GetUpperBound(), b.GetCumulativeCount()))
	}
	if got, want := strings.Join(buckets, " "), "le=1:0 le=10:1 le=+Inf:2"; got != want || h.GetSampleCount() != 2 || h.GetSampleSum() != 62 {
		t.Errorf("start latency: buckets %s, count %d, sum %v; want %s, count 2, sum 62", got, h.GetSampleCount(), h.GetSampleSum(), want)
	}
	for _, tt := range []struct {
		family string
		want   float64
	}{
		{"sortie_jobs_enqueued_total", 1},
		{"sortie_jobs_started_total", 2},
		{"sortie_jobs_finished_total", 1},
		{"sortie_store_up", 1},
	} {
		if ms := mfs[tt.family].GetMetric(); len(ms) != 1 {
			t.Errorf("%s has %d series, want 1", tt.family, len(ms))
		} else if got := ms[0].GetCounter().GetValue() + ms[0].GetGauge().GetValue(); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.family, got, tt.want)
		}
	}
	if n := len(mfs["sortie_queue_jobs"].GetMetric()); n != 2*len(sortedStates) {
		t.Errorf("sortie_queue_jobs has %d series, want %d", n, 2*len(sortedStates))
	}
}

func TestHandlerGzip(t *testing.T) {
	t.Parallel()
	// promhttp logs an Accept-Encoding it cannot satisfy ("gzip;q=0").
	c := busyCollector(t, someCounts, &Options{Logger: slog.New(slog.DiscardHandler)})
	h := c.Handler(nil)
	_, plain := scrape(t, h, "/metrics", acceptText, "")
	for _, tt := range []struct {
		acceptEncoding string
		gzip           bool
	}{
		{"", false},
		{"gzip", true},
		{"deflate, gzip;q=0.5, br", true},
		{"gzip;q=0", false},
		{"gzip;q=0, *", false},
		{"identity", false},
		{"br, *;q=0", false},
	} {
		res, body := scrape(t, h, "/metrics", acceptText, tt.acceptEncoding)
		if got := res.Header.Get("Content-Encoding") == "gzip"; got != tt.gzip {
			t.Errorf("Accept-Encoding %q: gzipped %v, want %v", tt.acceptEncoding, got, tt.gzip)
		}
		if !bytes.Equal(body, plain) {
			t.Errorf("Accept-Encoding %q: body differs from the plain one", tt.acceptEncoding)
		}
	}
}

func TestHandlerFails(t *testing.T) {
	t.Parallel()
	c := newCollector(someCounts, &Options{Logger: slog.New(slog.DiscardHandler)})
	c.observe(event(sortie.EventJobEnqueued, "default", "email", nil))
	twice := prometheus.NewRegistry()
	twice.MustRegister(c)
	broken := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return nil, errors.New("collector broke") })
	for _, tt := range []struct {
		name string
		also prometheus.Gatherer
		want string
	}{
		{"collector gathered twice", twice, `collected metric "sortie_jobs_enqueued_total"`},
		{"gather error", broken, "collector broke"},
	} {
		res, body := scrape(t, c.Handler(tt.also), "/metrics", acceptText, "gzip")
		if res.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), tt.want) {
			t.Errorf("%s: %d %q, want 500 saying %q", tt.name, res.StatusCode, body, tt.want)
		}
	}
}

// TestHandlerWhileCounting scrapes while events are counted: every answer
// parses, each histogram's buckets rise to its count, and the last answer
// has every event.
func TestHandlerWhileCounting(t *testing.T) {
	t.Parallel()
	const workers, events = 4, 300
	c := newCollector(someCounts, nil)
	h := c.Handler(nil)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range events {
				queue := fmt.Sprintf("q%d", (w+i)%3)
				c.observe(event(sortie.EventJobStarted, queue, "email", func(e *sortie.Event) {
					e.At = t0.Add(time.Duration(i) * time.Millisecond)
				}))
				c.observe(event(sortie.EventJobFinished, queue, "email", func(e *sortie.Event) {
					e.Outcome, e.Duration = sortie.OutcomeCompleted, time.Duration(i)*time.Millisecond
				}))
			}
		})
	}
	check := func(final bool) {
		_, body := scrape(t, h, "/metrics", acceptText, "")
		p := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("parsing an answer: %v", err)
		}
		var started, finished uint64
		for _, name := range []string{"sortie_job_start_latency_seconds", "sortie_job_run_duration_seconds"} {
			for _, m := range mfs[name].GetMetric() {
				hist := m.GetHistogram()
				var last uint64
				for _, b := range hist.GetBucket() {
					if b.GetCumulativeCount() < last {
						t.Fatalf("%s: buckets fall: %v", name, hist)
					}
					last = b.GetCumulativeCount()
				}
				if last != hist.GetSampleCount() {
					t.Fatalf("%s: +Inf bucket %d, count %d", name, last, hist.GetSampleCount())
				}
				if name == "sortie_job_start_latency_seconds" {
					started += last
				} else {
					finished += last
				}
			}
		}
		if final && (started != workers*events || finished != workers*events) {
			t.Errorf("histograms counted %d starts and %d finishes, want %d each", started, finished, workers*events)
		}
	}
	for range 20 {
		check(false)
	}
	wg.Wait()
	check(true)
}
