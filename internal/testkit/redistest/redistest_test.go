package redistest_test

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
)

// The keys a test writes under prefix: more than one SCAN batch of them
// (redistest deletes a batch per round trip), of several types, in many
// hash tags so that a cluster spreads them over every primary, and the
// prefix itself.
func testKeys(prefix string) []string {
	keys := []string{prefix}
	for i := range 2500 {
		keys = append(keys, fmt.Sprintf("%s:{q:queue%d}:job:%d", prefix, i%50, i))
	}
	return keys
}

// write sets every key of keys, as a string, a hash or a sorted set.
func write(t *testing.T, c redis.Cmdable, keys []string) {
	t.Helper()
	ctx := t.Context()
	for start := 0; start < len(keys); start += 500 {
		batch := keys[start:min(start+500, len(keys))]
		// One command per key: on a cluster they go to different slots.
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range batch {
				switch i % 3 {
				case 0:
					p.Set(ctx, k, "v", 0)
				case 1:
					p.HSet(ctx, k, "state", "available")
				default:
					p.ZAdd(ctx, k, redis.Z{Score: 1, Member: "m"})
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("write %d keys: %v", len(batch), err)
		}
	}
}

// existing returns how many of keys exist.
func existing(t *testing.T, c redis.Cmdable, keys []string) int {
	t.Helper()
	ctx := t.Context()
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Exists(ctx, k)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("EXISTS: %v", err)
	}
	n := 0
	for _, cmd := range cmds {
		n += int(cmd.(*redis.IntCmd).Val())
	}
	return n
}

func client(t *testing.T, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func clusterClient(t *testing.T, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prefixForm = regexp.MustCompile(`^t[0-9a-f]{12}$`)

func TestPrefixCleanupDeletesItsKeysOnly(t *testing.T) {
	t.Parallel()
	c := client(t, redistest.URL(t))
	other := redistest.Prefix(t)
	otherKeys := testKeys(other)
	write(t, c, otherKeys)

	var keys []string
	t.Run("test", func(t *testing.T) {
		prefix := redistest.Prefix(t)
		if !prefixForm.MatchString(prefix) || prefix == other {
			t.Fatalf("Prefix() = %q, want t and 12 hex digits, not %q", prefix, other)
		}
		keys = testKeys(prefix)
		write(t, c, keys)
		if n := existing(t, c, keys); n != len(keys) {
			t.Fatalf("%d of %d keys written", n, len(keys))
		}
	})
	if n := existing(t, c, keys); n != 0 {
		t.Errorf("%d keys of the prefix left after its test, want 0", n)
	}
	if n := existing(t, c, otherKeys); n != len(otherKeys) {
		t.Errorf("%d keys of another prefix left after the test, want all %d", n, len(otherKeys))
	}
}

func TestClusterPrefixCleanupDeletesItsKeysOnEveryPrimary(t *testing.T) {
	t.Parallel()
	c := clusterClient(t, redistest.ClusterAddrs(t))
	other := redistest.ClusterPrefix(t)
	otherKeys := testKeys(other)
	write(t, c, otherKeys)

	var keys []string
	t.Run("test", func(t *testing.T) {
		prefix := redistest.ClusterPrefix(t)
		if !prefixForm.MatchString(prefix) || prefix == other {
			t.Fatalf("ClusterPrefix() = %q, want t and 12 hex digits, not %q", prefix, other)
		}
		keys = testKeys(prefix)
		write(t, c, keys)
		// The cleanup must reach every primary: each holds some keys.
		var mu sync.Mutex
		held := map[string]int{}
		err := c.ForEachMaster(t.Context(), func(ctx context.Context, node *redis.Client) error {
			n := 0
			iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				n++
			}
			mu.Lock()
			defer mu.Unlock()
			held[node.Options().Addr] = n
			return iter.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(held) != len(redistest.ClusterAddrs(t)) {
			t.Fatalf("keys on %d primaries (%v), want %d", len(held), held, len(redistest.ClusterAddrs(t)))
		}
		for addr, n := range held {
			if n == 0 {
				t.Fatalf("primary %s holds none of the keys (%v)", addr, held)
			}
		}
	})
	if n := existing(t, c, keys); n != 0 {
		t.Errorf("%d keys of the prefix left after its test, want 0", n)
	}
	if n := existing(t, c, otherKeys); n != len(otherKeys) {
		t.Errorf("%d keys of another prefix left after the test, want all %d", n, len(otherKeys))
	}
}
