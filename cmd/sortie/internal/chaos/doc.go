// Package chaos keeps sortie's fault scenarios runnable, on every store:
//
//   - a kill -9 storm: worker processes killed with SIGKILL every 1–3 s and
//     restarted, with every run accounted for from the processes' journals;
//   - database restarts: the server restarted in immediate mode under load;
//   - SIGSTOP fencing: a worker frozen past its lease, whose late outcome
//     must be refused once it wakes;
//   - a full disk: the store's disk filled, then freed;
//   - Stop during an outage: Client.Stop with a short deadline while the
//     store cannot record anything;
//   - API load: `sortie serve` under many HTTP clients and remote workers,
//     with bad requests mixed in, and counts that must add up;
//   - Redis server faults: a power cut under appendfsync everysec and
//     always, eviction switched on at run time, no append-only file, a
//     full server, lost replies, and a failover to a replica and back to
//     a server that lags, each counting what was lost, what
//     runs again, IDs and tokens handed out twice (never), and stale
//     outcomes refused.
//
// The scenarios are the package's tests. The test binary re-executes itself
// as the worker processes and the `sortie serve` process the scenarios start
// (see child_test.go). The short form runs with the rest of the suite (make
// test); the long form runs with SORTIE_CHAOS=long or -chaos.long (make
// chaos). Every run prints a table of its counts (report_test.go).
//
// A store joins every scenario with one entry in the backends table
// (backends_test.go): how to make an empty one, how another process opens
// it, how `sortie serve` is pointed at it, and which faults it can suffer.
// docs/chaos.md describes each scenario and what it asserts.
package chaos
