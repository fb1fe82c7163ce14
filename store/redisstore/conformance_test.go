package redisstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
	"github.com/sortiehq/sortie/store/storetest"
)

// harness opens each store under a fresh key prefix of the server at
// url(t); prefix(t) makes the prefix (and deletes its keys at the end).
// With oneGroup, every queue of a store is in one key group, named after
// the prefix.
func harness(url func(testing.TB) string, prefix func(testing.TB) string, oneGroup bool) *storetest.Harness {
	return harnessWith(url, prefix, oneGroup, redisstore.ClaimRowsAuto)
}

// harnessWith is harness with the stores' Options.ClaimRows.
func harnessWith(url func(testing.TB) string, prefix func(testing.TB) string, oneGroup bool, claimRows redisstore.ClaimRows) *storetest.Harness {
	open := func(t testing.TB, p string) store.Store {
		t.Helper()
		o := redisstore.Options{Prefix: p, ClaimRows: claimRows}
		if oneGroup {
			o.Group = func(string) string { return p }
		}
		st, err := redisstore.Open(context.Background(), url(t), &o)
		if err != nil {
			t.Fatalf("Open(prefix %s) error: %v", p, err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	return &storetest.Harness{
		New: func(t testing.TB) store.Store { return open(t, prefix(t)) },
		Reopen: func(t testing.TB, st store.Store) store.Store {
			t.Helper()
			s := st.(*redisstore.Store)
			if err := s.Close(); err != nil {
				t.Fatalf("Close() error: %v", err)
			}
			return open(t, s.Prefix())
		},
		Share: func(t testing.TB, st store.Store) store.Store {
			t.Helper()
			return open(t, st.(*redisstore.Store).Prefix())
		},
	}
}

// clusterURL is the URL of the test cluster: its first node, and the
// others as addr parameters.
func clusterURL(t testing.TB) string {
	addrs := redistest.ClusterAddrs(t)
	u := "redis://" + addrs[0]
	if len(addrs) > 1 {
		u += "?addr=" + strings.Join(addrs[1:], "&addr=")
	}
	return u
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness(redistest.URL, redistest.Prefix, false))
}

// With the claimed jobs in the claim's reply (sortie_fetch_rows, as far
// from the server), the suite passes the same.
func TestConformanceClaimRows(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harnessWith(redistest.URL, redistest.Prefix, false, redisstore.ClaimRowsAlways))
}

// On a 3-primary cluster the suite runs with every queue in one key group:
// the suite's batches, workflows and unique keys span queues, which a
// cluster allows within a group (see TestClusterGroups for what happens
// across groups). Each store's group is its own, so the stores of the
// suite's parallel cases spread over the cluster's slots.
func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness(clusterURL, redistest.ClusterPrefix, true))
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, harness(redistest.URL, redistest.Prefix, false))
}
