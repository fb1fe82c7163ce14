package storetest

import (
	"testing"

	"github.com/sortiehq/sortie/store"
)

// Harness says how the suite makes stores.
type Harness struct {
	// New returns a fresh, empty store for one test. It registers its own
	// cleanup (t.Cleanup) to close the store. The suite calls it from many
	// parallel subtests at once.
	New func(t testing.TB) store.Store

	// Reopen closes st and opens the same database again, returning the new
	// store; it registers the new store's cleanup. The cleanup New registered
	// for st still runs, so closing twice must be harmless. Reopen is nil for
	// stores that keep nothing across a restart (memstore); the durability
	// cases then skip, saying why.
	Reopen func(t testing.TB, st store.Store) store.Store

	// Share returns a second, independent handle on the same database as st,
	// the way another process would open it: sqlitestore opens the same file
	// again, pgstore the same URL and schema. Both handles stay open and are
	// used at once, from many goroutines; Share registers the new handle's
	// cleanup, and the suite calls it from many parallel subtests at once. A
	// store that lives in one process by design (memstore) returns st
	// itself, which is a correct second handle: all its state is shared.
	// When Share is nil the shared cases, which check that exclusive claims,
	// fencing, queue state, cancel requests, unique keys and JobWait hold
	// across handles (DESIGN.md §3), skip, saying why.
	Share func(t testing.TB, st store.Store) store.Store

	// NoSteps says the store returns store.ErrUnsupported from every
	// durable-step method (StepList, StepRecord, StepSleep, StepSpawn,
	// StepAwait) and from JobList with a ParentID; the Steps group checks
	// exactly that and skips the rest.
	NoSteps bool
}

// group is a named set of cases, run as one parallel subtest.
type group struct {
	name  string
	cases []testCase
}

// testCase is one subtest of the suite.
type testCase struct {
	name string
	// durable cases need Harness.Reopen.
	durable bool
	// shared cases need Harness.Share.
	shared bool
	run    func(t *testing.T, e *env)
}

// env is what a case works on: the harness and the current store, which a
// durability case replaces by reopening, and the other handles a shared
// case opened on the same database.
type env struct {
	h      *Harness
	st     store.Store
	others []store.Store
}

// reopen closes the store and opens the same database again.
func (e *env) reopen(t *testing.T) {
	t.Helper()
	e.st = e.h.Reopen(t, e.st)
	if e.st == nil {
		t.Fatal("Harness.Reopen returned a nil store")
	}
}

// share opens a second handle on the store's database.
func (e *env) share(t *testing.T) store.Store {
	t.Helper()
	st := e.h.Share(t, e.st)
	if st == nil {
		t.Fatal("Harness.Share returned a nil store")
	}
	e.others = append(e.others, st)
	return st
}

// groups is the whole suite, in the order the groups are reported.
func groups() []group {
	return []group{
		{"Enqueue", enqueueCases},
		{"Durability", durabilityCases},
		{"Fetch", fetchCases},
		{"Claim", claimCases},
		{"Lease", leaseCases},
		{"Fencing", fencingCases},
		{"Outcome", outcomeCases},
		{"Unique", uniqueCases},
		{"Cancel", cancelCases},
		{"Retry", retryCases},
		{"Delete", deleteCases},
		{"Bulk", bulkCases},
		{"List", listCases},
		{"Counts", countsCases},
		{"NextRunAt", nextRunAtCases},
		{"Prune", pruneCases},
		{"History", historyCases},
		{"Latency", latencyCases},
		{"Watch", watchCases},
		{"FetchWait", fetchWaitCases},
		{"Queue", queueCases},
		{"Limits", limitsCases},
		{"Depth", depthCases},
		{"Deps", depsCases},
		{"Results", resultsCases},
		{"Periodic", periodicCases},
		{"Process", processCases},
		{"Import", importCases},
		{"Steps", stepsCases},
		{"Shared", sharedCases},
		{"Soak", soakCases},
	}
}

// Run runs the whole conformance suite against the stores h makes. Each
// case is a parallel subtest with its own store; after each case that
// passed, the suite checks the store's invariants (see checkInvariants),
// through every handle the case opened.
func Run(t *testing.T, h *Harness) {
	t.Helper()
	if h == nil || h.New == nil {
		t.Fatal("storetest.Run: Harness.New is nil")
	}
	for _, g := range groups() {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					if c.durable && h.Reopen == nil {
						t.Skip("Harness.Reopen is nil: this store keeps nothing across a restart, so there is no durability to test")
					}
					if c.shared && h.Share == nil {
						t.Skip("Harness.Share is nil: this case needs a second handle on the same database, so sharing across handles is not tested")
					}
					e := &env{h: h, st: h.New(t)}
					if e.st == nil {
						t.Fatal("Harness.New returned a nil store")
					}
					// A deferred call also runs after t.Fatal (runtime.Goexit),
					// while the store is still open.
					defer func() {
						if !t.Failed() && !t.Skipped() {
							checkInvariants(t, e.st)
							for _, st := range e.others {
								checkInvariants(t, st)
							}
						}
					}()
					c.run(t, e)
				})
			}
		})
	}
}
