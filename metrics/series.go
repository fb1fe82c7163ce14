package metrics

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// pairKey names the series of one (queue, kind).
type pairKey struct{ queue, kind string }

// series holds what the events of one (queue, kind) counted. One mutex
// guards it all, so a scrape reads a histogram's buckets, sum and count as of
// one moment; events of one (queue, kind) are rarely simultaneous, so it is
// seldom contended.
type series struct {
	queue, kind string

	mu       sync.Mutex
	enqueued counter
	started  counter
	finished []outcomeCount // sorted by outcome
	latency  histogram
	duration histogram
}

// counter is a count and when it was created. A counter never counted has
// a zero created time and is not exported, as client_golang's vectors
// export only the children that were used.
type counter struct {
	n       uint64
	created time.Time
}

func (c *counter) inc(now func() time.Time) {
	if c.created.IsZero() {
		c.created = now()
	}
	c.n++
}

// outcomeCount is the finished counter of one outcome.
type outcomeCount struct {
	outcome string
	counter
}

// histogram counts observations per bucket. counts is nil until the first
// observation, which is when the histogram is created.
type histogram struct {
	counts  []uint64 // per bucket, not cumulative; the last is the +Inf bucket
	sum     float64
	created time.Time
}

// observe adds v, in the first bucket whose upper bound is at least v.
func (h *histogram) observe(bounds []float64, v float64, now func() time.Time) {
	if h.counts == nil {
		h.counts = make([]uint64, len(bounds)+1)
		h.created = now()
	}
	h.counts[sort.SearchFloat64s(bounds, v)]++
	h.sum += v
}

// snapshot copies h into dst, reusing dst's slice.
func (h *histogram) snapshot(dst *histogram) {
	dst.counts = append(dst.counts[:0], h.counts...)
	dst.sum, dst.created = h.sum, h.created
}

// finish counts one attempt finished with outcome.
func (s *series) finish(outcome string, now func() time.Time) {
	i, found := slices.BinarySearchFunc(s.finished, outcome, func(oc outcomeCount, o string) int {
		return strings.Compare(oc.outcome, o)
	})
	if !found {
		s.finished = slices.Insert(s.finished, i, outcomeCount{outcome: outcome})
	}
	s.finished[i].inc(now)
}

// seriesSet is the series of every (queue, kind) seen. Series are added,
// never removed, like the children of a client_golang vector.
type seriesSet struct {
	m sync.Map // pairKey → *series
}

// get returns the series of (queue, kind), adding it if needed.
func (ss *seriesSet) get(queue, kind string) *series {
	k := pairKey{queue, kind}
	if s, ok := ss.m.Load(k); ok {
		return s.(*series)
	}
	s, _ := ss.m.LoadOrStore(k, &series{queue: queue, kind: kind})
	return s.(*series)
}

// sorted returns every series, by kind then queue: the order of their
// label values, label names being sorted (kind < queue), as a
// prometheus.Registry sorts the metrics of a family.
func (ss *seriesSet) sorted() []*series {
	var all []*series
	ss.m.Range(func(_, s any) bool {
		all = append(all, s.(*series))
		return true
	})
	slices.SortFunc(all, func(a, b *series) int {
		return cmp.Or(strings.Compare(a.kind, b.kind), strings.Compare(a.queue, b.queue))
	})
	return all
}
