package producer

import (
	"sync"
	"testing"

	"github.com/sortiehq/sortie/store"
)

func TestHandoffGivesEveryJobToExactlyOneWorker(t *testing.T) {
	t.Parallel()
	h := newHandoff()
	const workers, jobs = 8, 5000
	var mu sync.Mutex
	seen := make(map[int64]int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cl := h.next(); cl.Row != nil; cl = h.next() {
				mu.Lock()
				seen[cl.Row.ID]++
				mu.Unlock()
			}
		}()
	}
	for start := int64(1); start <= jobs; start += 100 {
		batch := make([]*store.JobRow, 0, 100)
		for id := start; id < start+100; id++ {
			batch = append(batch, &store.JobRow{ID: id})
		}
		h.push(batch, false, true)
	}
	h.push(nil, false, true)
	h.close() // jobs pushed before close are still handed out
	wg.Wait()
	if len(seen) != jobs {
		t.Fatalf("workers took %d distinct jobs, want %d", len(seen), jobs)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("job %d taken %d times, want once", id, n)
		}
	}
	if cl := h.next(); cl.Row != nil {
		t.Fatalf("next() after close and drain = job %d, want nil", cl.Row.ID)
	}
}
