package pgstore_test

import (
	"context"
	"testing"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/storetest"
)

// harness opens each store on a fresh schema of the test server.
func harness() *storetest.Harness {
	open := func(t testing.TB, schema string) store.Store {
		t.Helper()
		st, err := pgstore.Open(context.Background(), pgtest.URL(t), &pgstore.Options{Schema: schema, Migrate: true, MaxConns: 4})
		if err != nil {
			t.Fatalf("Open(schema %s) error: %v", schema, err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	return &storetest.Harness{
		New: func(t testing.TB) store.Store { return open(t, pgtest.Schema(t)) },
		Reopen: func(t testing.TB, st store.Store) store.Store {
			t.Helper()
			s := st.(*pgstore.Store)
			if err := s.Close(); err != nil {
				t.Fatalf("Close() error: %v", err)
			}
			return open(t, s.Schema())
		},
		// Share opens a second pool on the same server and schema, as
		// another process would.
		Share: func(t testing.TB, st store.Store) store.Store {
			t.Helper()
			return open(t, st.(*pgstore.Store).Schema())
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness())
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, harness())
}
