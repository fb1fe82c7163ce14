package sortie_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

var historyT0 = time.Date(2025, 6, 1, 12, 0, 30, 0, time.UTC)

// historyClient is a client on a fake clock at historyT0 whose worker
// completes "ok", fails "fail" and cancels "cancel".
func historyClient(t *testing.T, st store.Store, cfg *sortie.Config) (*sortie.Client, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(historyT0)
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		switch job.Args.Text {
		case "fail":
			return errors.New("no")
		case "cancel":
			return sortie.Cancel(errors.New("stop"))
		}
		return nil
	}), nil)
	cfg.Clock, cfg.Workers = fc, workers
	cfg.Queues = map[string]sortie.QueueConfig{sortie.QueueDefault: {MaxWorkers: 1}}
	return newClient(t, st, cfg), fc
}

// drainAll runs every due job and fails the test unless it ran want.
func drainAll(t *testing.T, c *sortie.Client, want int) {
	t.Helper()
	if n, err := c.Drain(context.Background()); err != nil || n != want {
		t.Fatalf("Drain() = %d, %v; want %d attempts", n, err, want)
	}
}

// JobHistory counts what every attempt ended in, per minute, or summed
// per Step, and leaves out periods without any.
func TestJobHistory(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		c, fc := historyClient(t, st, &sortie.Config{})
		for _, text := range []string{"ok", "ok", "cancel"} {
			mustEnqueue(t, c, Msg{Text: text}, nil)
		}
		mustEnqueue(t, c, Msg{Text: "fail"}, &sortie.EnqueueOpts{MaxAttempts: 2})
		drainAll(t, c, 4)
		fc.Advance(time.Hour)
		drainAll(t, c, 1)

		m0 := historyT0.Truncate(time.Minute)
		m1 := m0.Add(time.Hour)
		row := func(at time.Time, o sortie.HistoryOutcome, n int64) sortie.HistoryRow {
			return sortie.HistoryRow{Queue: sortie.QueueDefault, At: at, Outcome: o, Count: n}
		}
		for _, tt := range []struct {
			name string
			p    sortie.JobHistoryParams
			want []sortie.HistoryRow
		}{
			{"per minute", sortie.JobHistoryParams{Since: historyT0.Add(-time.Hour)}, []sortie.HistoryRow{
				row(m0, sortie.HistoryCompleted, 2), row(m0, sortie.HistoryCancelled, 1), row(m0, sortie.HistoryRetried, 1),
				row(m1, sortie.HistoryDead, 1)}},
			{"per day", sortie.JobHistoryParams{Since: historyT0, Step: 24 * time.Hour}, []sortie.HistoryRow{
				row(m0.Truncate(24*time.Hour), sortie.HistoryCompleted, 2), row(m0.Truncate(24*time.Hour), sortie.HistoryCancelled, 1),
				row(m0.Truncate(24*time.Hour), sortie.HistoryDead, 1), row(m0.Truncate(24*time.Hour), sortie.HistoryRetried, 1)}},
			{"the minute Until falls in counts", sortie.JobHistoryParams{Since: historyT0, Until: m0.Add(59 * time.Second)}, []sortie.HistoryRow{
				row(m0, sortie.HistoryCompleted, 2), row(m0, sortie.HistoryCancelled, 1), row(m0, sortie.HistoryRetried, 1)}},
			{"since a later minute", sortie.JobHistoryParams{Since: m0.Add(time.Minute)}, []sortie.HistoryRow{row(m1, sortie.HistoryDead, 1)}},
			{"another queue", sortie.JobHistoryParams{Queue: "other", Since: m0}, nil},
		} {
			t.Run(tt.name, func(t *testing.T) {
				got, err := c.JobHistory(ctx, &tt.p)
				if err != nil {
					t.Fatalf("JobHistory(%+v) error: %v", tt.p, err)
				}
				if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("JobHistory(%+v) mismatch (-want +got):\n%s", tt.p, diff)
				}
			})
		}
	})
}

// JobHistory refuses a period it cannot answer, naming the field.
func TestJobHistoryInvalid(t *testing.T) {
	t.Parallel()
	c := newClient(t, memstore.New(), &sortie.Config{})
	for _, tt := range []struct {
		p    *sortie.JobHistoryParams
		want string
	}{
		{nil, "JobHistoryParams.Since is required"},
		{&sortie.JobHistoryParams{Since: historyT0, Step: 90 * time.Second}, "JobHistoryParams.Step must be a whole number of minutes, got 1m30s"},
		{&sortie.JobHistoryParams{Since: historyT0, Until: historyT0.Add(-time.Hour)}, "JobHistoryParams.Since (2025-06-01T12:00:30Z) must be before Until (2025-06-01T11:00:30Z)"},
	} {
		_, err := c.JobHistory(context.Background(), tt.p)
		if !errors.Is(err, sortie.ErrInvalidArgument) || !strings.HasSuffix(err.Error(), tt.want) {
			t.Errorf("JobHistory(%+v) error = %v, want ErrInvalidArgument saying %q", tt.p, err, tt.want)
		}
	}
}

// The maintenance loop prunes the history past Config.HistoryRetention,
// and keeps the rest.
func TestHistoryRetention(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		c, fc := historyClient(t, st, &sortie.Config{HistoryRetention: time.Hour, RescueInterval: time.Minute})
		mustEnqueue(t, c, Msg{Text: "ok"}, nil)
		drainAll(t, c, 1)
		fc.Advance(50 * time.Minute)
		mustEnqueue(t, c, Msg{Text: "ok"}, nil)
		drainAll(t, c, 1)
		fc.Advance(20 * time.Minute)

		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() {
			stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = c.Stop(stopCtx)
		}()
		start := fc.Now()
		waitArmed(t, fc, start.Add(time.Minute))
		fc.Advance(time.Minute)
		waitArmed(t, fc, start.Add(2*time.Minute))
		got, err := c.JobHistory(ctx, &sortie.JobHistoryParams{Since: historyT0.Add(-time.Hour)})
		want := []sortie.HistoryRow{{Queue: sortie.QueueDefault, At: historyT0.Add(50 * time.Minute).Truncate(time.Minute),
			Outcome: sortie.HistoryCompleted, Count: 1}}
		if err != nil || !cmp.Equal(want, got) {
			t.Fatalf("JobHistory after the prune = %+v, %v; want only the minute within the retention, %+v", got, err, want)
		}
	})
}

// QueueLatency is the age of each queue's oldest due job, on the client's
// clock; queues without due jobs are left out.
func TestQueueLatency(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		c, fc := historyClient(t, st, &sortie.Config{})
		mustEnqueue(t, c, Msg{Text: "ok"}, nil)
		mustEnqueue(t, c, Msg{Text: "ok"}, &sortie.EnqueueOpts{Queue: "later", RunAt: historyT0.Add(time.Hour)})
		fc.Advance(90 * time.Second)
		mustEnqueue(t, c, Msg{Text: "ok"}, &sortie.EnqueueOpts{Priority: 1})
		got, err := c.QueueLatency(ctx, "")
		want := []sortie.QueueLatency{{Queue: sortie.QueueDefault, OldestRunAt: historyT0, Latency: 90 * time.Second}}
		if err != nil || !cmp.Equal(want, got) {
			t.Fatalf("QueueLatency() = %+v, %v; want %+v", got, err, want)
		}
		fc.Advance(time.Hour)
		got, err = c.QueueLatency(ctx, "later")
		want = []sortie.QueueLatency{{Queue: "later", OldestRunAt: historyT0.Add(time.Hour), Latency: 90 * time.Second}}
		if err != nil || !cmp.Equal(want, got) {
			t.Fatalf("QueueLatency(later) = %+v, %v; want %+v", got, err, want)
		}
		drainAll(t, c, 2)
		if got, err := c.QueueLatency(ctx, sortie.QueueDefault); err != nil || len(got) != 0 {
			t.Fatalf("QueueLatency(default) after draining = %+v, %v; want none", got, err)
		}
	})
}

// QueueOverview reads the queues, their counts and their latencies
// together, as the dashboard, the API and `sortie queues` list them.
func TestQueueOverview(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		c, fc := historyClient(t, st, &sortie.Config{})
		mustEnqueue(t, c, Msg{Text: "ok"}, nil)
		mustEnqueue(t, c, Msg{Text: "ok"}, nil)
		mustEnqueue(t, c, Msg{Text: "ok"}, &sortie.EnqueueOpts{Queue: "later", RunAt: historyT0.Add(time.Hour)})
		fc.Advance(30 * time.Second)
		ov, err := c.QueueOverview(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, q := range ov.Queues {
			names = append(names, q.Name)
		}
		if want := []string{sortie.QueueDefault, "later"}; !cmp.Equal(want, names) {
			t.Errorf("QueueOverview().Queues = %v, want %v", names, want)
		}
		wantCounts := []sortie.QueueStateCount{
			{Queue: sortie.QueueDefault, State: sortie.JobStateAvailable, Count: 2},
			{Queue: "later", State: sortie.JobStateScheduled, Count: 1},
		}
		if !cmp.Equal(wantCounts, ov.Counts) {
			t.Errorf("QueueOverview().Counts = %+v, want %+v", ov.Counts, wantCounts)
		}
		if want := map[string]time.Duration{sortie.QueueDefault: 30 * time.Second}; !cmp.Equal(want, ov.Latency) {
			t.Errorf("QueueOverview().Latency = %v, want %v (a queue with no due job left out)", ov.Latency, want)
		}
	})
}
