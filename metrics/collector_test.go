package metrics

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// These tests feed events to a collector directly and fake the job counts,
// to pin the exposition exactly; collector_client_test.go runs a real client.

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func noCounts(context.Context, string) ([]sortie.QueueStateCount, error) { return nil, nil }

func event(kind sortie.EventKind, queue, jobKind string, mod func(*sortie.Event)) *sortie.Event {
	e := &sortie.Event{Kind: kind, At: t0, Job: &sortie.JobRow{Queue: queue, Kind: jobKind, CreatedAt: t0, RunAt: t0}}
	if mod != nil {
		mod(e)
	}
	return e
}

func TestObserveExposition(t *testing.T) {
	t.Parallel()
	c := newCollector(noCounts, &Options{
		Namespace:       "app",
		ConstLabels:     prometheus.Labels{"client": "a"},
		LatencyBuckets:  []float64{1, 10},
		DurationBuckets: []float64{0.5},
		SkipQueueJobs:   true,
	})
	for _, e := range []*sortie.Event{
		event(sortie.EventJobEnqueued, "default", "email", nil),
		event(sortie.EventJobEnqueued, "default", "email", nil),
		event(sortie.EventJobEnqueued, "mail", "digest", nil),
		// Due at creation, started 2s later.
		event(sortie.EventJobStarted, "default", "email", func(e *sortie.Event) { e.At = t0.Add(2 * time.Second) }),
		// Scheduled for t0+1m, created at t0, started 500ms after it was due.
		event(sortie.EventJobStarted, "default", "email", func(e *sortie.Event) {
			e.Job.RunAt = t0.Add(time.Minute)
			e.At = t0.Add(time.Minute + 500*time.Millisecond)
		}),
		// Another process's clock ran ahead: started "before" it was created.
		event(sortie.EventJobStarted, "mail", "digest", func(e *sortie.Event) { e.Job.CreatedAt = t0.Add(time.Second) }),
		event(sortie.EventJobFinished, "default", "email", func(e *sortie.Event) {
			e.Outcome, e.Duration = sortie.OutcomeCompleted, 250*time.Millisecond
		}),
		event(sortie.EventJobFinished, "default", "email", func(e *sortie.Event) {
			e.Outcome, e.Duration = sortie.OutcomeRetrying, time.Second
		}),
		event(sortie.EventJobFinished, "mail", "digest", func(e *sortie.Event) {
			e.Outcome, e.Duration = sortie.OutcomeCancelled, 0
		}),
		{Kind: sortie.EventJobStarted}, // no job: ignored
	} {
		c.observe(e)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `
# HELP app_job_run_duration_seconds Time an attempt's handler ran.
# TYPE app_job_run_duration_seconds histogram
app_job_run_duration_seconds_bucket{client="a",kind="digest",queue="mail",le="0.5"} 1
app_job_run_duration_seconds_bucket{client="a",kind="digest",queue="mail",le="+Inf"} 1
app_job_run_duration_seconds_sum{client="a",kind="digest",queue="mail"} 0
app_job_run_duration_seconds_count{client="a",kind="digest",queue="mail"} 1
app_job_run_duration_seconds_bucket{client="a",kind="email",queue="default",le="0.5"} 1
app_job_run_duration_seconds_bucket{client="a",kind="email",queue="default",le="+Inf"} 2
app_job_run_duration_seconds_sum{client="a",kind="email",queue="default"} 1.25
app_job_run_duration_seconds_count{client="a",kind="email",queue="default"} 2
# HELP app_job_start_latency_seconds Time from when a job was due (the later of its creation and its RunAt) to the start of an attempt.
# TYPE app_job_start_latency_seconds histogram
app_job_start_latency_seconds_bucket{client="a",kind="digest",queue="mail",le="1"} 1
app_job_start_latency_seconds_bucket{client="a",kind="digest",queue="mail",le="10"} 1
app_job_start_latency_seconds_bucket{client="a",kind="digest",queue="mail",le="+Inf"} 1
app_job_start_latency_seconds_sum{client="a",kind="digest",queue="mail"} 0
app_job_start_latency_seconds_count{client="a",kind="digest",queue="mail"} 1
app_job_start_latency_seconds_bucket{client="a",kind="email",queue="default",le="1"} 1
app_job_start_latency_seconds_bucket{client="a",kind="email",queue="default",le="10"} 2
app_job_start_latency_seconds_bucket{client="a",kind="email",queue="default",le="+Inf"} 2
app_job_start_latency_seconds_sum{client="a",kind="email",queue="default"} 2.5
app_job_start_latency_seconds_count{client="a",kind="email",queue="default"} 2
# HELP app_jobs_enqueued_total Jobs this process enqueued (duplicates of unique jobs left out).
# TYPE app_jobs_enqueued_total counter
app_jobs_enqueued_total{client="a",kind="digest",queue="mail"} 1
app_jobs_enqueued_total{client="a",kind="email",queue="default"} 2
# HELP app_jobs_finished_total Attempts this process finished, by outcome (completed, retrying, dead, cancelled, snoozed, released).
# TYPE app_jobs_finished_total counter
app_jobs_finished_total{client="a",kind="digest",outcome="cancelled",queue="mail"} 1
app_jobs_finished_total{client="a",kind="email",outcome="completed",queue="default"} 1
app_jobs_finished_total{client="a",kind="email",outcome="retrying",queue="default"} 1
# HELP app_jobs_started_total Attempts this process started.
# TYPE app_jobs_started_total counter
app_jobs_started_total{client="a",kind="digest",queue="mail"} 1
app_jobs_started_total{client="a",kind="email",queue="default"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestQueueJobsReportsEveryState(t *testing.T) {
	t.Parallel()
	c := newCollector(func(_ context.Context, queue string) ([]sortie.QueueStateCount, error) {
		if queue != "" {
			t.Errorf("JobCounts(%q), want all queues (\"\")", queue)
		}
		return []sortie.QueueStateCount{
			{Queue: "default", State: sortie.JobStateAvailable, Count: 3},
			{Queue: "default", State: sortie.JobStateDead, Count: 1},
			{Queue: "mail", State: sortie.JobStateRunning, Count: 2},
		}, nil
	}, nil)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `
# HELP sortie_queue_jobs Jobs in the store by queue and state, read at scrape time.
# TYPE sortie_queue_jobs gauge
sortie_queue_jobs{queue="default",state="available"} 3
sortie_queue_jobs{queue="default",state="cancelled"} 0
sortie_queue_jobs{queue="default",state="completed"} 0
sortie_queue_jobs{queue="default",state="dead"} 1
sortie_queue_jobs{queue="default",state="retrying"} 0
sortie_queue_jobs{queue="default",state="running"} 0
sortie_queue_jobs{queue="default",state="scheduled"} 0
sortie_queue_jobs{queue="default",state="waiting"} 0
sortie_queue_jobs{queue="mail",state="available"} 0
sortie_queue_jobs{queue="mail",state="cancelled"} 0
sortie_queue_jobs{queue="mail",state="completed"} 0
sortie_queue_jobs{queue="mail",state="dead"} 0
sortie_queue_jobs{queue="mail",state="retrying"} 0
sortie_queue_jobs{queue="mail",state="running"} 2
sortie_queue_jobs{queue="mail",state="scheduled"} 0
sortie_queue_jobs{queue="mail",state="waiting"} 0
# HELP sortie_store_up 1 if the job counts were read from the store at this scrape, 0 if not.
# TYPE sortie_store_up gauge
sortie_store_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sortie_queue_jobs", "sortie_store_up"); err != nil {
		t.Error(err)
	}
}

// logRecorder keeps the messages logged through it.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}

func (r *logRecorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

const enqueuedOne = `
# HELP sortie_jobs_enqueued_total Jobs this process enqueued (duplicates of unique jobs left out).
# TYPE sortie_jobs_enqueued_total counter
sortie_jobs_enqueued_total{kind="email",queue="default"} 1
`

func TestQueueJobsFailureKeepsTheScrape(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	logs := &logRecorder{}
	c := newCollector(func(context.Context, string) ([]sortie.QueueStateCount, error) {
		if failing.Load() {
			return nil, errors.New("store unreachable")
		}
		return []sortie.QueueStateCount{{Queue: "default", State: sortie.JobStateAvailable, Count: 1}}, nil
	}, &Options{Logger: slog.New(logs)})
	c.observe(event(sortie.EventJobEnqueued, "default", "email", nil))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)

	for range 2 {
		if _, err := reg.Gather(); err != nil {
			t.Fatalf("Gather() with the store failing: %v, want the scrape to succeed", err)
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(enqueuedOne), "sortie_jobs_enqueued_total"); err != nil {
			t.Errorf("with the store failing: %v", err)
		}
		if n, err := testutil.GatherAndCount(reg, "sortie_queue_jobs"); err != nil || n != 0 {
			t.Errorf("sortie_queue_jobs has %d series (err %v), want 0 while the store fails", n, err)
		}
		if got := gaugeValue(t, reg, "sortie_store_up"); got != 0 {
			t.Errorf("sortie_store_up = %v, want 0", got)
		}
	}
	failing.Store(false)
	if got := gaugeValue(t, reg, "sortie_store_up"); got != 1 {
		t.Errorf("sortie_store_up = %v after the store healed, want 1", got)
	}
	if n, err := testutil.GatherAndCount(reg, "sortie_queue_jobs"); err != nil || n != len(store.JobStates) {
		t.Errorf("sortie_queue_jobs has %d series (err %v), want %d", n, err, len(store.JobStates))
	}
	// Several failing scrapes make one warning; the recovery one note.
	want := []string{"WARN job counts unreadable, queue gauges left out of scrapes", "INFO job counts readable again"}
	if got := logs.messages(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("logged %q, want %q", got, want)
	}
}

func TestQueueJobsTimeout(t *testing.T) {
	t.Parallel()
	c := newCollector(func(ctx context.Context, _ string) ([]sortie.QueueStateCount, error) {
		<-ctx.Done() // a store that never answers
		return nil, ctx.Err()
	}, &Options{QueueJobsTimeout: 10 * time.Millisecond, Logger: slog.New(&logRecorder{})})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if got := gaugeValue(t, reg, "sortie_store_up"); got != 0 {
		t.Errorf("sortie_store_up = %v with a store that hangs, want 0", got)
	}
}

func TestSkipQueueJobsNeverReadsTheStore(t *testing.T) {
	t.Parallel()
	c := newCollector(func(context.Context, string) ([]sortie.QueueStateCount, error) {
		t.Error("JobCounts called with SkipQueueJobs set")
		return nil, nil
	}, &Options{SkipQueueJobs: true})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("GatherAndCount() = %d, %v; want 0 series before any event", n, err)
	}
}

func TestNewPanicsOnInvalidOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts *Options
	}{
		{"unsorted buckets", &Options{LatencyBuckets: []float64{2, 1}}},
		{"invalid const label name", &Options{ConstLabels: prometheus.Labels{"": "x"}}},
		{"const label named like a label", &Options{ConstLabels: prometheus.Labels{"queue": "x"}}},
		{"const label le", &Options{ConstLabels: prometheus.Labels{"le": "x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if recover() == nil {
					t.Errorf("newCollector(%+v) did not panic", tt.opts)
				}
			}()
			newCollector(noCounts, tt.opts)
		})
	}
}

// gaugeValue gathers reg and returns the value of the unlabelled gauge name.
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather(): %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("Gather() has no single %s", name)
	return 0
}

// The server problems the client's last check found are one gauge each,
// read without a store call; with none, the family is empty.
func TestStoreServerProblems(t *testing.T) {
	t.Parallel()
	c := newCollector(noCounts, &Options{SkipQueueJobs: true})
	var problems []sortie.ServerProblem
	c.problems = func() []sortie.ServerProblem { return problems }
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if n, err := testutil.GatherAndCount(reg, "sortie_store_server_problem"); err != nil || n != 0 {
		t.Fatalf("sortie_store_server_problem with no problem: %d series, %v; want none", n, err)
	}
	problems = []sortie.ServerProblem{{Code: sortie.ProblemEviction}, {Code: sortie.ProblemNoAppendOnly}}
	want := `
# HELP sortie_store_server_problem 1 for each state of the store's server that puts jobs at risk, as the client's last check found it (eviction, no-persistence, no-append-only, memory).
# TYPE sortie_store_server_problem gauge
sortie_store_server_problem{problem="eviction"} 1
sortie_store_server_problem{problem="no-append-only"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sortie_store_server_problem"); err != nil {
		t.Error(err)
	}
}
