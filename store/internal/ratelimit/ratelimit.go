// Package ratelimit holds the sliding rate window of a queue's rate limits
// (QueueSettings.RateLimit and PartitionRateLimit): which recorded starts
// count against a fetch at its Now, how much room they leave, and when a
// full window frees up. Every Go backend calls it, so a rate limit means
// the same on each; only the backends import this package.
package ratelimit

import (
	"time"

	"github.com/sortiehq/sortie/store"
)

// Window is a sliding rate limit: at most Limit starts in any window of
// Period. Processes read their clocks before they reach the store, so a
// fetch may run with an older Now than a start already recorded: such a
// start counts too, and only starts a whole period older than the window
// may be forgotten, so a fetch with an older clock still sees every start
// it must.
type Window struct {
	Limit  int
	Period time.Duration
}

// Queue returns the queue-wide rate window of s.
func Queue(s store.QueueSettings) Window {
	return Window{Limit: s.RateLimit, Period: s.RatePeriod}
}

// Partition returns the per-partition rate window of s.
func Partition(s store.QueueSettings) Window {
	return Window{Limit: s.PartitionRateLimit, Period: s.PartitionRatePeriod}
}

// On reports whether the window limits anything.
func (w Window) On() bool { return w.Limit > 0 }

// From returns the start of the window ending at now: the starts after it
// count against the limit.
func (w Window) From(now time.Time) time.Time { return now.Add(-w.Period) }

// ForgetBefore returns the time at or before which recorded starts may be
// deleted by a fetch at now: two periods and store.MaxStartAhead before
// it, so that a fetch whose Now lags behind (a worker that reserved a
// shorter lead, a clock a little behind) still counts every start its
// window holds, and a start given back (store.Report.Unstarted) is still
// there to forget.
func (w Window) ForgetBefore(now time.Time) time.Time {
	return now.Add(-2*w.Period - store.MaxStartAhead)
}

// Room returns how many more starts the window allows when started starts
// are in it (never negative).
func (w Window) Room(started int64) int64 { return max(int64(w.Limit)-started, 0) }

// Start is n starts recorded at At.
type Start struct {
	At time.Time
	N  int64
}

// FreeAt returns when the window next allows a start, given the starts in
// the window, oldest first, if it allows none now; the zero time when it
// has room. The window allows a start once all but Limit-1 of its starts
// left it: a period after the start that brings the count below the limit.
func (w Window) FreeAt(starts []Start) time.Time {
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
