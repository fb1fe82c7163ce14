package multiproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"github.com/sortiehq/sortie/internal/redistest"
	"net/url"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store/redisstore"
)

// The Redis helpers of this package's tests, in one place, to switch to
// internal/redistest once it exists.

// redisURL returns the URL of the test Redis server, SORTIE_TEST_REDIS_URL,
// skipping t when it is unset.
func redisURL(t testing.TB) string {
	t.Helper()
	u := redistest.URL(t)
	return u
}

// redisStoreURL returns the test server's URL naming a new key prefix
// (?prefix=), whose keys are deleted when t ends.
func redisStoreURL(t testing.TB) string {
	t.Helper()
	base := redisURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "multiproc-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		opts, _, err := redisstore.ParseURL(base)
		if err != nil {
			t.Error(err)
			return
		}
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		ctx := context.Background()
		keys, err := rdb.Keys(ctx, prefix+":*").Result()
		if err == nil && len(keys) > 0 {
			err = rdb.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("delete the keys of prefix %s: %v", prefix, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("prefix", prefix)
	u.RawQuery = q.Encode()
	return u.String()
}
