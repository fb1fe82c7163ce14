package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/intake"
)

// A plain batch (no unique key, no dependency, not a workflow) is
// enqueued by sortie_add, which writes each job with the fewest commands
// and nothing to look up; sortie_enqueue takes every other batch, and
// the plain batches of a queue with a max depth. On one server the plain
// batches of concurrent callers share one call (internal/combine): the
// server's cost of a call (reading it, running the library, reserving
// IDs, the queue's wake-up) is then paid once for them all.
const (
	// combineMaxJobs is the largest batch that is combined with others; a
	// larger one already amortizes its call.
	combineMaxJobs = 16
	// combineMaxCall caps the jobs of one combined call.
	combineMaxCall = 256
)

// plainBatch reports whether a batch may take sortie_add.
func plainBatch(p *store.JobEnqueueManyParams) bool {
	if p.Workflow {
		return false
	}
	for _, j := range p.Jobs {
		if j.UniqueKey != "" || j.HasDeps() {
			return false
		}
	}
	return true
}

// addReq is one caller's plain batch: its sortie_add arguments and, once
// sent, its results.
type addReq struct {
	jobs   []*store.NewJob
	states []store.JobState
	args   []any // now, n, then ADD_FIELDS values a job
	res    []store.EnqueueResult
	// slow: the batch has a job of a queue with a max depth, and must
	// take sortie_enqueue.
	slow bool
	err  error
}

// newAddReq encodes a validated plain batch as sortie_add's arguments.
func (s *Store) newAddReq(jobs []*store.NewJob, now time.Time) (*addReq, error) {
	r := &addReq{jobs: jobs, states: make([]store.JobState, len(jobs)), args: make([]any, 0, 2+10*len(jobs))}
	nowArg := micros(now)
	r.args = append(r.args, nowArg, strconv.Itoa(len(jobs)))
	var lastQueue, lastGroup string
	for i, j := range jobs {
		state, runAt := intake.StartState(j.RunAt, now)
		x, err := encodeExtra(j)
		if err != nil {
			if len(jobs) > 1 {
				return nil, fmt.Errorf("job %d of %d (kind %q): %w", i+1, len(jobs), j.Kind, err)
			}
			return nil, err
		}
		if j.Queue != lastQueue || i == 0 {
			lastQueue, lastGroup = j.Queue, group(s.k.groupOf(j.Queue))
		}
		ra := nowArg
		if !runAt.Equal(now) {
			ra = micros(runAt)
		}
		r.states[i] = state
		r.args = append(r.args, j.Queue, lastGroup, j.Kind, strconv.Itoa(j.Priority), strconv.Itoa(j.MaxAttempts),
			ra, string(state), j.PartitionKey, string(j.Args), x)
	}
	return r, nil
}

// enqueuePlain enqueues a plain batch by sortie_add, combined with other
// callers' on one server. slow reports that it did not, and that the
// batch must take sortie_enqueue.
func (s *Store) enqueuePlain(ctx context.Context, p *store.JobEnqueueManyParams) (res []store.EnqueueResult, slow bool, err error) {
	r, err := s.newAddReq(p.Jobs, p.Now)
	if err != nil {
		return nil, false, err
	}
	if s.cluster {
		if _, err := s.batchGroup(ctx, p.Jobs); err != nil {
			return nil, false, err
		}
	}
	if s.cluster || len(p.Jobs) > combineMaxJobs {
		s.sendAdds(ctx, []*addReq{r})
	} else if !s.combine.Do(ctx, r, len(r.jobs), s.sendAdds) {
		// The call may still enqueue this caller's jobs: like any
		// cancelled call, the outcome is unknown.
		return nil, false, fmt.Errorf("%w (the jobs may still be enqueued by the call in flight)", ctx.Err())
	}
	return r.res, r.slow, r.err
}

// sendAdds sends reqs in one call of sortie_add and gives each its
// results or error. On a cluster it first lists the queues and reserves
// the call's IDs, which the library cannot do on the jobs' slot.
func (s *Store) sendAdds(ctx context.Context, reqs []*addReq) {
	n, jobs := 3, 0
	for _, r := range reqs {
		n += len(r.args)
		jobs += len(r.jobs)
	}
	args := make([]any, 0, n)
	args = append(args, s.arg0, strconv.Itoa(len(reqs)), "")
	for _, r := range reqs {
		args = append(args, r.args...)
	}
	fail := func(err error) {
		for _, r := range reqs {
			r.err = err
		}
	}
	if s.cluster {
		var all []*store.NewJob
		for _, r := range reqs {
			all = append(all, r.jobs...)
		}
		base, err := s.clusterReserve(ctx, all)
		if err != nil {
			fail(err)
			return
		}
		args[2] = base
	}
	v, err := s.fcall(ctx, "sortie_add", s.k.queue(reqs[0].jobs[0].Queue)+"h", args...)
	if err != nil {
		fail(err)
		return
	}
	firsts, err := stringList(v)
	if err != nil || len(firsts) != len(reqs) {
		fail(fmt.Errorf("redisstore: add: unexpected reply %v", v))
		return
	}
	for i, r := range reqs {
		if firsts[i] == "slow" {
			r.slow = true
			continue
		}
		first, given, err := parseAdded(firsts[i], len(r.jobs))
		if err != nil {
			r.err = err
			continue
		}
		r.res = make([]store.EnqueueResult, len(r.jobs))
		for k := range r.res {
			id := first + int64(k)
			r.res[k] = store.EnqueueResult{ID: id, State: r.states[k]}
			s.remember(id, s.k.groupOf(r.jobs[k].Queue))
		}
		for _, k := range given {
			r.res[k].State = store.JobStateRunning
		}
	}
}

// parseAdded reads sortie_add's answer for a batch of n jobs: the first
// job's ID, then the places of the jobs given to a waiter, running, each
// after a ':'.
func parseAdded(v string, n int) (first int64, given []int, err error) {
	parts := strings.Split(v, ":")
	first, err = strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("redisstore: add: bad job ID %q", v)
	}
	for _, p := range parts[1:] {
		k, err := strconv.Atoi(p)
		if err != nil || k < 0 || k >= n {
			return 0, nil, fmt.Errorf("redisstore: add: bad answer %q for %d jobs", v, n)
		}
		given = append(given, k)
	}
	return first, given, nil
}
