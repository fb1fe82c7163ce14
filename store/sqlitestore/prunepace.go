package sqlitestore

import (
	"context"
	"sync"
	"time"
)

// Other writes wait behind a prune's transaction, since the store has one
// writer: under a steady load, back-to-back deletes of a thousand rows
// (tens of milliseconds each) put their duration onto every claim and
// enqueue for as long as the prune lasted. So JobPrune deletes in chunks,
// each a transaction of its own sized to take about pruneChunkTarget, and
// pauses as long as a chunk took before the next: a prune holds the writer
// at most about half the time, and a job waits for at most one chunk.
const (
	pruneChunkTarget = 5 * time.Millisecond
	minPruneChunk    = 50
	firstPruneChunk  = 200
	maxPruneChunk    = 5000
)

// prunePacer sizes a prune's chunks from the time the previous ones took.
// It is safe for concurrent use; its zero value starts at firstPruneChunk.
type prunePacer struct {
	mu   sync.Mutex
	size int
}

// next returns how many rows the next chunk may delete.
func (p *prunePacer) next() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.size == 0 {
		p.size = firstPruneChunk
	}
	return p.size
}

// took records that a chunk of size rows took d to delete them all, and
// returns the pause before the next chunk.
func (p *prunePacer) took(size int, d time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case d > pruneChunkTarget:
		p.size = max(size/2, minPruneChunk)
	case d < pruneChunkTarget/2:
		p.size = min(size*2, maxPruneChunk)
	default:
		p.size = size
	}
	return d
}

// pauseFor waits for d, or until ctx is done; it reports whether ctx is
// still live.
func pauseFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
