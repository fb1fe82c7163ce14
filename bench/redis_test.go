package bench_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// withPrefix returns the Redis URL u naming key prefix p.
func withPrefix(t testing.TB, u, p string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := parsed.Query()
	q.Set("prefix", p)
	parsed.RawQuery = q.Encode()
	return parsed.String()
}

// The Redis tests run alone, before the package's parallel tests: the
// workloads load both cores, and the interval tests measure start rates
// that a loaded machine skews.
func TestWorkloadsRedis(t *testing.T) {
	testWorkloads(t, []bench.Target{bench.Redis(redistest.URL(t))})
}

// A run without a prefix in the URL gets a prefix of its own and leaves
// no key of it behind; a run with one keeps its keys.
func TestRedisRunKeys(t *testing.T) {
	u := redistest.URL(t)
	opts, _, err := redisstore.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx := context.Background()
	run := func(u string) string {
		t.Helper()
		st, closeStore, err := bench.Redis(u).Open(ctx)
		if err != nil {
			t.Fatalf("Open(%s) = %v", u, err)
		}
		prefix := st.(*redisstore.Store).Prefix()
		_, err = st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: time.Now(),
			Jobs: []*store.NewJob{{Kind: "k", Queue: "q", Args: []byte(`{}`), Priority: 1, MaxAttempts: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := closeStore(); err != nil {
			t.Fatalf("closing the run's store: %v", err)
		}
		return prefix
	}
	keys := func(prefix string) []string {
		t.Helper()
		ks, err := rdb.Keys(ctx, prefix+":*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	fresh := run(u)
	if ks := keys(fresh); len(ks) != 0 {
		t.Errorf("run on prefix %s left keys %q, want none", fresh, ks)
	}
	kept := "bench-kept-" + fresh
	defer func() {
		if ks := keys(kept); len(ks) > 0 {
			rdb.Del(ctx, ks...)
		}
	}()
	if got := run(withPrefix(t, u, kept)); got != kept {
		t.Errorf("run with ?prefix=%s used prefix %s", kept, got)
	}
	if len(keys(kept)) == 0 {
		t.Errorf("run with ?prefix=%s left no keys, want its jobs kept", kept)
	}
}

// On a cluster, a run without a prefix leaves no key of its own on any
// primary.
func TestRedisRunKeysCluster(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	q := url.Values{}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	ctx := context.Background()
	st, closeStore, err := bench.Redis("redis://" + addrs[0] + "?" + q.Encode()).Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prefix := st.(*redisstore.Store).Prefix()
	// Queues of 16 key groups, so that the run's keys are on every primary.
	for i := range 16 {
		_, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: time.Now(),
			Jobs: []*store.NewJob{{Kind: "k", Queue: fmt.Sprintf("q%d", i), Args: []byte(`{}`), Priority: 1, MaxAttempts: 1}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := closeStore(); err != nil {
		t.Fatalf("closing the run's store: %v", err)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		ks, err := n.Keys(ctx, prefix+":*").Result()
		if len(ks) > 0 {
			t.Errorf("run on prefix %s left keys %q on %s, want none", prefix, ks, n.Options().Addr)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
