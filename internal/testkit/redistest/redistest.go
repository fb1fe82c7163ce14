// Package redistest gives tests Redis to use: the throwaway standalone
// server and the Redis Cluster of three primaries that `make test` starts
// (scripts/testredis.sh) and names in SORTIE_TEST_REDIS_URL and
// SORTIE_TEST_REDIS_CLUSTER. Without them, tests skip with a loud message,
// except under CI=true, where a missing server fails the run: CI must never
// pass by skipping the Redis suite.
//
// Tests share a server by each keeping its keys under a prefix of its own
// (Prefix, ClusterPrefix), deleted when the test ends. A test that kills or
// restarts its server starts one of its own with StartServer.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvURL is the environment variable naming the standalone test server, as
// redis://host:port/db.
const EnvURL = "SORTIE_TEST_REDIS_URL"

// EnvCluster is the environment variable naming the test cluster: the
// host:port of its primaries, comma-separated.
const EnvCluster = "SORTIE_TEST_REDIS_CLUSTER"

// envKeep, when set, keeps the keys of every prefix after its test, to
// look at them.
const envKeep = "SORTIE_TEST_KEEP_KEYS"

// URL returns the standalone test server's URL. When EnvURL is unset it
// skips t, or under CI=true fails it.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		missing(t, "Redis", EnvURL, "scripts/testredis.sh start")
	}
	return u
}

// ClusterAddrs returns the test cluster's primaries (host:port). When
// EnvCluster is unset it skips t, or under CI=true fails it.
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	v := os.Getenv(EnvCluster)
	if v == "" {
		missing(t, "Redis Cluster", EnvCluster, "scripts/testredis.sh start --cluster")
	}
	var addrs []string
	for a := range strings.SplitSeq(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		t.Fatalf("redistest: %s=%q names no host:port", EnvCluster, v)
	}
	return addrs
}

// missing skips t, or under CI=true fails it, saying that env is unset and
// how to start what it names.
func missing(t testing.TB, what, env, start string) {
	t.Helper()
	msg := "\n" +
		"################################################################\n" +
		"  " + what + " tests NOT RUN: " + env + " is not set.\n" +
		"  Run them with `make test` (it starts a throwaway server and\n" +
		"  cluster), or eval \"$(" + start + ")\"\n" +
		"  and run go test again.\n" +
		"################################################################"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Prefix returns a fresh key prefix for t on the standalone test server
// ("t" and 12 hex digits) and, when t ends, deletes every key that starts
// with it. Tests that each keep their keys under their own prefix (the Redis
// store's keys are "<prefix>:{q:<queue>}:..." and "<prefix>:{<tag>}:...")
// run in parallel on one server. Call it before opening what writes the
// keys, so that its cleanup runs after that closes.
func Prefix(t testing.TB) string {
	t.Helper()
	opts, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatalf("redistest: %s: %v", EnvURL, err)
	}
	prefix := newPrefix(t)
	t.Cleanup(func() {
		cleanup(t, prefix, func(ctx context.Context) error {
			c := redis.NewClient(opts)
			defer c.Close()
			return deletePrefix(ctx, c, prefix)
		})
	})
	return prefix
}

// StoreURL returns the test server's URL naming a fresh key prefix
// (?prefix=, see Prefix), whose keys are deleted when t ends: a Redis
// store of t's own, for code that opens stores from a URL.
func StoreURL(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(URL(t))
	if err != nil {
		t.Fatalf("redistest: %s: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("prefix", Prefix(t))
	u.RawQuery = q.Encode()
	return u.String()
}

// ClusterStoreURL is StoreURL on the test cluster: its first primary's
// URL, the others as addr parameters, and a fresh key prefix deleted on
// every primary when t ends.
func ClusterStoreURL(t testing.TB) string {
	t.Helper()
	addrs := ClusterAddrs(t)
	q := url.Values{}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	q.Set("prefix", ClusterPrefix(t))
	return "redis://" + addrs[0] + "?" + q.Encode()
}

// ClusterPrefix is Prefix on the test cluster: when t ends, it deletes the
// prefix's keys on every primary.
func ClusterPrefix(t testing.TB) string {
	t.Helper()
	addrs := ClusterAddrs(t)
	prefix := newPrefix(t)
	t.Cleanup(func() {
		cleanup(t, prefix, func(ctx context.Context) error {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			defer c.Close()
			return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				return deletePrefix(ctx, node, prefix)
			})
		})
	})
	return prefix
}

func newPrefix(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b[:])
}

// cleanup runs del, which deletes the keys of prefix, unless envKeep is
// set. t's own context is already cancelled when cleanups run.
func cleanup(t testing.TB, prefix string, del func(ctx context.Context) error) {
	t.Helper()
	if os.Getenv(envKeep) != "" {
		t.Logf("redistest: keeping the keys of prefix %s", prefix)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := del(ctx); err != nil {
		t.Errorf("redistest: delete the keys of prefix %s: %v", prefix, err)
	}
}

// scanCount is the COUNT hint of each SCAN: the keys examined, and so at
// most the keys deleted, per round trip.
const scanCount = 1000

// deletePrefix deletes every key of c's server that starts with prefix:
// SCAN for them a batch at a time, and UNLINK each batch in one pipeline.
// One UNLINK per key, because on a cluster node one UNLINK of keys in
// different slots fails (CROSSSLOT), even when the node holds them all.
func deletePrefix(ctx context.Context, c *redis.Client, prefix string) error {
	match := escapeGlob(prefix) + "*"
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, scanCount).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Unlink(ctx, k)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// escapeGlob returns s as a Redis glob pattern (SCAN MATCH, KEYS) that
// matches s alone: a backslash before each of * ? [ ] and \.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// InfoInt reads the number field of INFO section from the server of c.
func InfoInt(t testing.TB, c *redis.Client, section, field string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %s: %v", section, field, err)
			}
			return n
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}
