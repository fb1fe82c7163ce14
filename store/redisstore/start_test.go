package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store/redisstore"
)

// privateServer starts a server of the test's own, for checks that change
// its configuration.
func privateServer(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.StartServer(t, &redistest.ServerOptions{})
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return srv, c
}

// Each way a server can be unfit for jobs is one clear error at Open.
func TestOpenRefusesUnfitServers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("eviction", func(t *testing.T) {
		t.Parallel()
		srv, c := privateServer(t)
		if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
			t.Fatal(err)
		}
		_, err := redisstore.Open(ctx, srv.URL, nil)
		if err == nil || !strings.Contains(err.Error(), "maxmemory-policy is allkeys-lru") || !strings.Contains(err.Error(), "noeviction") ||
			!strings.Contains(err.Error(), "lost job") {
			t.Fatalf("Open on a server that evicts = %v, want an error naming the policy, noeviction and why", err)
		}
	})

	t.Run("auth", func(t *testing.T) {
		t.Parallel()
		srv, c := privateServer(t)
		if err := c.ConfigSet(ctx, "requirepass", "right").Err(); err != nil {
			t.Fatal(err)
		}
		bad := strings.Replace(srv.URL, "redis://", "redis://:wrong@", 1)
		_, err := redisstore.Open(ctx, bad, nil)
		if err == nil || !strings.Contains(err.Error(), "redisstore: connect") || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("Open with a wrong password = %v, want a connect error saying WRONGPASS", err)
		}
		good := strings.Replace(srv.URL, "redis://", "redis://:right@", 1)
		st, err := redisstore.Open(ctx, good, nil)
		if err != nil {
			t.Fatalf("Open with the right password: %v", err)
		}
		st.Close()
	})

	t.Run("newer library", func(t *testing.T) {
		t.Parallel()
		srv, c := privateServer(t)
		newer := "#!lua name=sortie\nredis.register_function{function_name='sortie_version', callback=function() return 99 end, flags={'no-writes'}}\n"
		if err := c.FunctionLoadReplace(ctx, newer).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := redisstore.Open(ctx, srv.URL, nil)
		if !errors.Is(err, redisstore.ErrLibraryNewer) || !strings.Contains(err.Error(), "version 99") {
			t.Fatalf("Open on a server with library version 99 = %v, want ErrLibraryNewer naming the version", err)
		}
	})

	t.Run("older library replaced", func(t *testing.T) {
		t.Parallel()
		srv, c := privateServer(t)
		older := "#!lua name=sortie\nredis.register_function{function_name='sortie_version', callback=function() return 0 end, flags={'no-writes'}}\n"
		if err := c.FunctionLoadReplace(ctx, older).Err(); err != nil {
			t.Fatal(err)
		}
		st, err := redisstore.Open(ctx, srv.URL, nil)
		if err != nil {
			t.Fatalf("Open on a server with library version 0: %v, want the library replaced", err)
		}
		st.Close()
		if v, err := c.FCallRO(ctx, "sortie_version", nil).Int(); err != nil || v != redisstore.LibraryVersion {
			t.Fatalf("library version after Open = %d, %v; want %d", v, err, redisstore.LibraryVersion)
		}
	})

	t.Run("bad URLs", func(t *testing.T) {
		t.Parallel()
		for _, u := range []string{"http://127.0.0.1:6379", "redis://127.0.0.1:6379/0?bogus=1", "redis://127.0.0.1:1/0", "redis://[::1"} {
			if _, err := redisstore.Open(ctx, u, nil); err == nil || !strings.HasPrefix(err.Error(), "redisstore: ") {
				t.Errorf("Open(%q) = %v, want a redisstore error", u, err)
			}
		}
		if _, err := redisstore.Open(ctx, redistest.URL(t)+"?prefix=a{b}", nil); err == nil || !strings.Contains(err.Error(), "prefix") {
			t.Errorf("Open with a prefix holding braces = %v, want an error naming the prefix", err)
		}
	})
}
