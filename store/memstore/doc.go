// Package memstore is an in-memory [store.Store]: fast, safe for concurrent
// use, and gone when the process exits. It serves tests, ephemeral work and
// sortietest.
//
// Its limits:
//   - Nothing survives the process: "committed" means held in this process's
//     memory, so a crash or exit loses every job.
//   - One process only: the store is shared by the goroutines that hold the
//     same *Store, never across processes.
//   - Everything lives in memory, finished jobs included until JobPrune
//     removes them.
//
// All operations run under one mutex and cost O(log n) or better per job,
// except JobList with filters, which walks jobs in ID order (skipping blocks
// of 1,024 IDs that hold no job in the wanted state).
package memstore
