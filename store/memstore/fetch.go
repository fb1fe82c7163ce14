package memstore

import (
	"container/heap"
	"context"
	"slices"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/fetchplan"
)

// claim is what a fetch writes on each job it claims.
type claim struct {
	now        time.Time
	nowNano    int64
	worker     string
	leaseUntil time.Time
	lsec       int64
	lnsec      int32
}

// claim makes j running under c and records its start where a rate limit
// needs it.
func (s *Store) claim(j *job, c *claim) {
	r := &j.row
	r.Attempt++
	r.AttemptedAt = fetchplan.AttemptedAt(c.now, r)
	r.AttemptedBy = c.worker
	r.WaitsFor = ""
	r.LeaseUntil = c.leaseUntil
	j.lsec, j.lnsec = c.lsec, c.lnsec
	s.lastToken++
	r.ClaimToken = s.lastToken
	s.setState(j, stRunning)
	s.leases.push(j)
	q := j.q
	started := c.nowNano
	if !r.AttemptedAt.Equal(c.now) {
		started = r.AttemptedAt.UnixNano()
	}
	if q.set.RateLimit > 0 {
		q.starts.push(started)
	}
	if p := j.part; p != nil {
		p.running++
		if q.set.PartitionRateLimit > 0 {
			p.starts.push(started)
		}
	}
}

// JobFetch claims up to p.Limit due jobs of p.Queue in (Priority, RunAt, ID)
// order, within the queue's limits. Unclaimed jobs are left as they are: a
// due scheduled job that is not claimed stays scheduled. See store.Store.
func (s *Store) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	if err := store.ValidateLimit("JobFetchParams", p.Limit); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	q := s.queues[p.Queue]
	if q == nil {
		s.mu.Unlock()
		return &store.JobFetchResult{Jobs: []*store.JobRow{}}, nil
	}
	limit := p.Limit
	if q.limited {
		if limit = q.capacity(limit, p.Now); limit <= 0 {
			next := q.nextAt(p.Now)
			s.mu.Unlock()
			return &store.JobFetchResult{Jobs: []*store.JobRow{}, NextAt: next}, nil
		}
	}
	leaseUntil := p.Now.Add(p.Lease)
	c := claim{
		now: p.Now, nowNano: p.Now.UnixNano(), worker: p.Worker,
		leaseUntil: leaseUntil, lsec: leaseUntil.Unix(), lnsec: int32(leaseUntil.Nanosecond()),
	}
	var jbuf [64]*job
	var got []*job
	if len(q.parts) == 0 {
		got = s.fetchLanes(q, p, limit, &c, jbuf[:0])
	} else {
		got = s.fetchParts(q, p, limit, &c, jbuf[:0])
	}
	rows := make([]store.JobRow, len(got))
	for i, j := range got {
		rows[i] = j.row
	}
	var next time.Time
	if len(got) < p.Limit {
		next = q.nextAt(p.Now)
	}
	s.mu.Unlock()
	return &store.JobFetchResult{Jobs: deepen(rows), NextAt: next}, nil
}

// fetchLanes claims up to limit jobs from q's lanes, for a queue whose jobs
// have no partition key: it merges the sublanes of each priority.
func (s *Store) fetchLanes(q *queue, p *store.JobFetchParams, limit int, c *claim, got []*job) []*job {
	// Sublanes of the wanted kinds, still in (priority, kind) order.
	var cbuf [16]*sublane
	cands := cbuf[:0]
	switch {
	case len(p.Kinds) == 0:
		cands = append(cands, q.subs...)
	case len(p.Kinds) <= 8:
		for _, sub := range q.subs {
			if slices.Contains(p.Kinds, sub.kind) {
				cands = append(cands, sub)
			}
		}
	default:
		set := make(map[string]struct{}, len(p.Kinds))
		for _, k := range p.Kinds {
			set[k] = struct{}{}
		}
		for _, sub := range q.subs {
			if _, ok := set[sub.kind]; ok {
				cands = append(cands, sub)
			}
		}
	}
	nowSec, nowNsec := p.Now.Unix(), int32(p.Now.Nanosecond())
	for i := 0; i < len(cands) && len(got) < limit; {
		// cands[i:k] share a priority; merge them by (RunAt, ID).
		k := i + 1
		for k < len(cands) && cands[k].prio == cands[i].prio {
			k++
		}
		group := cands[i:k]
		i = k
		for len(got) < limit {
			var (
				best *entry
				from *lane
			)
			for _, sub := range group {
				if e := sub.avail.top(); e != nil && (best == nil || e.less(best)) {
					best, from = e, &sub.avail
				}
				if e := sub.wait.top(); e != nil && !e.after(nowSec, nowNsec) && (best == nil || e.less(best)) {
					best, from = e, &sub.wait
				}
			}
			if best == nil {
				break
			}
			j := best.j
			from.pop(best)
			popped(j)
			s.claim(j, c)
			got = append(got, j)
		}
	}
	return got
}

// source is one set of lanes a partitioned fetch claims from: the queue's
// own (jobs without a key) or a partition's, with how many more jobs it may
// start in this fetch and its first due job.
type source struct {
	l    *lanes
	room int
	prio int
	e    *entry
	from *lane
}

// sourceHeap orders sources by their first due job.
type sourceHeap []*source

func (h sourceHeap) Len() int { return len(h) }
func (h sourceHeap) Less(i, j int) bool {
	if h[i].prio != h[j].prio {
		return h[i].prio < h[j].prio
	}
	return h[i].e.less(h[j].e)
}
func (h sourceHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *sourceHeap) Push(x any)   { *h = append(*h, x.(*source)) }
func (h *sourceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}

// fetchParts claims up to limit jobs from q when some of its jobs have a
// partition key. Each partition is a source with its own room under the
// partition limits; a partition without room is skipped without reading
// its jobs. The sources' first due jobs sit in a heap, so claiming k jobs
// costs O(P + k log P) lane tops for P partitions with pending jobs.
func (s *Store) fetchParts(q *queue, p *store.JobFetchParams, limit int, c *claim, got []*job) []*job {
	var match func(string) bool
	switch {
	case len(p.Kinds) == 0:
	case len(p.Kinds) <= 8:
		match = func(k string) bool { return slices.Contains(p.Kinds, k) }
	default:
		set := make(map[string]struct{}, len(p.Kinds))
		for _, k := range p.Kinds {
			set[k] = struct{}{}
		}
		match = func(k string) bool { _, ok := set[k]; return ok }
	}
	nowSec, nowNsec := p.Now.Unix(), int32(p.Now.Nanosecond())
	// srcs has room for every source, so the pointers in h stay valid.
	srcs := make([]source, 0, len(q.parts)+1)
	h := make(sourceHeap, 0, len(q.parts)+1)
	add := func(l *lanes, room int) {
		srcs = append(srcs, source{l: l, room: room})
		src := &srcs[len(srcs)-1]
		if src.prio, src.e, src.from = l.best(match, nowSec, nowNsec); src.e != nil {
			h = append(h, src)
		} else {
			srcs = srcs[:len(srcs)-1]
		}
	}
	add(&q.lanes, limit)
	for _, pt := range q.parts {
		if pt.pending == pt.running {
			if pt.running == 0 {
				if q.set.PartitionRateLimit > 0 {
					pt.starts.prune(c.nowNano, q.set.PartitionRatePeriod)
				}
				q.partIdle(pt)
			}
			continue
		}
		if room := q.partCapacity(pt, c.nowNano); room > 0 {
			add(&pt.lanes, room)
		}
	}
	heap.Init(&h)
	for len(got) < limit && len(h) > 0 {
		src := h[0]
		j := src.e.j
		src.from.pop(src.e)
		popped(j)
		s.claim(j, c)
		got = append(got, j)
		if src.room--; src.room > 0 {
			if src.prio, src.e, src.from = src.l.best(match, nowSec, nowNsec); src.e != nil {
				heap.Fix(&h, 0)
				continue
			}
		}
		heap.Pop(&h)
	}
	return got
}
