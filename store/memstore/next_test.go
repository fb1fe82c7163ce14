package memstore_test

import (
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// nextAt returns the NextAt of a fetch from queue at now that claims
// nothing (its Kinds match no job).
func nextAt(t testing.TB, st *memstore.Store, queue string, now time.Time) (time.Time, error) {
	t.Helper()
	res, err := st.JobFetch(t.Context(), &store.JobFetchParams{Queue: queue, Kinds: []string{"no-such-kind"}, Limit: 1,
		Now: now, Lease: time.Minute, Worker: "probe"})
	if err != nil {
		return time.Time{}, err
	}
	if len(res.Jobs) != 0 {
		t.Fatalf("JobFetch(%q, kinds no-such-kind) claimed %d jobs, want none", queue, len(res.Jobs))
	}
	return res.NextAt, nil
}
