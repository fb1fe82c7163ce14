package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit"
)

// Follow makes the server of replica replicate the one of primary
// (REPLICAOF) and waits until it is in sync.
func Follow(t testing.TB, replica, primary *redis.Client) {
	t.Helper()
	ctx := context.Background()
	host, port, _ := strings.Cut(primary.Options().Addr, ":")
	if err := replica.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	var info string
	testkit.WaitFor(t, 30*time.Second, "the replica in sync", nil, func() string { return info }, func() (bool, error) {
		var err error
		info, err = replica.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0"), err
	})
}

// Promote makes the server of c a primary (REPLICAOF NO ONE), as a
// failover does.
func Promote(t testing.TB, c *redis.Client) {
	t.Helper()
	if err := c.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
}

// Replicated waits until the one replica of the primary of c has applied
// every write c made (WAIT).
func Replicated(t testing.TB, c *redis.Client) {
	t.Helper()
	n, err := c.Do(context.Background(), "WAIT", 1, 10000).Int()
	if err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d replicas acknowledged, %v", n, err)
	}
}

// FailOver makes the server of replica the primary and the one of
// primary its replica, as a failover and the old primary's return do. It
// fails t unless the old primary resynced in part: a full resync loads
// the data, and sortie's library, again, which a server that returns
// from a short outage does not.
func FailOver(t testing.TB, replica, primary *redis.Client) {
	t.Helper()
	partial := InfoInt(t, replica, "stats", "sync_partial_ok")
	Promote(t, replica)
	Follow(t, primary, replica)
	if InfoInt(t, replica, "stats", "sync_partial_ok") != partial+1 {
		t.Fatal("the old primary resynced in full from the new one, which loads the library again; want a partial resync")
	}
}
