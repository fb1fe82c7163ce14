package store

import (
	"cmp"
	"slices"
	"time"
)

// RateWindow is a sliding rate limit: at most Limit starts in any window of
// Period. Processes read their clocks before they reach the store, so a
// fetch may run with an older Now than a start already recorded: such a
// start counts too, and only starts a whole period older than the window
// may be forgotten, so a fetch with an older clock still sees every start
// it must.
type RateWindow struct {
	Limit  int
	Period time.Duration
}

// QueueRate returns the queue-wide rate window of s.
func (s *QueueSettings) QueueRate() RateWindow {
	return RateWindow{Limit: s.RateLimit, Period: s.RatePeriod}
}

// PartitionRate returns the per-partition rate window of s.
func (s *QueueSettings) PartitionRate() RateWindow {
	return RateWindow{Limit: s.PartitionRateLimit, Period: s.PartitionRatePeriod}
}

// On reports whether the window limits anything.
func (w RateWindow) On() bool { return w.Limit > 0 }

// From returns the start of the window ending at now: the starts after it
// count against the limit.
func (w RateWindow) From(now time.Time) time.Time { return now.Add(-w.Period) }

// ForgetBefore returns the time at or before which recorded starts may be
// deleted at now.
func (w RateWindow) ForgetBefore(now time.Time) time.Time { return now.Add(-2 * w.Period) }

// Room returns how many more starts the window allows when started starts
// are in it (never negative).
func (w RateWindow) Room(started int64) int64 { return max(int64(w.Limit)-started, 0) }

// RateStart is n starts recorded at At.
type RateStart struct {
	At time.Time
	N  int64
}

// FreeAt returns when the window next allows a start, given the starts in
// the window, oldest first, if it allows none now; the zero time when it
// has room. The window allows a start once all but Limit-1 of its starts
// left it: a period after the start that brings the count below the limit.
func (w RateWindow) FreeAt(starts []RateStart) time.Time {
	var started int64
	for _, s := range starts {
		started += s.N
	}
	need := started - int64(w.Limit) + 1
	if need <= 0 {
		return time.Time{}
	}
	for _, s := range starts {
		if need -= s.N; need <= 0 {
			return s.At.Add(w.Period)
		}
	}
	return time.Time{}
}

// QueueRoom returns how many jobs a fetch may take from a queue with
// settings s, at most limit: running of its jobs run, and started starts
// are in its rate window.
func (s *QueueSettings) QueueRoom(limit, running, started int64) int64 {
	if s.MaxRunning > 0 {
		limit = min(limit, int64(s.MaxRunning)-running)
	}
	if s.RateLimit > 0 {
		limit = min(limit, int64(s.RateLimit)-started)
	}
	return max(limit, 0)
}

// PartitionRoom returns how many jobs a fetch may take from one partition
// of a queue with settings s, at most limit: running of its jobs run, and
// started starts are in its rate window.
func (s *QueueSettings) PartitionRoom(limit, running, started int64) int64 {
	if s.PartitionMaxRunning > 0 {
		limit = min(limit, int64(s.PartitionMaxRunning)-running)
	}
	if s.PartitionRateLimit > 0 {
		limit = min(limit, int64(s.PartitionRateLimit)-started)
	}
	return max(limit, 0)
}

// Partitioned reports whether s has per-partition limits.
func (s *QueueSettings) Partitioned() bool {
	return s.PartitionMaxRunning > 0 || s.PartitionRateLimit > 0
}

// Head is an available job at the front of its partition (or of the jobs
// without one), as a partitioned fetch reads it.
type Head struct {
	ID       int64
	Priority int
	RunAt    time.Time
}

// MergeHeads is the partition-head merge of a partitioned fetch: given the
// heads of each partition with room (at most its room each) and the heads
// without a partition, it returns the IDs of the first limit in claim order
// (Priority, RunAt, ID). It sorts heads in place.
func MergeHeads(heads []Head, limit int64) []int64 {
	slices.SortFunc(heads, func(a, b Head) int {
		return compareClaim(a.Priority, b.Priority, a.RunAt, b.RunAt, a.ID, b.ID)
	})
	n := min(int64(len(heads)), limit)
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = heads[i].ID
	}
	return ids
}

// SortClaimOrder sorts jobs in claim order: Priority, then RunAt, then ID.
// A fetch returns its jobs so.
func SortClaimOrder(jobs []*JobRow) {
	slices.SortFunc(jobs, func(a, b *JobRow) int {
		return compareClaim(a.Priority, b.Priority, a.RunAt, b.RunAt, a.ID, b.ID)
	})
}

func compareClaim(pa, pb int, ra, rb time.Time, ia, ib int64) int {
	if c := cmp.Compare(pa, pb); c != 0 {
		return c
	}
	if c := ra.Compare(rb); c != 0 {
		return c
	}
	return cmp.Compare(ia, ib)
}
