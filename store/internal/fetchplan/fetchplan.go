// Package fetchplan holds the rules of JobFetch that do not depend on how a
// store keeps its rows: claim order, the partition-head merge of a
// partitioned fetch, the room a queue's and a partition's limits leave,
// and the AttemptedAt a claim records. Every Go backend calls them, so a
// fetch means the same on each; only the backends import this package.
package fetchplan

import (
	"cmp"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
)

// QueueRoom returns how many jobs a fetch may take from a queue with
// settings s, at most limit: running of its jobs run, and started starts
// are in its rate window.
func QueueRoom(s store.QueueSettings, limit, running, started int64) int64 {
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
func PartitionRoom(s store.QueueSettings, limit, running, started int64) int64 {
	if s.PartitionMaxRunning > 0 {
		limit = min(limit, int64(s.PartitionMaxRunning)-running)
	}
	if s.PartitionRateLimit > 0 {
		limit = min(limit, int64(s.PartitionRateLimit)-started)
	}
	return max(limit, 0)
}

// Partitioned reports whether s has per-partition limits.
func Partitioned(s store.QueueSettings) bool {
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

// Sort sorts jobs in claim order: Priority, then RunAt, then ID.
// A fetch returns its jobs so.
func Sort(jobs []*store.JobRow) {
	slices.SortFunc(jobs, func(a, b *store.JobRow) int {
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

// AttemptedAt returns the AttemptedAt of job j claimed by a fetch at now: now, or
// j's RunAt or CreatedAt when later. A fetch's clock may read before an
// enqueue it then claims (it waited for a lock, or the enqueuer's machine
// runs ahead), and a recorded start is never before the job was due.
func AttemptedAt(now time.Time, j *store.JobRow) time.Time {
	at := now
	for _, t := range []time.Time{j.RunAt, j.CreatedAt} {
		if t.After(at) {
			at = t
		}
	}
	return at
}

// OldestDue returns the RunAt of a queue's oldest due job from the two
// reads every store makes for Store.QueueLatency: available, the earliest
// RunAt among its available jobs, and waiting, the earliest among its
// scheduled and retrying jobs (each zero when there is none). A waiting
// job counts only when it is due (its RunAt not after now): a fetch would
// claim it. Zero when no job is due.
func OldestDue(available, waiting, now time.Time) time.Time {
	if waiting.IsZero() || waiting.After(now) {
		return available
	}
	if available.IsZero() || waiting.Before(available) {
		return waiting
	}
	return available
}
