package jobhistory

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sortiehq/sortie/store"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func TestHistoryTally(t *testing.T) {
	t.Parallel()
	var a, b Tally
	a.Add("q", t0.Add(10*time.Second), store.HistoryRetried, 1)
	a.Add("q", t0.Add(50*time.Second), store.HistoryCompleted, 2)
	a.Add("a", t0.Add(time.Minute), store.HistoryCompleted, 1)
	b.Add("q", t0, store.HistoryCompleted, 3)
	b.Add("a", t0, store.HistoryDead, 1)
	a.Merge(&b)
	want := []store.HistoryRow{
		{Queue: "a", At: t0, Outcome: store.HistoryDead, Count: 1},
		{Queue: "q", At: t0, Outcome: store.HistoryCompleted, Count: 5},
		{Queue: "q", At: t0, Outcome: store.HistoryRetried, Count: 1},
		{Queue: "a", At: t0.Add(time.Minute), Outcome: store.HistoryCompleted, Count: 1},
	}
	if diff := cmp.Diff(want, a.Rows()); diff != "" {
		t.Errorf("Rows() mismatch (-want +got):\n%s", diff)
	}
	if a.Reset(); a.Len() != 0 {
		t.Errorf("Len() after Reset = %d, want 0", a.Len())
	}
}
