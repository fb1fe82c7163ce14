package web_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"github.com/sortiehq/sortie/internal/redistest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store/redisstore"
	"github.com/sortiehq/sortie/web"
)

// redisStore opens a store under a key prefix of its own on the test Redis
// server, SORTIE_TEST_REDIS_URL, skipping t when it is unset; the store is
// closed and its keys deleted when t ends. (This package's one place to
// switch to internal/redistest.)
func redisStore(t *testing.T) *redisstore.Store {
	t.Helper()
	u := redistest.URL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "webtest-" + hex.EncodeToString(b[:])
	ctx := context.Background()
	opts, _, err := redisstore.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		keys, err := rdb.Keys(ctx, prefix+":*").Result()
		if err == nil && len(keys) > 0 {
			err = rdb.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("delete the keys of prefix %s: %v", prefix, err)
		}
	})
	st, err := redisstore.Open(ctx, u, &redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// The dashboard's pages and actions on Redis, as on the in-memory store.
func TestPagesRedis(t *testing.T) {
	t.Parallel()
	testPages(t, newSiteOn(t, redisStore(t), &web.Options{SampleEvery: 20 * time.Millisecond}))
}

func TestActionsRedis(t *testing.T) {
	t.Parallel()
	testActions(t, newSiteOn(t, redisStore(t), nil))
}
