// Package storetest is the conformance suite every sortie store runs. It
// tests each sentence of the doc comments of store.Store (and the
// guarantees of DESIGN.md §3) against a real store: ordering, exclusive
// claims under concurrency, leases and rescue, fencing by claim token,
// attempts counted at fetch, outcomes, uniqueness, admin operations,
// listing, counts, pruning, wake-ups, durability across a reopen and what
// two handles on one database share; and the queue features: shared queue
// state (pause, settings), global and per-partition concurrency and
// sliding-window rate limits with fairness, MaxDepth policies, dependencies
// and workflows, results, progress, JobWait, cancellation of running jobs
// and periodic schedules.
//
// # Running the suite
//
// A backend calls Run from one test, with a Harness that makes a fresh,
// empty store per case and registers its cleanup:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, &storetest.Harness{
//			New: func(t testing.TB) store.Store {
//				st, err := sqlitestore.Open(filepath.Join(t.TempDir(), "sortie.db"), nil)
//				if err != nil {
//					t.Fatal(err)
//				}
//				t.Cleanup(func() { _ = st.Close() })
//				return st
//			},
//			Reopen: func(t testing.TB, st store.Store) store.Store {
//				path := st.(*sqlitestore.Store).Path()
//				if err := st.(*sqlitestore.Store).Close(); err != nil {
//					t.Fatal(err)
//				}
//				st2, err := sqlitestore.Open(path, nil)
//				if err != nil {
//					t.Fatal(err)
//				}
//				t.Cleanup(func() { _ = st2.Close() })
//				return st2
//			},
//			Share: func(t testing.TB, st store.Store) store.Store {
//				st2, err := sqlitestore.Open(st.(*sqlitestore.Store).Path(), nil)
//				if err != nil {
//					t.Fatal(err)
//				}
//				t.Cleanup(func() { _ = st2.Close() })
//				return st2
//			},
//		})
//	}
//
// Every case runs as a parallel subtest (Run/<Group>/<Case>) with its own
// store, so New is called concurrently. A store that keeps nothing across
// a restart (memstore) leaves Reopen nil, and the durability cases skip
// saying so. The cleanup that New registered still runs after a Reopen, so
// closing a store twice must be harmless.
//
// The shared cases (Run/Shared/<Case>) open a second handle on the case's
// database with Share, as a second process would, and use both at once:
// fetchers on both handles claim every job exactly once; a stale token from
// one handle is refused after the job was claimed again through the other;
// a pause, MaxRunning or a rate limit set through one handle holds for
// fetches through both; a cancel requested through one handle is reported
// by LeaseExtend through the other; a unique key held through one handle
// makes the other's enqueue a duplicate; JobWait through one handle returns
// when the job finishes through the other. A store that lives in one
// process (memstore) shares by returning the same store; a nil Share skips
// these cases, saying so.
//
// After each case that passed, the suite checks the store's invariants: a
// running job has a lease and a claim token and no other job has a lease; a
// pending job has no FinalizedAt and a finished one has; JobCounts agrees
// with paging through JobList per state, in total and per queue.
//
// # What the suite assumes
//
// Time comes from the params, never the clock: every time the suite uses
// is 2026-01-02 03:04:05 UTC plus a whole number of microseconds, so a store
// that keeps microsecond precision round-trips times exactly, and times are
// compared with time.Time.Equal. Args and Meta must round-trip byte for
// byte. Tests use t.Context() for their calls. The suite never sleeps to
// wait; it waits for watch signals with a 5 s timeout.
//
// QueueWatch may return store.ErrUnsupported; the watch cases then pass
// without checking signals (workers of such a store poll).
//
// # Benchmarks
//
// Bench measures the hot path (enqueue one, enqueue a batch, fetch and
// complete) in jobs/s, so store authors can compare changes with benchstat:
//
//	func BenchmarkStore(b *testing.B) {
//		storetest.Bench(b, &storetest.Harness{New: newStore})
//	}
package storetest
