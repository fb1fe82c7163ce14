package memstore_test

import (
	"testing"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/store/storetest"
)

var harness = &storetest.Harness{
	New: func(t testing.TB) store.Store {
		st := memstore.New()
		t.Cleanup(func() { _ = st.Close() })
		return st
	},
	// Reopen is nil: nothing survives a memstore.
	// Share returns st: a memstore lives in one process, so every handle on
	// its data is the store itself.
	Share: func(t testing.TB, st store.Store) store.Store { return st },
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness)
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, harness)
}
