package redistest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sortiehq/sortie/store"
)

// A Ledger records what a store's callers were told while a test takes
// the server away (a power cut, eviction, a restart): every job ID an
// enqueue acknowledged, every claim token a fetch handed out and the jobs
// it was handed out for, the completions acknowledged, and the claims
// whose outcome was held back. Afterwards it counts what the faults cost:
// acknowledged jobs lost, completions rolled back (the job will run
// again), IDs and tokens handed out twice, and whether each held claim's
// late outcome was applied or refused as the job's state says. It is
// safe for concurrent use.
type Ledger struct {
	queue string

	mu        sync.Mutex
	ids       map[int64]int     // ID -> acknowledgements
	tokens    map[int64][]int64 // token -> the jobs it was handed out for
	completed map[int64]bool    // completions acknowledged
	held      []store.LeaseRef
	gone      map[int64]bool // IDs counted lost already
	undone    map[int64]bool // completions counted rolled back already
}

// NewLedger returns an empty ledger of the jobs of queue.
func NewLedger(queue string) *Ledger {
	return &Ledger{queue: queue, ids: make(map[int64]int), tokens: make(map[int64][]int64),
		completed: make(map[int64]bool), gone: make(map[int64]bool), undone: make(map[int64]bool)}
}

// ledgerNow is the time of every call the load makes.
var ledgerNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Load runs until ctx ends: 4 producers enqueue jobs into the ledger's
// queue (two one at a time, two in batches of 10) while 2 workers claim
// them 10 at a time, complete every other claim and hold the rest (their
// outcomes are sent by StaleOutcomes). A call that fails (the server is
// down, full, or lost the reply) acknowledges nothing and is not counted.
func (l *Ledger) Load(ctx context.Context, st store.Store) {
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() { l.produce(ctx, st, 1+9*(p%2)) })
	}
	for w := range 2 {
		wg.Go(func() { l.work(ctx, st, w) })
	}
	wg.Wait()
}

func (l *Ledger) produce(ctx context.Context, st store.Store, n int) {
	for ctx.Err() == nil {
		jobs := make([]*store.NewJob, n)
		for i := range jobs {
			jobs[i] = &store.NewJob{Kind: "k", Queue: l.queue, Args: []byte(`{}`)}
		}
		res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: ledgerNow, Jobs: jobs})
		if err != nil {
			continue // not acknowledged
		}
		l.mu.Lock()
		for _, r := range res {
			l.ids[r.ID]++
		}
		l.mu.Unlock()
	}
}

func (l *Ledger) work(ctx context.Context, st store.Store, w int) {
	for ctx.Err() == nil {
		res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: l.queue, Limit: 10, Now: ledgerNow,
			Lease: time.Hour, Worker: "w"})
		if err != nil || len(res.Jobs) == 0 {
			continue
		}
		var done []*store.Report
		l.mu.Lock()
		for i, j := range res.Jobs {
			l.tokens[j.ClaimToken] = append(l.tokens[j.ClaimToken], j.ID)
			if (i+w)%2 == 0 {
				done = append(done, &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted})
			} else {
				l.held = append(l.held, store.LeaseRef{ID: j.ID, ClaimToken: j.ClaimToken})
			}
		}
		l.mu.Unlock()
		out, err := st.JobFinish(ctx, &store.JobFinishParams{Now: ledgerNow, Reports: done})
		if err != nil {
			continue
		}
		l.mu.Lock()
		for i, r := range out {
			if r.Applied {
				l.completed[done[i].ID] = true
			}
		}
		l.mu.Unlock()
	}
}

// Deleted records jobs the test deleted itself, which Check then does
// not count as lost.
func (l *Ledger) Deleted(ids ...int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		l.gone[id] = true
	}
}

// Acknowledged returns how many job IDs enqueues acknowledged.
func (l *Ledger) Acknowledged() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids)
}

// Check reads the ledger's queue in st and returns how many acknowledged
// jobs are missing (lost) and how many acknowledged completions are no
// longer completed (rolled back: the job will run again), counting each
// job once over repeated checks.
func (l *Ledger) Check(ctx context.Context, st store.Store) (lost, rolledBack int, err error) {
	state := make(map[int64]store.JobState)
	for after := int64(0); ; {
		rows, err := st.JobList(ctx, &store.JobListParams{Queue: l.queue, AfterID: after, Limit: 1000})
		if err != nil {
			return 0, 0, fmt.Errorf("list the ledger's jobs: %w", err)
		}
		for _, r := range rows {
			state[r.ID] = r.State
		}
		if len(rows) < 1000 {
			break
		}
		after = rows[len(rows)-1].ID
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.ids {
		st, ok := state[id]
		switch {
		case !ok && !l.gone[id]:
			l.gone[id] = true
			lost++
		case ok && l.completed[id] && st != store.JobStateCompleted && !l.undone[id]:
			l.undone[id] = true
			rolledBack++
		}
	}
	return lost, rolledBack, nil
}

// Repeats returns how many job IDs were acknowledged more than once and
// how many claim tokens were handed out more than once.
func (l *Ledger) Repeats() (ids, tokens int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.ids {
		if n > 1 {
			ids++
		}
	}
	for _, jobs := range l.tokens {
		if len(jobs) > 1 {
			tokens++
		}
	}
	return ids, tokens
}

// StaleOutcomes reports every held claim's completion and checks each
// against the job as it was just before: it must be applied when the job
// was running under that token and refused otherwise (stale: its job was
// rolled back, lost, or claimed again). It returns how many were stale,
// how many were refused, and how many went against the job's state.
func (l *Ledger) StaleOutcomes(ctx context.Context, st store.Store) (stale, refused, wrong int, err error) {
	l.mu.Lock()
	held := append([]store.LeaseRef(nil), l.held...)
	l.mu.Unlock()
	for _, c := range held {
		j, err := st.JobGet(ctx, &store.JobGetParams{ID: c.ID})
		live := err == nil && j.State == store.JobStateRunning && j.ClaimToken == c.ClaimToken
		if !live {
			stale++
		}
		res, err := st.JobFinish(ctx, &store.JobFinishParams{Now: ledgerNow,
			Reports: []*store.Report{{ID: c.ID, ClaimToken: c.ClaimToken, Kind: store.ReportCompleted}}})
		if err != nil {
			return 0, 0, 0, fmt.Errorf("report held claim of job %d: %w", c.ID, err)
		}
		if !res[0].Applied {
			refused++
		}
		if res[0].Applied != live {
			wrong++
		}
	}
	return stale, refused, wrong, nil
}
