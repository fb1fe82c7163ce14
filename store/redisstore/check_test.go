package redisstore_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// A running store re-reads the server's eviction policy and persistence:
// switched at run time they show as problems, and again as none once set
// back. A user without CONFIG (as on managed Redis) gets them from INFO.
func TestServerCheckSeesSettingsChangedAtRunTime(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, nil)
	ctx := context.Background()
	opts, _, _ := redisstore.ParseURL(srv.URL)
	admin := redis.NewClient(opts)
	defer admin.Close()
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
