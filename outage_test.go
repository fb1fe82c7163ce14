package sortie_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// syncBuffer is a bytes.Buffer safe for concurrent writers, which a test
// can wait on for a line.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// written is closed and replaced at every write, when not nil.
	written chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written != nil {
		close(s.written)
		s.written = nil
	}
	return s.b.Write(p)
}

// waitLog waits until logs holds what, failing the test after 10 seconds.
func waitLog(t *testing.T, logs *syncBuffer, what string) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		logs.mu.Lock()
		found := strings.Contains(logs.b.String(), what)
		if logs.written == nil {
			logs.written = make(chan struct{})
		}
		written := logs.written
		logs.mu.Unlock()
		if found {
			return
		}
		select {
		case <-written:
		case <-timeout.C:
			t.Fatalf("no %q log line after 10s:\n%s", what, logs.String())
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// awaitBackoff waits until fc's earliest timer is due within 5 seconds and
// returns its deadline: a store call's backoff, in tests whose clients have
// no other timer due so soon.
func awaitBackoff(t *testing.T, fc *clock.Fake) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := fc.AwaitDeadline(ctx, func(d time.Time) bool { return d.Sub(fc.Now()) <= 5*time.Second })
	if err != nil {
		next, ok := fc.NextDeadline()
		t.Fatalf("no timer due within 5s of %s on the client's clock (next: %s, %v): %v", fc.Now(), next, ok, err)
	}
	return d
}

// faultyClient makes a client with 4 no-op Msg workers on a memstore behind
// a storefault wrapper and a fake clock, logging into the returned buffer.
// Its poll, heartbeat and rescue timers are an hour or more away, so only a
// backoff arms a timer due sooner. The test starts it.
func faultyClient(t *testing.T) (*storefault.Store, *clock.Fake, *syncBuffer, *sortie.Client) {
	t.Helper()
	inner := memstore.New()
	t.Cleanup(func() { _ = inner.Close() })
	st := storefault.New(inner)
	fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	logs := &syncBuffer{}
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), nil)
	c := newClient(t, st, &sortie.Config{
		Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 4}},
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Clock: fc,
		PollInterval: time.Hour, Lease: 24 * time.Hour, RescueInterval: 24 * time.Hour,
	})
	return st, fc, logs, c
}

// start starts c, stopping it when the test ends.
func start(t *testing.T, c *sortie.Client) {
	t.Helper()
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop() = %v", err)
		}
	})
}

// A client whose store fails backs off on its own clock, retries without
// losing a job, and logs the outage once when it starts and once when the
// store has kept working for a second of that clock.
func TestClientSurvivesUnreachableStore(t *testing.T) {
	t.Parallel()
	st, fc, logs, c := faultyClient(t)
	ev := record(t, c)

	// While fetches fail, jobs wait; once the store heals, every job runs.
	st.Fail("JobFetch", nil)
	var ids []int64
	for i := 0; i < 20; i++ {
		ids = append(ids, mustEnqueue(t, c, Msg{}, nil))
	}
	start(t, c)
	for n := 1; n <= 5; n++ {
		retry := awaitBackoff(t, fc)
		// The producer waits on the fake clock: it fetched exactly n times.
		if got := st.Calls("JobFetch"); got != n {
			t.Fatalf("JobFetch called %d times before backoff %d ended, want %d", got, n, n)
		}
		if n == 5 {
			st.Heal()
		}
		fc.Set(retry)
	}
	for _, id := range ids {
		ev.finished(t, id, 1)
	}
	if out := logs.String(); strings.Contains(out, "store reachable again") {
		t.Fatalf("recovery logged before the store kept working for a second:\n%s", out)
	}
	// The fetch and the completion of this job are successes a second
	// after the first; the one that ends the outage logs it.
	fc.Advance(time.Second)
	ev.finished(t, mustEnqueue(t, c, Msg{}, nil), 1)
	waitLog(t, logs, "store reachable again")
	out := logs.String()
	if n := strings.Count(out, "store unreachable, backing off"); n != 1 {
		t.Fatalf("logged the outage %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "store reachable again"); n != 1 {
		t.Fatalf("logged the recovery %d times, want once:\n%s", n, out)
	}

	// Failed completions are retried, never dropped.
	st.Fail("JobFinish", nil)
	id := mustEnqueue(t, c, Msg{}, nil)
	before := st.Failed()
	for {
		// While the completer waits out its backoff, no call is under way.
		retry := awaitBackoff(t, fc)
		if st.Failed() >= before+3 {
			if row := mustGet(t, c, id); row.State != sortie.JobStateRunning {
				t.Fatalf("state %s while completions fail, want running (outcome held back)", row.State)
			}
			st.Heal()
			fc.Set(retry)
			break
		}
		fc.Set(retry)
	}
	ev.finished(t, id, 1)
	if row := mustGet(t, c, id); row.State != sortie.JobStateCompleted {
		t.Fatalf("state %s after the store healed, want completed", row.State)
	}
}

// A store that fails every other call for a while is one outage: one line
// when it starts, one when the store has kept working for a second, not a
// pair of lines per flip.
func TestFlappingStoreLogsOneOutage(t *testing.T) {
	t.Parallel()
	st, fc, logs, c := faultyClient(t)
	ev := record(t, c)
	// Until the last step no job is enqueued, so the producer fetches only
	// when its poll (an hour) or its backoff (a few seconds at most) is due.
	poll := func() time.Time {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := fc.AwaitDeadline(ctx, func(d time.Time) bool { return d.Equal(fc.Now().Add(time.Hour)) })
		if err != nil {
			t.Fatalf("the producer did not wait for its poll: %v", err)
		}
		return d
	}
	st.Fail("JobFetch", nil)
	start(t, c)
	for n := 1; n <= 10; n++ {
		retry := awaitBackoff(t, fc)
		if got := st.Failed(); got != int64(n) {
			t.Fatalf("flip %d: %d fetches failed in all, want %d", n, got, n)
		}
		st.Heal()
		fc.Set(retry) // a fetch gets through
		next := poll()
		if n < 10 {
			st.Fail("JobFetch", nil)
			fc.Set(next) // and the next one fails
		}
	}
	// The poll and the job an hour on are successes long after the first;
	// the one that ends the outage logs it.
	fc.Advance(time.Hour)
	ev.finished(t, mustEnqueue(t, c, Msg{}, nil), 1)
	waitLog(t, logs, "store reachable again")
	out := logs.String()
	if n := strings.Count(out, "store unreachable, backing off"); n != 1 {
		t.Errorf("a store failing ten times in a row of flips logged %d outages, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "store reachable again"); n != 1 {
		t.Errorf("logged %d recoveries, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "failed_calls=10") {
		t.Errorf("the recovery does not say that 10 calls failed:\n%s", out)
	}
}

// Damage a client's own work meets in the store is not an outage: it is
// logged once, as an error saying to restore from a backup, and kept for
// StoreCorruption, whatever the store's calls do afterwards.
func TestStoreCorruptionFoundLater(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	t.Cleanup(func() { _ = inner.Close() })
	st := storefault.New(inner)
	t.Cleanup(st.Heal)
	damage := fmt.Errorf("sqlitestore: rescue: /data/sortie.db is corrupt: database disk image is malformed; restore it from a backup: %w", store.ErrCorrupt)
	st.Fail("JobRescue", damage)
	logs := &syncBuffer{}
	c := startClient(t, st, &sortie.Config{RescueInterval: time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The loop records a failure before it calls again.
	if err := st.WaitCalls(ctx, "JobRescue", 5); err != nil {
		t.Fatal(err)
	}
	if err := c.StoreCorruption(); err != damage {
		t.Fatalf("StoreCorruption() = %v, want the rescue's error", err)
	}
	out := logs.String()
	if n := strings.Count(out, "store is corrupt: retrying will not help; restore it from a backup"); n != 1 || !strings.Contains(out, "level=ERROR") || strings.Contains(out, "unreachable") {
		t.Errorf("log after 5 failed rescues on a damaged store, want one error line saying it is corrupt and no outage:\n%s", out)
	}
}
