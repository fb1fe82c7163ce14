package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/metrics"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// Task is a job whose handler does what Do says: "ok", "fail" or "cancel".
type Task struct {
	Do string `json:"do"`
}

func (Task) Kind() string { return "task" }

func newStore(t *testing.T) store.Store {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// finishes counts a client's finished events and lets a test wait for them.
type finishes struct {
	mu   sync.Mutex
	n    int
	more chan struct{} // closed and replaced at each finish
}

func countFinishes(t *testing.T, c *sortie.Client) *finishes {
	t.Helper()
	f := &finishes{more: make(chan struct{})}
	t.Cleanup(c.Subscribe(func(e *sortie.Event) {
		if e.Kind != sortie.EventJobFinished {
			return
		}
		f.mu.Lock()
		f.n++
		close(f.more)
		f.more = make(chan struct{})
		f.mu.Unlock()
	}))
	return f
}

// wait waits until n attempts finished, failing the test after 10 seconds.
func (f *finishes) wait(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		got, more := f.n, f.more
		f.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-more:
		case <-timeout:
			t.Fatalf("timed out waiting for %d finished attempts, saw %d", n, got)
		}
	}
}

func TestCollectorCountsAClientsJobs(t *testing.T) {
	t.Parallel()
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Task]) error {
		switch job.Args.Do {
		case "fail":
			return errors.New("boom")
		case "cancel":
			return sortie.Cancel(errors.New("not wanted"))
		}
		return nil
	}), &sortie.WorkerOpts{MaxAttempts: 2})
	client, err := sortie.NewClient(newStore(t), &sortie.Config{
		Queues:      map[string]sortie.QueueConfig{"default": {MaxWorkers: 2}},
		Workers:     workers,
		Logger:      slog.New(slog.DiscardHandler),
		RetryPolicy: sortie.RetryPolicyFunc(func(*sortie.JobRow) time.Duration { return time.Millisecond }),
	})
	if err != nil {
		t.Fatal(err)
	}
	col := metrics.New(client, nil)
	t.Cleanup(col.Close)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	done := countFinishes(t, client)

	ctx := context.Background()
	for _, do := range []string{"ok", "ok", "fail", "cancel"} {
		if _, err := client.Enqueue(ctx, Task{Do: do}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Two jobs that stay scheduled; an operator cancels one of them.
	for range 2 {
		if _, err := client.Enqueue(ctx, Task{Do: "ok"}, &sortie.EnqueueOpts{RunIn: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	later, err := client.Enqueue(ctx, Task{Do: "ok"}, &sortie.EnqueueOpts{Queue: "later", RunIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.JobCancel(ctx, later.ID); err != nil {
		t.Fatal(err)
	}

	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// ok, ok, cancel, and fail twice (retrying, then dead).
	done.wait(t, 5)
	if err := client.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather(): %v", err)
	}
	for _, tt := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"sortie_jobs_enqueued_total", map[string]string{"queue": "default", "kind": "task"}, 6},
		{"sortie_jobs_enqueued_total", map[string]string{"queue": "later", "kind": "task"}, 1},
		{"sortie_jobs_started_total", map[string]string{"queue": "default", "kind": "task"}, 5},
		{"sortie_jobs_finished_total", map[string]string{"queue": "default", "kind": "task", "outcome": "completed"}, 2},
		{"sortie_jobs_finished_total", map[string]string{"queue": "default", "kind": "task", "outcome": "retrying"}, 1},
		{"sortie_jobs_finished_total", map[string]string{"queue": "default", "kind": "task", "outcome": "dead"}, 1},
		{"sortie_jobs_finished_total", map[string]string{"queue": "default", "kind": "task", "outcome": "cancelled"}, 1},
		{"sortie_job_start_latency_seconds", map[string]string{"queue": "default", "kind": "task"}, 5},
		{"sortie_job_run_duration_seconds", map[string]string{"queue": "default", "kind": "task"}, 5},
		{"sortie_queue_jobs", map[string]string{"queue": "default", "state": "completed"}, 2},
		{"sortie_queue_jobs", map[string]string{"queue": "default", "state": "dead"}, 1},
		{"sortie_queue_jobs", map[string]string{"queue": "default", "state": "cancelled"}, 1},
		{"sortie_queue_jobs", map[string]string{"queue": "default", "state": "scheduled"}, 2},
		{"sortie_queue_jobs", map[string]string{"queue": "default", "state": "available"}, 0},
		{"sortie_queue_jobs", map[string]string{"queue": "default", "state": "running"}, 0},
		{"sortie_queue_jobs", map[string]string{"queue": "later", "state": "cancelled"}, 1},
		{"sortie_queue_jobs", map[string]string{"queue": "later", "state": "scheduled"}, 0},
		{"sortie_store_up", nil, 1},
	} {
		if got, ok := value(mfs, tt.family, tt.labels); !ok {
			t.Errorf("%s%v missing", tt.family, tt.labels)
		} else if got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.family, tt.labels, got, tt.want)
		}
	}
	// One series per queue and kind (and outcome): never one per job.
	for family, want := range map[string]int{
		"sortie_jobs_enqueued_total":       2,
		"sortie_jobs_started_total":        1,
		"sortie_jobs_finished_total":       4,
		"sortie_job_start_latency_seconds": 1,
		"sortie_job_run_duration_seconds":  1,
		"sortie_queue_jobs":                2 * len(store.JobStates),
	} {
		if n := testutil.CollectAndCount(col, family); n != want {
			t.Errorf("CollectAndCount(%s) = %d, want %d", family, n, want)
		}
	}

	// After Close, new events are no longer counted.
	col.Close()
	col.Close()
	if _, err := client.Enqueue(ctx, Task{Do: "ok"}, nil); err != nil {
		t.Fatal(err)
	}
	mfs, err = reg.Gather()
	if err != nil {
		t.Fatalf("Gather(): %v", err)
	}
	if got, _ := value(mfs, "sortie_jobs_enqueued_total", map[string]string{"queue": "default", "kind": "task"}); got != 6 {
		t.Errorf("sortie_jobs_enqueued_total after Close = %v, want 6", got)
	}
	if got, _ := value(mfs, "sortie_queue_jobs", map[string]string{"queue": "default", "state": "available"}); got != 1 {
		t.Errorf("sortie_queue_jobs{state=available} after Close = %v, want 1 (still read from the store)", got)
	}
}

func TestCollectorStoreDown(t *testing.T) {
	t.Parallel()
	st := storefault.New(newStore(t))
	client, err := sortie.NewClient(st, &sortie.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	col := metrics.New(client, &metrics.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(col.Close)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	if _, err := client.Enqueue(context.Background(), Task{Do: "ok"}, nil); err != nil {
		t.Fatal(err)
	}

	st.Fail("JobCounts", nil)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() with JobCounts failing: %v, want the scrape to succeed", err)
	}
	if got, _ := value(mfs, "sortie_store_up", nil); got != 0 {
		t.Errorf("sortie_store_up = %v with JobCounts failing, want 0", got)
	}
	if _, ok := value(mfs, "sortie_queue_jobs", map[string]string{"queue": "default", "state": "available"}); ok {
		t.Error("sortie_queue_jobs reported with JobCounts failing, want it left out")
	}
	if got, _ := value(mfs, "sortie_jobs_enqueued_total", map[string]string{"queue": "default", "kind": "task"}); got != 1 {
		t.Errorf("sortie_jobs_enqueued_total = %v with JobCounts failing, want 1", got)
	}

	st.Heal()
	mfs, err = reg.Gather()
	if err != nil {
		t.Fatalf("Gather(): %v", err)
	}
	if got, _ := value(mfs, "sortie_store_up", nil); got != 1 {
		t.Errorf("sortie_store_up = %v after Heal, want 1", got)
	}
	if got, _ := value(mfs, "sortie_queue_jobs", map[string]string{"queue": "default", "state": "available"}); got != 1 {
		t.Errorf("sortie_queue_jobs{queue=default,state=available} = %v after Heal, want 1", got)
	}
}

// value finds the metric of family with exactly labels among mfs and returns
// its value: a counter's or gauge's value, a histogram's sample count.
func value(mfs []*dto.MetricFamily, family string, labels map[string]string) (float64, bool) {
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; !ok || v != lp.GetValue() {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
			panic(fmt.Sprintf("%s: unexpected metric type", family))
		}
	}
	return 0, false
}
