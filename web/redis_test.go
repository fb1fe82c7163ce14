package web_test

import (
	"context"
	"testing"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store/redisstore"
)

// redisStore opens a store under a key prefix of its own on the test Redis
// server, SORTIE_TEST_REDIS_URL, skipping t when it is unset; the store is
// closed and its keys deleted when t ends.
func redisStore(t *testing.T) *redisstore.Store {
	t.Helper()
	u := redistest.URL(t)
	prefix := redistest.Prefix(t) // its keys are deleted after the store closes
	ctx := context.Background()
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
	testPages(t, newSiteOn(t, redisStore(t), nil))
}

func TestActionsRedis(t *testing.T) {
	t.Parallel()
	testActions(t, newSiteOn(t, redisStore(t), nil))
}
