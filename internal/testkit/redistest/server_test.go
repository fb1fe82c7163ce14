package redistest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
)

// configIs fails t unless the server's CONFIG GET name is want.
func configIs(t *testing.T, c *redis.Client, name, want string) {
	t.Helper()
	got, err := c.ConfigGet(t.Context(), name).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got[name] != want {
		t.Errorf("CONFIG GET %s = %q, want %q", name, got[name], want)
	}
}

// incrAll increments counter n times, one acknowledged command at a time.
func incrAll(t *testing.T, c redis.Cmdable, counter string, n int) {
	t.Helper()
	for range n {
		if err := c.Incr(t.Context(), counter).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStartServerKillKeepsAcknowledgedWrites crashes a server running with
// appendfsync always right after writes it acknowledged: started again, it
// has them all.
func TestStartServerKillKeepsAcknowledgedWrites(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, &redistest.ServerOptions{Fsync: redistest.Always})
	c := client(t, srv.URL)
	configIs(t, c, "appendfsync", "always")
	configIs(t, c, "appendonly", "yes")
	configIs(t, c, "save", "")
	configIs(t, c, "maxmemory-policy", "noeviction")
	configIs(t, c, "bind", "127.0.0.1")
	configIs(t, c, "protected-mode", "yes")

	incrAll(t, c, "counter", 500)
	srv.Kill(t)
	if err := c.Ping(t.Context()).Err(); err == nil {
		t.Fatal("PING answered after Kill, want an error")
	}
	srv.Up(t)
	// A new client: the old one's connections died with the server.
	c = client(t, srv.URL)
	if got, err := c.Get(t.Context(), "counter").Int(); err != nil || got != 500 {
		t.Fatalf("GET counter after kill and Up = %d, %v; want 500", got, err)
	}
}

// TestServerRestart restarts a server gracefully (Term, which writes the
// append-only file whatever its fsync policy), then takes it down and up:
// it serves its data on the same URL each time.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, nil)
	c := client(t, srv.URL)
	configIs(t, c, "appendfsync", "everysec")
	incrAll(t, c, "counter", 10)

	srv.Restart(t, 100*time.Millisecond, redistest.Term)
	c = client(t, srv.URL)
	incrAll(t, c, "counter", 10)

	srv.Down(t, redistest.Term)
	if err := c.Ping(t.Context()).Err(); err == nil {
		t.Fatal("PING answered after Down, want an error")
	}
	srv.Up(t)
	c = client(t, srv.URL)
	if got, err := c.Get(t.Context(), "counter").Int(); err != nil || got != 20 {
		t.Fatalf("GET counter after Restart, Down and Up = %d, %v; want 20", got, err)
	}
}

// TestStartServerCluster crashes every node of a cluster of the test's own
// and starts them again: the cluster serves all its keys again.
func TestStartServerCluster(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, &redistest.ServerOptions{Cluster: true, Fsync: redistest.Always})
	if len(srv.Addrs) != 3 || srv.URL != "" {
		t.Fatalf("StartServer(Cluster) = URL %q, Addrs %v; want 3 addresses and no URL", srv.URL, srv.Addrs)
	}
	c := clusterClient(t, srv.Addrs)
	var keys []string
	for i := range 100 {
		keys = append(keys, fmt.Sprintf("p:{q:queue%d}:job", i))
	}
	write(t, c, keys)
	srv.Kill(t)
	srv.Up(t)
	c = clusterClient(t, srv.Addrs)
	if n := existing(t, c, keys); n != len(keys) {
		t.Fatalf("%d of %d keys after kill and Up, want all", n, len(keys))
	}
}
