package redistest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit"
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

// persistence returns the server's INFO persistence field name.
func persistence(t *testing.T, c *redis.Client, name string) string {
	t.Helper()
	info, err := c.Info(t.Context(), "persistence").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO persistence has no %s:\n%s", name, info)
	return ""
}

// rewriteDone waits until the server's append-only file rewrite has ended
// and fails t unless it ended well. A rewrite of the few megabytes these
// tests write takes well under a second; one still running after a minute
// hangs.
func rewriteDone(t *testing.T, c *redis.Client) {
	t.Helper()
	testkit.WaitFor(t, time.Minute, "the append-only file rewrite to end (a hung one never does)", nil, nil, func() (bool, error) {
		return persistence(t, c, "aof_rewrite_in_progress") == "0", nil
	})
	if st := persistence(t, c, "aof_last_bgrewrite_status"); st != "ok" {
		t.Fatalf("aof_last_bgrewrite_status = %q, want ok", st)
	}
}

// TestKillDuringRewrite crashes a server while a child it forked rewrites
// its append-only file: the crash takes the child too, as a power cut
// would (a child left running would go on writing the server's files after
// the crash), and the server starts again on its port with every write it
// acknowledged (appendfsync always).
func TestKillDuringRewrite(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, &redistest.ServerOptions{Fsync: redistest.Always, Preload: redistest.PowerCutShim(t)})
	c := client(t, srv.URL)
	var keys []string
	for i := range 100 {
		keys = append(keys, fmt.Sprintf("key%d", i))
	}
	write(t, c, keys)
	// A tenth of a second a key: the rewrite runs for ten seconds, far
	// longer than the crash takes.
	if err := c.ConfigSet(t.Context(), "rdb-key-save-delay", "100000").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.BgRewriteAOF(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if persistence(t, c, "aof_rewrite_in_progress") != "1" {
		t.Fatal("BGREWRITEAOF started no rewrite")
	}
	kids := children(t, serverPID(t, c))
	if len(kids) == 0 {
		t.Fatal("the server has no child process while it rewrites")
	}
	srv.Kill(t)
	for _, pid := range kids {
		if running(pid) {
			t.Errorf("process %d, the server's rewrite, still runs after Kill", pid)
		}
	}
	srv.Up(t)
	c = client(t, srv.URL)
	if n := existing(t, c, keys); n != len(keys) {
		t.Fatalf("%d of %d keys after a crash during a rewrite, want all", n, len(keys))
	}
}

// TestPowerCutShimLetsRewritesFinish rewrites the append-only file of a
// server running with the power-cut shim, again and again, while writes
// keep its background fsync busy: every rewrite ends. (A child forked
// while that fsync held the shim's lock once waited for it for ever.)
func TestPowerCutShimLetsRewritesFinish(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, &redistest.ServerOptions{Fsync: redistest.Everysec, Preload: redistest.PowerCutShim(t)})
	c := client(t, srv.URL)
	stop := make(chan struct{})
	writing := make(chan error, 1)
	go func() {
		value := strings.Repeat("x", 256<<10)
		for i := 0; ; i++ {
			select {
			case <-stop:
				writing <- nil
				return
			default:
			}
			if err := c.Set(t.Context(), fmt.Sprintf("big%d", i%64), value, 0).Err(); err != nil {
				writing <- err
				return
			}
		}
	}()
	for range 10 {
		if err := c.BgRewriteAOF(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		rewriteDone(t, c)
	}
	close(stop)
	if err := <-writing; err != nil {
		t.Fatal(err)
	}
}

// serverPID returns the process ID of the server c talks to.
func serverPID(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(t.Context(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("INFO server: process_id:%s", v)
			}
			return pid
		}
	}
	t.Fatalf("INFO server has no process_id:\n%s", info)
	return 0
}

// procStat returns the state and the parent's PID of process pid, from
// /proc; ok is false when it has no entry there.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	// The state and the parent's PID follow the command name, which is in
	// parentheses and may hold spaces.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	return fields[0], ppid, err == nil
}

// children returns the PIDs of the live child processes of pid. It skips t
// where there is no /proc to read them from.
func children(t *testing.T, pid int) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil || len(dirs) == 0 {
		t.Skip("no /proc: cannot see the server's child processes")
	}
	var kids []int
	for _, dir := range dirs {
		kid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		if state, ppid, ok := procStat(kid); ok && ppid == pid && state != "Z" {
			kids = append(kids, kid)
		}
	}
	return kids
}

// running reports whether process pid is alive (a zombie is not).
func running(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != "Z"
}
