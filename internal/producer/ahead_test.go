package producer

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/store"
)

// A producer claims ahead as many jobs as its workers finish during one
// claim, at most as many as it has workers, and none before it has
// measured both times or when a queue has a limit.
func TestAheadCoversOneClaim(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		claim, run time.Duration
		capped     bool
		want       int32
	}{
		{"not measured", 0, 0, false, 0},
		{"jobs not measured", 5 * time.Millisecond, 0, false, 0},
		{"no-op jobs over a slow network", 5 * time.Millisecond, 50 * time.Microsecond, false, 100},
		{"jobs a tenth of a claim", 5 * time.Millisecond, 50 * time.Millisecond, false, 10},
		{"jobs as long as a claim", 5 * time.Millisecond, 5 * time.Millisecond, false, 100},
		{"long jobs", time.Millisecond, time.Second, false, 0},
		{"a limited queue", 5 * time.Millisecond, 50 * time.Microsecond, true, 0},
	}
	for _, c := range cases {
		p := New(&Config{MaxWorkers: 100, Queues: []string{"q"}})
		p.rated.queues = map[string]rateLimitsEntry{"q": {capped: c.capped}}
		if c.claim > 0 {
			observe(&p.pace.claim, c.claim)
		}
		if c.run > 0 {
			observe(&p.pace.run, c.run)
		}
		if got := p.ahead(); got != c.want {
			t.Errorf("%s: ahead() = %d, want %d", c.name, got, c.want)
		}
	}
	// A queue whose limits were never read is not claimed ahead either.
	p := New(&Config{MaxWorkers: 100, Queues: []string{"q"}})
	observe(&p.pace.claim, 5*time.Millisecond)
	observe(&p.pace.run, 50*time.Microsecond)
	if got := p.ahead(); got != 0 {
		t.Errorf("unread limits: ahead() = %d, want 0", got)
	}
}

// A job that waited for a worker past half the heartbeat interval gets
// its lease renewed before it starts, and does not start when that lease
// was lost meanwhile; a job that did not wait starts as it is.
func TestFreshRenewsTheLeaseOfAJobThatWaited(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(now)
	var extended []int64
	held := true
	p := New(&Config{
		Clock: clk, Lease: time.Minute, HeartbeatInterval: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Health: &health.Health{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), What: "store"},
		ExtendLeases: func(_ context.Context, refs []store.LeaseRef, at time.Time) ([]store.LeaseStatus, error) {
			out := make([]store.LeaseStatus, len(refs))
			for i, r := range refs {
				extended = append(extended, r.ID)
				out[i] = store.LeaseStatus{Held: held}
			}
			return out, nil
		},
	})
	claim := func(id int64, claimedAgo time.Duration) Claim {
		return Claim{Row: &store.JobRow{ID: id, LeaseUntil: now.Add(-claimedAgo + time.Minute)}, Run: true}
	}
	if _, ok := p.fresh(t.Context(), claim(1, 4*time.Second), clk.Now()); !ok || len(extended) != 0 {
		t.Fatalf("job claimed 4s ago: ok %v, extended %v; want it to start as it is", ok, extended)
	}
	cl, ok := p.fresh(t.Context(), claim(2, 6*time.Second), clk.Now())
	if !ok || len(extended) != 1 || extended[0] != 2 || !cl.Row.LeaseUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("job claimed 6s ago: ok %v, extended %v, lease until %v; want it renewed to now + lease", ok, extended, cl.Row.LeaseUntil)
	}
	held = false
	if _, ok := p.fresh(t.Context(), claim(3, 30*time.Second), clk.Now()); ok {
		t.Fatal("job whose lease was lost while it waited: ok, want it not to start")
	}
}
