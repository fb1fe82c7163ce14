package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/sortiehq/sortie/internal/combine"
	"github.com/sortiehq/sortie/store"
)

// Combining: concurrent small enqueues share one statement, so many
// producers enqueueing one job each pay for one round trip and one commit
// between them, not one each.
const (
	// combineMaxJobs is the largest batch that is combined with others; a
	// larger one already amortizes its statement.
	combineMaxJobs = 16
	// combineMaxBatch caps the jobs of one combined statement.
	combineMaxBatch = 500
)

// enqueueReq is one caller's batch waiting in the combiner.
type enqueueReq struct {
	b *batch
	// fast is false when the batch must take the careful path (a queue
	// has a MaxDepth); the caller then runs it alone.
	fast bool
	err  error
}

// combineConfig bounds the store's combiner.
var combineConfig = combine.Config{MaxJobs: combineMaxBatch}

// enqueueCombined runs b (plain: no dependencies, no workflow) through the
// combiner. It returns false when the batch must take the careful path.
func (s *Store) enqueueCombined(ctx context.Context, b *batch) (bool, error) {
	r := &enqueueReq{b: b}
	if !s.combine.Do(ctx, r, len(b.p.Jobs), s.flushCombined) {
		// The statement may still commit this caller's jobs: like any
		// cancelled call, the outcome is unknown.
		return false, fmt.Errorf("%w (the jobs may still be committed by the statement in flight)", ctx.Err())
	}
	return r.fast, r.err
}

// flushCombined enqueues the batches of reqs in one statement and hands
// each caller its results.
func (s *Store) flushCombined(ctx context.Context, reqs []*enqueueReq) {
	if len(reqs) == 1 {
		r := reqs[0]
		r.fast, r.err = s.enqueueFast(ctx, r.b)
		return
	}
	all := &batch{p: &store.JobEnqueueManyParams{}}
	for _, r := range reqs {
		b := r.b
		all.p.Jobs = append(all.p.Jobs, b.p.Jobs...)
		all.results = append(all.results, b.results...)
		all.runAt = append(all.runAt, b.runAt...)
		all.now = append(all.now, b.now...)
		all.tags = append(all.tags, b.tags...)
		all.unique = all.unique || b.unique
		for _, q := range b.queues {
			if !slices.Contains(all.queues, q) {
				all.queues = append(all.queues, q)
			}
		}
	}
	fast, err := s.enqueueFast(ctx, all)
	off := 0
	for _, r := range reqs {
		n := len(r.b.p.Jobs)
		r.fast, r.err = fast, err
		if fast && err == nil {
			copy(r.b.results, all.results[off:off+n])
		}
		off += n
	}
}
