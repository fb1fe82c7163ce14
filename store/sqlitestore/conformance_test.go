package sqlitestore_test

import (
	"path/filepath"
	"testing"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
	"github.com/sortiehq/sortie/store/storetest"
)

// harness returns a storetest.Harness opening fresh files with opts.
func harness(opts *sqlitestore.Options) *storetest.Harness {
	open := func(t testing.TB, path string) store.Store {
		t.Helper()
		st, err := sqlitestore.Open(path, opts)
		if err != nil {
			t.Fatalf("Open(%s) error: %v", path, err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	return &storetest.Harness{
		New: func(t testing.TB) store.Store {
			return open(t, filepath.Join(t.TempDir(), "sortie.db"))
		},
		Reopen: func(t testing.TB, st store.Store) store.Store {
			t.Helper()
			s := st.(*sqlitestore.Store)
			if err := s.Close(); err != nil {
				t.Fatalf("Close() error: %v", err)
			}
			return open(t, s.Path())
		},
		// Share opens the file a second time, as another process would.
		Share: func(t testing.TB, st store.Store) store.Store {
			t.Helper()
			return open(t, st.(*sqlitestore.Store).Path())
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		opts *sqlitestore.Options
	}{
		{"Full", nil},
		{"Normal", &sqlitestore.Options{Synchronous: sqlitestore.SynchronousNormal}},
		{"RelaxedClaims", &sqlitestore.Options{RelaxedClaims: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, harness(tt.opts))
		})
	}
}

func BenchmarkStore(b *testing.B) {
	for _, tt := range []struct {
		name string
		opts *sqlitestore.Options
	}{
		{"Full", nil},
		{"Normal", &sqlitestore.Options{Synchronous: sqlitestore.SynchronousNormal}},
		{"RelaxedClaims", &sqlitestore.Options{RelaxedClaims: true}},
	} {
		b.Run(tt.name, func(b *testing.B) { storetest.Bench(b, harness(tt.opts)) })
	}
}
