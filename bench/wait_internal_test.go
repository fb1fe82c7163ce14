package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// countingStore counts JobCounts calls.
type countingStore struct {
	store.Store
	counts int
}

func (s *countingStore) JobCounts(ctx context.Context, p *store.JobCountsParams) ([]store.QueueStateCount, error) {
	s.counts++
	return s.Store.JobCounts(ctx, p)
}

// While handlers still run, waitFinished leaves the store alone (so the
// timed run carries no query of the benchmark's own), yet still reports a
// run whose handlers stopped making progress.
func TestWaitFinishedStallWhileRunning(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: memstore.New()}
	r, err := newRun(st, Drain, Options{Jobs: 10, Workers: 1, StallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for seq := range int64(3) { // some handlers ran, then nothing: allRan never closes
		r.rec.Record(seq, 0)
	}
	start := time.Now()
	_, err = r.waitFinished(context.Background())
	var ce *CheckError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "no progress for 200ms: 3 of 10 jobs ran") {
		t.Fatalf("waitFinished = %v, want a CheckError reporting no progress", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("waitFinished took %v to report the stall, want about 200ms", took)
	}
	if st.counts > 2 {
		t.Errorf("waitFinished read the store's counts %d times while handlers ran, want only for the report", st.counts)
	}
}
