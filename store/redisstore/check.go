package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
)

var _ store.ServerChecker = (*Store)(nil)

// serverSettings are what ServerCheck reads of a server.
type serverSettings struct {
	policy     string // maxmemory-policy
	appendOnly bool
	// snapshots: RDB snapshots are scheduled (save is not empty).
	snapshots bool
	// saveUnknown: CONFIG is disabled, and INFO does not say whether they
	// are (snapshots is then unset).
	saveUnknown bool
}

// ServerCheck reads the server's eviction policy and persistence settings
// (CONFIG GET, or INFO where CONFIG is disabled, as on managed Redis) and
// returns their problems: a policy that may evict keys
// (store.ProblemEviction), no append-only file and no snapshots
// (store.ProblemNoPersistence), or snapshots only
// (store.ProblemNoAppendOnly). On a cluster it reads every primary. See
// store.ServerChecker. It also loads sortie's Functions library again on
// a server that lost it (keepLibrary), so that a server restarted without
// persistence serves this process again within a maintenance round.
func (s *Store) ServerCheck(ctx context.Context, _ *store.ServerCheckParams) ([]store.ServerProblem, error) {
	var (
		mu  sync.Mutex
		all []serverSettings
	)
	read := func(ctx context.Context, c redis.UniversalClient) error {
		if _, err := s.keepLibrary(ctx, c); err != nil {
			return err
		}
		set, err := readSettings(ctx, c)
		if err != nil {
			return err
		}
		mu.Lock()
		all = append(all, set)
		mu.Unlock()
		return nil
	}
	var err error
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return read(ctx, n) })
	} else {
		err = read(ctx, s.rdb)
	}
	if err != nil {
		return nil, s.readError("check the server's settings", err)
	}
	return problems(all), nil
}

// readSettings reads one server's settings.
func readSettings(ctx context.Context, c redis.UniversalClient) (serverSettings, error) {
	cfg, err := c.ConfigGet(ctx, "*").Result()
	switch {
	case err == nil && cfg["maxmemory-policy"] != "":
		return serverSettings{policy: cfg["maxmemory-policy"], appendOnly: cfg["appendonly"] == "yes",
			snapshots: strings.TrimSpace(cfg["save"]) != ""}, nil
	case err != nil && !configRefused(err):
		// Not an answer about the settings (a connection lost, a server
		// still loading): the last ones read stand.
		return serverSettings{}, err
	}
	// CONFIG renamed or disabled (managed Redis): INFO says the policy and
	// whether the append-only file is on, not the snapshot schedule.
	info, err := c.Info(ctx, "memory", "persistence").Result()
	if err != nil {
		return serverSettings{}, err
	}
	return serverSettings{policy: infoField(info, "maxmemory_policy"), appendOnly: infoField(info, "aof_enabled") == "1",
		saveUnknown: true}, nil
}

// configRefused reports whether err is the server refusing CONFIG
// (renamed, disabled or denied to the user, as managed services do), not
// a failure to reach the server or a server not ready to answer.
func configRefused(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	for _, notYet := range []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, notYet) {
			return false
		}
	}
	return true
}

// problems returns the problems of servers' settings, each once.
func problems(all []serverSettings) []store.ServerProblem {
	var out []store.ServerProblem
	seen := make(map[string]bool)
	add := func(code, msg string) {
		if !seen[code] {
			seen[code] = true
			out = append(out, store.ServerProblem{Code: code, Message: msg})
		}
	}
	for _, set := range all {
		if set.policy != "" && set.policy != "noeviction" {
			add(store.ProblemEviction, fmt.Sprintf("the Redis server's maxmemory-policy is %s: when its memory runs short it deletes keys, "+
				"and a deleted key is a lost job (or a job ID handed out again); set maxmemory-policy noeviction", set.policy))
		}
		switch {
		case !set.appendOnly && set.saveUnknown:
			add(store.ProblemNoAppendOnly, "the Redis server has no append-only file (appendonly no), and its snapshot schedule "+
				"cannot be read (CONFIG is not allowed): a crash loses every job written since its last snapshot, "+
				"and every job if it takes none; set appendonly yes")
		case !set.appendOnly && !set.snapshots:
			add(store.ProblemNoPersistence, "the Redis server keeps nothing on disk (appendonly no, no save schedule): "+
				"a restart loses every job; set appendonly yes")
		case !set.appendOnly:
			add(store.ProblemNoAppendOnly, "the Redis server has no append-only file (appendonly no): "+
				"a crash loses every job written since its last snapshot; set appendonly yes")
		}
	}
	return out
}
