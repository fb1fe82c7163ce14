package memstore

import (
	"context"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/depgraph"
	"github.com/sortiehq/sortie/store/internal/intake"
)

// JobEnqueueMany inserts p.Jobs atomically. Priority and MaxAttempts are
// kept as given (the client fills in defaults); a job with an empty Kind or
// Queue fails the whole call. See store.Store.
func (s *Store) JobEnqueueMany(ctx context.Context, p *store.JobEnqueueManyParams) ([]store.EnqueueResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var jbuf [4]*job
	jobs, deps, err := build(jbuf[:0], p.Jobs, p.Now)
	if err != nil {
		return nil, err
	}
	// Allocate outside the lock what the call needs, so that concurrent
	// enqueues hold it as short a time as they can.
	res := make([]store.EnqueueResult, len(jobs))
	var qbuf [1]string
	qs := queueSet(qbuf[:0])
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	err = s.enqueue(jobs, p.Jobs, res, deps, p.Now, p.Workflow, &qs)
	s.mu.Unlock()
	if err != nil {
		res = nil
	}
	s.notify(qs)
	return res, err
}

// slabJobs is how many jobs of a batch build allocates at once: one
// allocation instead of one per job, at the cost that a slab's memory is
// freed only once all its jobs left the store (drop releases what a job
// points to). 11 jobs of 592 bytes, plus the 8-byte header Go puts on such
// objects, fill the 6,528-byte size class within 0.2%.
const slabJobs = 11

// build makes the jobs of specs, copying the caller's slices, outside the
// lock. deps reports whether any job has dependencies.
func build(jobs []*job, specs []*store.NewJob, now time.Time) (_ []*job, deps bool, _ error) {
	if len(specs) > cap(jobs) {
		jobs = make([]*job, 0, len(specs))
	}
	if err := store.ValidateJobs(specs); err != nil {
		return nil, false, err
	}
	var slab []job
	for i, nj := range specs {
		deps = deps || nj.HasDeps()
		if len(slab) == 0 {
			slab = make([]job, min(len(specs)-i, slabJobs))
		}
		j := &slab[0]
		slab = slab[1:]
		j.leaseIdx, j.st = -1, stAvailable
		r := &j.row
		r.Kind, r.Queue, r.UniqueKey, r.Timeout = nj.Kind, nj.Queue, nj.UniqueKey, nj.Timeout
		r.Priority, r.MaxAttempts = nj.Priority, nj.MaxAttempts
		r.PartitionKey, r.IgnoreDepFailure = nj.PartitionKey, nj.IgnoreDepFailure
		r.CreatedAt = now
		r.State, r.RunAt = intake.StartState(nj.RunAt, now)
		if r.State == store.JobStateScheduled {
			j.st = stScheduled
		}
		cloneIn(r, nj)
		jobs = append(jobs, j)
	}
	return jobs, deps, nil
}

// enqueue inserts jobs, built from specs, under the lock: it checks the
// batch first (dependencies exist, queues have room) and changes nothing
// when that fails. res, one per job, receives the results. Queues to notify
// are added to qs.
func (s *Store) enqueue(jobs []*job, specs []*store.NewJob, res []store.EnqueueResult, deps bool, now time.Time, workflow bool, qs *queueSet) error {
	seen, depth := s.depthLimited(jobs)
	if deps || depth {
		if err := s.check(jobs, specs, deps, depth, now, qs); err != nil {
			return err
		}
	}

	var (
		q     *queue
		sub   *sublane
		first int64
	)
	for i, j := range jobs {
		r := &j.row
		if k := r.UniqueKey; k != "" {
			if h := s.unique[k]; h != nil {
				res[i] = store.EnqueueResult{ID: h.row.ID, Duplicate: true, State: h.row.State}
				continue
			}
		}
		r.ID = s.nextID
		s.nextID++
		if workflow {
			if first == 0 {
				first = r.ID
			}
			r.WorkflowID = first
		}
		if q == nil || q.name != r.Queue {
			if seen != nil && seen.name == r.Queue {
				q = seen
			} else {
				q = s.queue(r.Queue)
			}
			sub = nil
			qs.add(q.name)
		}
		j.q = q
		if deps {
			if nj := specs[i]; nj.HasDeps() {
				s.linkDeps(j, nj, res, now)
			}
		}
		q.counts[j.st]++
		s.jobs.add(j)
		res[i] = store.EnqueueResult{ID: r.ID, State: r.State}
		if j.st == stCancelled {
			s.toFinished(j)
			continue
		}
		if k := r.UniqueKey; k != "" {
			s.unique[k] = j
		}
		if r.PartitionKey != "" {
			s.place(j)
		} else {
			if sub == nil || sub.prio != r.Priority || sub.kind != r.Kind {
				sub = q.sublane(r.Kind, r.Priority)
			}
			j.sub = sub
			sub.pending++
		}
		switch j.st {
		case stAvailable:
			j.sub.avail.push(makeEntry(r.RunAt, j))
			j.lane = &j.sub.avail
		case stScheduled:
			j.sub.wait.push(makeEntry(r.RunAt, j))
			j.lane = &j.sub.wait
		}
	}
	return nil
}

// depthLimited reports whether a job of the batch goes to a queue with a
// MaxDepth. It also returns the last queue it looked up (nil when that
// queue does not exist yet), for enqueue to reuse: a batch for one
// existing queue looks it up once.
func (s *Store) depthLimited(jobs []*job) (seen *queue, depth bool) {
	for i, last := 0, ""; i < len(jobs) && !depth; i++ {
		if name := jobs[i].row.Queue; name != last {
			last = name
			seen = s.queues[name]
			depth = seen != nil && seen.set.MaxDepth > 0
		}
	}
	return seen, depth
}

// check validates a batch that has dependencies or goes to a queue with a
// MaxDepth: every DependsOn ID must exist, and each queue must have room
// for the batch's jobs that are not duplicates, or, with
// OverflowDropOldest, its oldest queued jobs are dropped to make room.
// Nothing changes when it returns an error.
func (s *Store) check(jobs []*job, specs []*store.NewJob, deps, depth bool, now time.Time, qs *queueSet) error {
	if deps {
		for i, nj := range specs {
			for _, d := range nj.DependsOn {
				if s.jobs.get(d) == nil {
					return depgraph.UnknownError(i, len(specs), nj.Kind, d)
				}
			}
		}
	}
	if !depth {
		return nil
	}
	room := make(map[string]int)
	keys := make(map[string]bool)
	for _, j := range jobs {
		if k := j.row.UniqueKey; k != "" {
			if keys[k] || s.unique[k] != nil {
				continue
			}
			keys[k] = true
		}
		room[j.row.Queue]++
	}
	type drop struct {
		q *queue
		n int64
	}
	var drops []drop
	for name, n := range room {
		q := s.queues[name]
		if q == nil || q.set.MaxDepth == 0 {
			continue
		}
		queued := q.queued()
		over := intake.DepthExcess(queued, int64(n), q.set.MaxDepth)
		if over == 0 {
			continue
		}
		if q.set.Overflow == store.OverflowReject {
			return store.QueueFullError(name, q.set.MaxDepth, queued, int64(n))
		}
		drops = append(drops, drop{q, min(over, queued)})
	}
	for _, d := range drops {
		s.dropOldest(d.q, d.n, now, qs)
	}
	return nil
}

// dropOldest cancels the n lowest-ID queued jobs of q (OverflowDropOldest).
// It walks jobs in ID order, skipping blocks of IDs without a queued job.
func (s *Store) dropOldest(q *queue, n int64, now time.Time, qs *queueSet) {
	var victims []*job
	s.jobs.walkQueued(func(j *job) bool {
		if j.q == q && j.st != stRunning {
			victims = append(victims, j)
		}
		return int64(len(victims)) < n
	})
	msg := store.DroppedMessage(q.name, q.set.MaxDepth)
	for _, j := range victims {
		appendError(j, &store.AttemptError{Message: msg}, now)
		s.finalize(j, stCancelled, now)
		q.dropped++
		s.ended(j, now, qs)
	}
}
