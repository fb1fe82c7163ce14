// Package jobhistory holds the rules of the outcome history
// (Store.JobHistory) that do not
// depend on how a store keeps its rows: the tally of one call's outcomes,
// written as one increment per queue, minute and outcome. Every Go backend calls them; only the backends
// import this package.
package jobhistory

import (
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Tally adds up the history counts of one store call, or of the
// calls one transaction commits together, so the store writes one
// increment per queue, minute and outcome touched, however many jobs moved.
// The zero value is empty and ready to use.
type Tally struct {
	rows []store.HistoryRow
}

// Add counts n jobs of queue reaching outcome o at now (counted in
// store.HistoryMinute(now)).
func (t *Tally) Add(queue string, now time.Time, o store.HistoryOutcome, n int64) {
	t.add(store.HistoryRow{Queue: queue, At: store.HistoryMinute(now), Outcome: o, Count: n})
}

func (t *Tally) add(r store.HistoryRow) {
	for i := range t.rows {
		if x := &t.rows[i]; x.Queue == r.Queue && x.Outcome == r.Outcome && x.At.Equal(r.At) {
			x.Count += r.Count
			return
		}
	}
	t.rows = append(t.rows, r)
}

// Merge adds the counts of o.
func (t *Tally) Merge(o *Tally) {
	for _, r := range o.rows {
		t.add(r)
	}
}

// Rows returns the counts, one row per queue, minute and outcome, in
// store.CompareHistoryRows order. The slice is the tally's own until Reset.
func (t *Tally) Rows() []store.HistoryRow {
	slices.SortFunc(t.rows, store.CompareHistoryRows)
	return t.rows
}

// Len returns the number of rows.
func (t *Tally) Len() int { return len(t.rows) }

// Reset empties the tally, keeping its memory.
func (t *Tally) Reset() { t.rows = t.rows[:0] }
