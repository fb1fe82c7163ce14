package chaos

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// The Redis helpers of the scenarios, in one place: stores on the shared
// test server (internal/testkit/redistest) and on a server of a test's own
// that can be crashed and restarted (redistest.StartServer).

func openRedis(ctx context.Context, u string, _ *slog.Logger) (store.Store, error) {
	return redisstore.Open(ctx, u, nil)
}

// newRedisStoreAt makes an empty store at u (with its prefix) for t.
func newRedisStoreAt(t *testing.T, u string) *target {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := openRedis(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	closeWith(t, st)
	return &target{url: u, st: st}
}

// newRedisStore makes a store under a key prefix of its own on the test
// server, whose keys are deleted when t ends.
func newRedisStore(t *testing.T) *target {
	return newRedisStoreAt(t, redistest.StoreURL(t))
}

// newPrivateRedis makes a store on a Redis server of the test's own
// (redistest.StartServer, through scripts/testredis.sh), which the outage
// kills with SIGKILL (a crash) and starts again on the same port and
// directory, replaying its append-only file. The file is synced at every
// write, so a crash loses no acknowledged write and a lost job is sortie's
// fault.
func newPrivateRedis(t *testing.T) *target {
	srv := redistest.StartServer(t, &redistest.ServerOptions{Fsync: redistest.Always})
	tg := newRedisStoreAt(t, srv.URL+"?prefix=sortie-chaos")
	tg.outage = &redisOutage{srv: srv}
	return tg
}

// redisOutage crashes a private Redis server.
type redisOutage struct{ srv *redistest.Server }

func (o *redisOutage) begin(t *testing.T) { o.srv.Kill(t) }
func (o *redisOutage) end(t *testing.T)   { o.srv.Up(t) }
func (*redisOutage) kind() faultKind      { return faultServer }

// restart crashes the server, leaves it down for down, and starts it
// again.
func (o *redisOutage) restart(t *testing.T, down time.Duration) {
	o.srv.Restart(t, down, redistest.Kill)
}
