package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	// used is the memory the server counts against maxMemory (0: no
	// limit).
	used, maxMemory int64
	// runID changes each time the server starts; uptime is in seconds.
	runID  string
	uptime int64
	// addr names the server (serverAddr).
	addr string
}

// The share of maxmemory in use at which ServerCheck reports
// store.ProblemMemory, and below which it stops (so that a server
// hovering at one share is not reported and cleared every round).
const (
	memoryHighShare    = 0.90
	memoryClearedShare = 0.85
)

// ServerCheck reads the server's eviction policy, persistence settings
// and memory (INFO, and CONFIG GET for the snapshot schedule where the
// server allows it: managed services refuse CONFIG) and returns their
// problems: a policy that may evict keys (store.ProblemEviction), no
// append-only file and no snapshots (store.ProblemNoPersistence), or
// snapshots only (store.ProblemNoAppendOnly), memory at 90% of maxmemory
// or more, until it is below 85% again (store.ProblemMemory). On a
// cluster it reads every primary, and the memory problem names the one
// that uses the largest share. See store.ServerChecker. It also loads
// sortie's Functions library again on a server that lost it
// (keepLibrary), so that a server restarted without persistence serves
// this process again within a maintenance round; a failure to load it is
// logged (noteLibraryError), and the settings are read all the same. A
// new run ID since the last round is logged as a restart (noteStart).
func (s *Store) ServerCheck(ctx context.Context, _ *store.ServerCheckParams) ([]store.ServerProblem, error) {
	var (
		mu  sync.Mutex
		all []serverSettings
	)
	err := eachServer(ctx, s.rdb, func(ctx context.Context, c redis.UniversalClient) error {
		addr := serverAddr(c)
		s.noteLibraryError(addr, s.keepLibrary(ctx, c))
		set, err := readSettings(ctx, c)
		if err != nil {
			return err
		}
		set.addr = addr
		s.noteStart(set)
		mu.Lock()
		all = append(all, set)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, s.readError("check the server's settings", err)
	}
	s.checkMu.Lock()
	defer s.checkMu.Unlock()
	high := make(map[string]bool)
	for _, set := range all {
		high[set.addr] = memoryShare(set) >= memoryHighShare || (s.memoryHigh[set.addr] && memoryShare(set) >= memoryClearedShare)
	}
	s.memoryHigh = high
	return problems(all, high, len(all) > 1), nil
}

// noteLibraryError logs err, a failure to load the library on the server
// at addr that lost it, when it differs from that server's last one; nil
// clears it.
func (s *Store) noteLibraryError(addr string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if last := s.swapNoted(&s.libraryErrors, addr, msg); msg != "" && msg != last {
		s.log().Error("redisstore: the server lost sortie's Functions library, and loading it again failed: "+
			"calls fail until it is loaded (sortie migrate)", "server", addr, "error", msg)
	}
}

// swapNoted sets what *m notes of the server at addr to v, under
// checkMu, and returns what it noted before ("" at first).
func (s *Store) swapNoted(m *map[string]string, addr, v string) (last string) {
	s.checkMu.Lock()
	defer s.checkMu.Unlock()
	if *m == nil {
		*m = make(map[string]string)
	}
	last, (*m)[addr] = (*m)[addr], v
	return last
}

// noteStart logs a restart (or a failover) of the server of set that
// happened since the last check, told by a new run ID: what the server
// had not written to disk, or a new primary had not received, went with
// it, and no call noticed.
func (s *Store) noteStart(set serverSettings) {
	if last := s.swapNoted(&s.runIDs, set.addr, set.runID); last != "" && set.runID != last {
		s.log().Warn("redisstore: the Redis server restarted or failed over since the last check: what it had not written "+
			"to disk is gone (with appendfsync everysec up to about a second of writes, from a snapshot every write since it "+
			"was taken, after a failover what the replica had not received), and a job lost that way is not reported; "+
			"claimed jobs may run again, and no job ID or claim token is handed out twice",
			"server", set.addr, "uptime_seconds", set.uptime)
	}
}

// readSettings reads one server's settings: INFO says the policy,
// whether the append-only file is on and the memory; CONFIG the snapshot
// schedule, where the server allows it (managed services refuse CONFIG).
func readSettings(ctx context.Context, c redis.UniversalClient) (serverSettings, error) {
	info, err := c.Info(ctx, "server", "memory", "persistence").Result()
	if err != nil {
		return serverSettings{}, err
	}
	number := func(name string) int64 {
		n, _ := strconv.ParseInt(infoField(info, name), 10, 64)
		return n
	}
	set := serverSettings{policy: infoField(info, "maxmemory_policy"), appendOnly: infoField(info, "aof_enabled") == "1",
		used: number("used_memory") - number("mem_not_counted_for_evict"), maxMemory: number("maxmemory"),
		runID: infoField(info, "run_id"), uptime: number("uptime_in_seconds")}
	save, err := c.ConfigGet(ctx, "save").Result()
	switch {
	case err == nil:
		set.snapshots = strings.TrimSpace(save["save"]) != ""
	case configRefused(err):
		set.saveUnknown = true
	default:
		// Not an answer about the settings (a connection lost, a server
		// still loading): the last ones read stand.
		return serverSettings{}, err
	}
	return set, nil
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

// problems returns the problems of servers' settings, each once: of a
// cluster's primaries (named, with several), the memory of the one that
// uses the largest share of its maxmemory among those high says to
// report (see memoryProblem).
func problems(all []serverSettings, high map[string]bool, named bool) []store.ServerProblem {
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
	var worst *serverSettings
	for i, set := range all {
		if high[set.addr] && (worst == nil || memoryShare(set) > memoryShare(*worst)) {
			worst = &all[i]
		}
	}
	if worst != nil {
		add(store.ProblemMemory, memoryProblem(*worst, named))
	}
	return out
}

// memoryShare returns the share of its maxmemory the server of set uses,
// 0 when it has no limit.
func memoryShare(set serverSettings) float64 {
	if set.maxMemory <= 0 {
		return 0
	}
	return float64(set.used) / float64(set.maxMemory)
}

// memoryProblem says what is wrong with the memory of the server of set,
// which ServerCheck reports: it uses memoryHighShare of its maxmemory or
// more, or memoryClearedShare or more after such a check. named adds the
// server's address (a cluster's primary).
func memoryProblem(set serverSettings, named bool) string {
	server := "the Redis server"
	if named {
		server += " at " + set.addr
	}
	const room = "delete finished jobs (sortie delete --all --state completed), keep them for less time, or raise maxmemory"
	if set.used >= set.maxMemory {
		return fmt.Sprintf("%s is full: it uses %s of its maxmemory %s, and refuses enqueues, claims and "+
			"outcomes until room is made; %s", server, byteSize(set.used), byteSize(set.maxMemory), room)
	}
	return fmt.Sprintf("%s uses %.0f%% of its maxmemory (%s of %s): when it is full it refuses enqueues, "+
		"claims and outcomes; %s", server, 100*memoryShare(set), byteSize(set.used), byteSize(set.maxMemory), room)
}

// byteSize writes n bytes in binary units: "512 B", "3.4 MiB".
func byteSize(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}
