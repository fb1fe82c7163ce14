package sqlitestore

import "testing"

func TestPrunePacerSizesChunksToTheTarget(t *testing.T) {
	var p prunePacer
	if got := p.next(); got != firstPruneChunk {
		t.Fatalf("first chunk: %d rows, want %d", got, firstPruneChunk)
	}
	for range 20 {
		if wait := p.took(p.next(), 4*pruneChunkTarget); wait != 4*pruneChunkTarget {
			t.Fatalf("pause after a chunk of %v: %v, want as long", 4*pruneChunkTarget, wait)
		}
	}
	if got := p.next(); got != minPruneChunk {
		t.Fatalf("after slow chunks: %d rows, want the floor %d", got, minPruneChunk)
	}
	for range 20 {
		p.took(p.next(), pruneChunkTarget/10)
	}
	if got := p.next(); got != maxPruneChunk {
		t.Fatalf("after fast chunks: %d rows, want the cap %d", got, maxPruneChunk)
	}
	p.took(p.next(), pruneChunkTarget*3/4)
	if got := p.next(); got != maxPruneChunk {
		t.Fatalf("after a chunk on target: %d rows, want %d", got, maxPruneChunk)
	}
	// A chunk cut short by the caller's limit sizes the next from itself.
	p.took(100, pruneChunkTarget*3/4)
	if got := p.next(); got != 100 {
		t.Fatalf("after a 100-row chunk on target: %d rows, want 100", got)
	}
}
