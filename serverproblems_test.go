package sortie_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// checkedStore is a memstore whose server settings a test sets.
type checkedStore struct {
	*memstore.Store
	mu       sync.Mutex
	problems []store.ServerProblem
	checks   chan struct{}
}

func (s *checkedStore) ServerCheck(context.Context, *store.ServerCheckParams) ([]store.ServerProblem, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		select {
		case s.checks <- struct{}{}:
		default:
		}
	}()
	return append([]store.ServerProblem(nil), s.problems...), nil
}

func (s *checkedStore) set(p ...store.ServerProblem) {
	s.mu.Lock()
	s.problems = p
	s.mu.Unlock()
}

// A started client checks its store's server when it starts and on every
// maintenance round: a problem that appears is logged once as an error
// and shown by ServerProblems, and its clearing is logged once.
func TestServerProblemsLoggedOncePerChange(t *testing.T) {
	t.Parallel()
	st := &checkedStore{Store: memstore.New(), checks: make(chan struct{}, 1)}
	evict := store.ServerProblem{Code: store.ProblemEviction, Message: "maxmemory-policy is allkeys-lru"}
	st.set(evict)
	fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	logs := &syncBuffer{}
	c := startClient(t, st, &sortie.Config{Clock: fc, RescueInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	round := func() {
		t.Helper()
		select {
		case <-st.checks:
		case <-time.After(10 * time.Second):
			t.Fatal("no server check")
		}
	}
	round()
	waitLog(t, logs, "store server puts jobs at risk")
	if got := c.ServerProblems(); len(got) != 1 || got[0].Code != store.ProblemEviction {
		t.Fatalf("ServerProblems() = %v, want the eviction problem", got)
	}
	// The maintenance round's timer, armed again after each round.
	next := func() {
		t.Helper()
		want := fc.Now().Add(time.Second)
		if _, err := fc.AwaitDeadline(context.Background(), func(d time.Time) bool { return d.Equal(want) }); err != nil {
			t.Fatal(err)
		}
		fc.Advance(time.Second)
		round()
	}
	for range 3 {
		next()
	}
	st.set()
	next()
	waitLog(t, logs, "store server problem cleared")
	if n := strings.Count(logs.String(), "store server puts jobs at risk"); n != 1 {
		t.Errorf("the problem was logged %d times over four checks, want once:\n%s", n, logs.String())
	}
	if got := c.ServerProblems(); len(got) != 0 {
		t.Errorf("ServerProblems() after the fix = %v, want none", got)
	}
}
