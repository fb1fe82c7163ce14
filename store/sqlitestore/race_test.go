//go:build race

package sqlitestore_test

// raceEnabled: the race detector slows SQLite (pure Go) about tenfold, so
// the largest tests shrink under it.
const raceEnabled = true
