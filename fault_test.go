package sortie_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/storefault"
	"github.com/sortiehq/sortie/store/memstore"
)

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// faultyClient starts a client with 4 no-op Msg workers on a memstore
// behind a storefault wrapper, logging into the returned buffer.
func faultyClient(t *testing.T, poll time.Duration) (*storefault.Store, *syncBuffer, *sortie.Client) {
	t.Helper()
	inner := memstore.New()
	t.Cleanup(func() { _ = inner.Close() })
	st := storefault.New(inner)
	logs := &syncBuffer{}
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), nil)
	c := startClient(t, st, &sortie.Config{
		Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 4}},
		Logger:       slog.New(slog.NewTextHandler(logs, nil)),
		PollInterval: poll,
	})
	return st, logs, c
}

func TestClientSurvivesUnreachableStore(t *testing.T) {
	t.Parallel()
	st, logs, c := faultyClient(t, 10*time.Millisecond)
	ev := record(t, c)

	// While fetches fail, jobs wait; once the store heals, every job runs.
	st.Fail("JobFetch", nil)
	var ids []int64
	for i := 0; i < 20; i++ {
		ids = append(ids, mustEnqueue(t, c, Msg{}, nil))
	}
	for st.Failed() < 5 {
		time.Sleep(5 * time.Millisecond) // let the producer hit the failure a few times
	}
	st.Heal()
	for _, id := range ids {
		ev.finished(t, id, 1)
	}
	// The recovery is logged once the store has kept working for a second.
	waitLog(t, logs, "store reachable again")
	out := logs.String()
	if n := strings.Count(out, "store unreachable, backing off"); n != 1 {
		t.Fatalf("logged the outage %d times, want once:\n%s", n, out)
	}

	// Failed completions are retried, never dropped.
	st.Fail("JobFinish", nil)
	id := mustEnqueue(t, c, Msg{}, nil)
	before := st.Failed()
	for st.Failed() < before+3 {
		time.Sleep(5 * time.Millisecond)
	}
	if row := mustGet(t, c, id); row.State != sortie.JobStateRunning {
		t.Fatalf("state %s while completions fail, want running (outcome held back)", row.State)
	}
	st.Heal()
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
	st, logs, _ := faultyClient(t, 5*time.Millisecond)
	for range 10 {
		st.Fail("JobFetch", nil)
		for before := st.Failed(); st.Failed() == before; {
			time.Sleep(time.Millisecond)
		}
		st.Heal()
		for before := st.Calls("JobFetch"); st.Calls("JobFetch") < before+2; {
			time.Sleep(time.Millisecond) // a fetch got through
		}
	}
	waitLog(t, logs, "store reachable again")
	out := logs.String()
	if n := strings.Count(out, "store unreachable, backing off"); n != 1 {
		t.Errorf("a store failing ten times in a row of flips logged %d outages, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "store reachable again"); n != 1 {
		t.Errorf("logged %d recoveries, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "failed_calls=") {
		t.Errorf("the recovery does not say how many calls failed:\n%s", out)
	}
}
