package maintain

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/held"
	"github.com/sortiehq/sortie/store"
)

// leaseStore answers LeaseExtend with the statuses in lost and cancel, and
// records every call.
type leaseStore struct {
	mu     sync.Mutex
	lost   map[int64]bool
	cancel map[int64]bool
	calls  []*store.LeaseExtendParams
}

func (s *leaseStore) LeaseExtend(_ context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, p)
	out := make([]store.LeaseStatus, len(p.Leases))
	for i, l := range p.Leases {
		out[i] = store.LeaseStatus{Held: !s.lost[l.ID], CancelRequested: s.cancel[l.ID]}
	}
	return out, nil
}

// run is a held job's run: inTx, suspended and a progress value due.
type run struct {
	inTx, suspended bool
	progress        float64
	due             bool
}

func (r *run) InTx() bool { return r.inTx }

func (r *run) Suspended() bool { return r.suspended }

func (r *run) TakeDueProgress() (float64, bool) {
	p, due := r.progress, r.due
	r.due = false
	return p, due
}

var (
	errLost      = errors.New("lease lost")
	errCancelled = errors.New("cancel requested")
)

func TestHeartbeatActsOnEachStatus(t *testing.T) {
	t.Parallel()
	const n = 2*leaseBatch + 5
	const lostID, cancelID, txID, progressID, sleptID = 1, 2, 3, 4, 5
	st := &leaseStore{lost: map[int64]bool{lostID: true, sleptID: true}, cancel: map[int64]bool{cancelID: true}}
	var set held.Set
	causes := make(map[int64]error)
	var mu sync.Mutex
	for id := int64(1); id <= n; id++ {
		r := &run{inTx: id == txID, suspended: id == sleptID, progress: 0.5, due: id == progressID}
		set.Add(&held.Job{ID: id, Token: 7, Run: r, Cancel: func(cause error) {
			mu.Lock()
			causes[id] = cause
			mu.Unlock()
		}})
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &Heartbeat{
		Store: st, Clock: clock.NewFake(now), Health: &health.Health{Logger: logger, What: "store"}, Logger: logger,
		Held: &set, Interval: time.Second, Lease: time.Minute, LeaseLost: errLost, CancelRequested: errCancelled,
	}
	h.beat(t.Context())

	if got, want := len(st.calls), 3; got != want {
		t.Fatalf("LeaseExtend called %d times for %d leases, want %d", got, n-1, want)
	}
	extended, progress := 0, map[store.LeaseRef]float64{}
	for _, c := range st.calls {
		extended += len(c.Leases)
		if !c.Now.Equal(now) || c.Lease != time.Minute {
			t.Fatalf("LeaseExtend(Now %v, Lease %v), want Now %v, Lease %v", c.Now, c.Lease, now, time.Minute)
		}
		for _, l := range c.Leases {
			if l.ID == txID || l.ID == sleptID {
				t.Fatalf("the lease of job %d, completed in a transaction or suspended by a sleep, was extended", l.ID)
			}
		}
		for ref, p := range c.Progress {
			progress[ref] = p
		}
	}
	if want := map[store.LeaseRef]float64{{ID: progressID, ClaimToken: 7}: 0.5}; !maps.Equal(progress, want) {
		t.Fatalf("heartbeat recorded progress %v, want %v", progress, want)
	}
	if extended != n-2 {
		t.Fatalf("extended %d leases, want %d", extended, n-2)
	}
	want := map[int64]error{lostID: errLost, cancelID: errCancelled}
	if len(causes) != len(want) {
		t.Fatalf("cancelled %d handlers (%v), want %d", len(causes), causes, len(want))
	}
	for id, cause := range want {
		if causes[id] != cause {
			t.Fatalf("job %d cancelled with %v, want %v", id, causes[id], cause)
		}
	}
	if got, wantLen := set.Len(), n-1; got != wantLen {
		t.Fatalf("held set has %d jobs after the lease of one was lost, want %d", got, wantLen)
	}
}
