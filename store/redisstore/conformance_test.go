package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
	"github.com/sortiehq/sortie/store/storetest"
)

func testURL(t testing.TB) string {
	u := os.Getenv("SORTIE_TEST_REDIS_URL")
	if u == "" {
		t.Skip("SORTIE_TEST_REDIS_URL is not set")
	}
	return u
}

func testPrefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// harness opens each store under a fresh key prefix of the test server.
func harness() *storetest.Harness {
	open := func(t testing.TB, prefix string) store.Store {
		t.Helper()
		st, err := redisstore.Open(context.Background(), testURL(t), &redisstore.Options{Prefix: prefix})
		if err != nil {
			t.Fatalf("Open(prefix %s) error: %v", prefix, err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	return &storetest.Harness{
		New: func(t testing.TB) store.Store { return open(t, testPrefix(t)) },
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

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness())
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, harness())
}
