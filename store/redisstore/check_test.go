package redisstore_test

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// ownServer starts a server of the test's own, whose settings it may
// change, and returns it with a client that may change them.
func ownServer(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.StartServer(t, nil)
	return srv, rawClient(t, srv.URL)
}

// A running store re-reads the server's eviction policy and persistence:
// switched at run time they show as problems, and again as none once set
// back. A user without CONFIG (as on managed Redis) gets them from INFO.
func TestServerCheckSeesSettingsChangedAtRunTime(t *testing.T) {
	t.Parallel()
	srv, admin := ownServer(t)
	ctx := context.Background()
	// A user who may not run CONFIG, as managed Redis services have.
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	limited, _ := url.Parse(srv.URL)
	limited.User = url.UserPassword("app", "secret")
	for _, c := range []struct {
		name string
		url  string
	}{{"CONFIG", srv.URL}, {"INFO", limited.String()}} {
		st, err := redisstore.Open(ctx, c.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		check := func(want ...string) {
			t.Helper()
			got, err := st.ServerCheck(ctx, &store.ServerCheckParams{})
			if err != nil {
				t.Fatalf("%s: ServerCheck: %v", c.name, err)
			}
			var codes []string
			for _, p := range got {
				codes = append(codes, p.Code)
			}
			if len(codes) != len(want) || (len(want) > 0 && codes[0] != want[0]) {
				t.Errorf("%s: ServerCheck() = %v, want %v", c.name, codes, want)
			}
		}
		set := func(kv ...string) {
			t.Helper()
			if err := admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		check()
		set("maxmemory-policy", "allkeys-lru")
		check(store.ProblemEviction)
		set("maxmemory-policy", "noeviction")
		set("appendonly", "no")
		set("save", "3600 1")
		check(store.ProblemNoAppendOnly)
		set("save", "")
		if c.name == "CONFIG" {
			check(store.ProblemNoPersistence)
		} else {
			// INFO does not say whether snapshots are scheduled: the
			// problem says so, and what a crash may lose.
			check(store.ProblemNoAppendOnly)
			got, err := st.ServerCheck(ctx, &store.ServerCheckParams{})
			if err != nil || len(got) != 1 || !strings.Contains(got[0].Message, "snapshot schedule cannot be read") ||
				!strings.Contains(got[0].Message, "every job if it takes none") {
				t.Errorf("%s: ServerCheck() = %v, %v; want the snapshot schedule unknown and every job at risk", c.name, got, err)
			}
		}
		set("appendonly", "yes")
		set("save", "")
		check()
		st.Close()
	}
}

// Memory running out shows before the server refuses jobs: at 90% of
// maxmemory, and as full at 100%, saying how to make room; it stays
// reported down to 85% (a server hovering at 90% is not reported and
// cleared every round), and clears below that or without a limit.
func TestServerCheckSeesMemoryRunningOut(t *testing.T) {
	t.Parallel()
	srv, admin := ownServer(t)
	ctx := context.Background()
	st, err := redisstore.Open(ctx, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// limit sets maxmemory to the memory in use divided by share.
	limit := func(share float64) {
		t.Helper()
		used := redistest.InfoInt(t, admin, "memory", "used_memory")
		bytes := int64(0)
		if share > 0 {
			bytes = int64(float64(used) / share)
		}
		if err := admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(bytes, 10)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(want string) {
		t.Helper()
		got, err := st.ServerCheck(ctx, &store.ServerCheckParams{})
		if err != nil {
			t.Fatal(err)
		}
		var msg string
		for _, p := range got {
			if p.Code == store.ProblemMemory {
				msg = p.Message
			}
		}
		switch {
		case want == "" && msg != "":
			t.Errorf("ServerCheck reports %q, want no memory problem", msg)
		case want != "" && (!strings.Contains(msg, want) || !strings.Contains(msg, "sortie delete --all --state completed")):
			t.Errorf("ServerCheck reports memory problem %q, want one saying %q and how to make room", msg, want)
		}
	}
	check("")
	limit(0.80)
	check("")
	limit(0.95)
	check("of its maxmemory")
	limit(0.87)
	check("of its maxmemory") // still, until below 85%
	limit(0.80)
	check("")
	limit(0.87)
	check("") // not yet: it was not reported
	limit(1.2)
	check("the Redis server is full")
	limit(0)
	check("")
}
