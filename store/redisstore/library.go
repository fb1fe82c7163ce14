package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/depgraph"
	"github.com/sortiehq/sortie/store/internal/steps"
)

//go:embed sortie.lua
var librarySource string

// library is the Functions library as loaded: sortie.lua with the texts
// that package store defines (so the error messages are written once)
// and the version filled in.
var library = renderLibrary(librarySource, LibraryVersion)

// renderLibrary fills in a library's source as loaded (tests render an
// earlier version's source with it).
func renderLibrary(src string, version int) string {
	// A Go format becomes a Lua one by calling the Go function with
	// markers where the values go.
	const m1 = "\x01"
	depEnded := strings.NewReplacer("-7", "%s", m1, "%s").Replace(store.DependencyEndedMessage(-7, store.JobState(m1)))
	depDeleted := strings.Replace(depgraph.DeletedMessage(-7), "-7", "%s", 1)
	dropped := strings.NewReplacer(strconv.Quote(m1), "%q", "-7", "%d").Replace(store.DroppedMessage(m1, -7))
	return strings.NewReplacer(
		"{{VERSION}}", strconv.Itoa(version),
		"{{ACT_MAX}}", strconv.Itoa(store.MaxActMany),
		"{{ROWS_FEW}}", strconv.Itoa(claimRowsFew),
		"{{STALE_MAX}}", strconv.Itoa(staleMax),
		"{{LANE_CLEAN}}", strconv.Itoa(laneClean),
		"{{START_AHEAD}}", strconv.FormatInt(store.MaxStartAhead.Microseconds(), 10),
		"{{MSG_DEP_ENDED}}", luaString(depEnded),
		"{{MSG_DEP_DELETED}}", luaString(depDeleted),
		"{{MSG_DROPPED}}", luaString(dropped),
		"{{MSG_NO_ERROR}}", luaString(store.NoErrorMessage),
		"{{MSG_LEASE_LOST}}", luaString(store.LeaseLostMessage),
		"{{MSG_PARENT_CANCELLED}}", luaString(strings.Replace(steps.ParentCancelledMessage(-7, false), "-7", "%s", 1)),
		"{{MSG_PARENT_DELETED}}", luaString(strings.Replace(steps.ParentCancelledMessage(-7, true), "-7", "%s", 1)),
	).Replace(src)
}

// A lane's list may hold stale members, of jobs cancelled or deleted from
// its middle (see sortie.lua's lanes). A claim drops at most staleMax of
// them before it returns (saying to come back at once), and a take or a
// removal at the front drops up to laneClean behind it.
const (
	staleMax  = 1000
	laneClean = 100
)

// luaString quotes s as a Lua string literal.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\%03d", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ErrLibraryNewer is returned at start when the server holds a newer
// version of the Functions library than this build of sortie knows.
var ErrLibraryNewer = errors.New("redisstore: the server holds a newer sortie Functions library than this build")

// ErrLibraryOlder is returned with Options.RequireLibrary when the server
// (or a primary of the cluster) holds an older version of the Functions
// library than this build, or none: by Open, and by a call that meets
// such a server later.
var ErrLibraryOlder = errors.New("redisstore: the server does not hold this build's sortie Functions library")

// requireLibrary returns nil when the server holds this build's version
// of the library, ErrLibraryOlder or ErrLibraryNewer otherwise; it loads
// nothing.
func requireLibrary(ctx context.Context, rdb redis.UniversalClient) error {
	lo, hi, err := libraryVersions(ctx, rdb)
	if err != nil {
		return err
	}
	return versionError(deciding(lo, hi))
}

// libraryVersions returns the lowest and the highest version of the
// library the server holds, or the primaries of a cluster (0: one holds
// none).
func libraryVersions(ctx context.Context, rdb redis.UniversalClient) (lo, hi int, err error) {
	var mu sync.Mutex
	lo = -1
	err = eachServer(ctx, rdb, func(ctx context.Context, n redis.UniversalClient) error {
		v, err := libraryVersion(ctx, n)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if lo < 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
		return nil
	})
	return max(lo, 0), hi, err
}

// deciding returns the version that decides what this build does with a
// server whose primaries hold versions lo to hi: a newer one anywhere,
// else the lowest.
func deciding(lo, hi int) int {
	if hi > LibraryVersion {
		return hi
	}
	return lo
}

// versionError returns the error of a server holding library version v
// (0: none) where this build's is needed, or nil.
func versionError(v int) error {
	switch {
	case v > LibraryVersion:
		return fmt.Errorf("%w: version %d, this build has %d; upgrade sortie (every process) to use this server", ErrLibraryNewer, v, LibraryVersion)
	case v == 0:
		return fmt.Errorf("%w: it holds none, this build needs version %d", ErrLibraryOlder, LibraryVersion)
	case v < LibraryVersion:
		return fmt.Errorf("%w: it holds version %d, this build needs version %d", ErrLibraryOlder, v, LibraryVersion)
	}
	return nil
}

// loadLibrary makes sure the server holds this build's library: it loads
// it when missing, replaces an older version (or the same version with
// other code, as during development), and refuses a newer one.
func loadLibrary(ctx context.Context, rdb redis.UniversalClient) error {
	lo, hi, err := libraryVersions(ctx, rdb)
	switch {
	case err != nil:
		return err
	case hi > LibraryVersion:
		return versionError(hi)
	case lo == LibraryVersion && sameCode(ctx, rdb):
		return nil
	}
	if err := loadEverywhere(ctx, rdb); err != nil {
		return fmt.Errorf("redisstore: load the sortie library: %w", err)
	}
	return nil
}

// keepLibrary loads this build's library on server c (one server, or one
// primary of a cluster) when c holds none or an older one: a server
// restarted without persistence or emptied by FUNCTION FLUSH has lost
// it, and an older process that started then may have loaded its own.
// It logs each load it does. A newer one is left alone, since this
// build's calls keep working beside it (see LibraryVersion), and logged
// once: this process cannot start again. With Options.RequireLibrary it
// loads nothing and returns ErrLibraryOlder.
func (s *Store) keepLibrary(ctx context.Context, c redis.UniversalClient) error {
	s.libraryMu.Lock()
	defer s.libraryMu.Unlock()
	v, err := libraryVersion(ctx, c)
	switch {
	case err != nil || v == LibraryVersion:
		return err
	case v > LibraryVersion:
		if !s.newerLogged {
			s.newerLogged = true
			s.log().Warn("redisstore: a newer sortie loaded its Functions library on the server: this process keeps working, "+
				"but cannot start again until it is upgraded", "server_version", v, "version", LibraryVersion, "server", serverAddr(c))
		}
		return nil
	case s.requireLibrary:
		return versionError(v)
	}
	if err := c.FunctionLoadReplace(ctx, library).Err(); err != nil {
		return fmt.Errorf("redisstore: load the sortie library again: %w", err)
	}
	what := "it held none (restarted without persistence, or FUNCTION FLUSH)"
	if v > 0 {
		what = fmt.Sprintf("it held version %d, loaded by an older sortie since it lost this one", v)
	}
	s.log().Warn("redisstore: loaded sortie's Functions library on the server again: "+what,
		"version", LibraryVersion, "server", serverAddr(c))
	return nil
}

// keepLibraryEverywhere is keepLibrary on the server, or on every primary
// of a cluster.
func (s *Store) keepLibraryEverywhere(ctx context.Context) error {
	return eachServer(ctx, s.rdb, s.keepLibrary)
}

// eachServer calls fn with rdb, or on a cluster with each primary, at
// once, and returns the first error.
func eachServer(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, redis.UniversalClient) error) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return fn(ctx, n) })
	}
	return fn(ctx, rdb)
}

// serverAddr names server c in a log line.
func serverAddr(c redis.UniversalClient) string {
	if n, ok := c.(*redis.Client); ok {
		return n.Options().Addr
	}
	return "cluster"
}

// missingFunction reports whether err is the server's answer to a call of
// a function it does not hold.
func missingFunction(err error) bool {
	return redis.HasErrorPrefix(err, "Function not found")
}

// libraryVersion returns the version of the sortie library the server
// holds, 0 when it holds none.
func libraryVersion(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	v, err := rdb.FCallRO(ctx, "sortie_version", nil).Int()
	switch {
	case missingFunction(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("redisstore: check the sortie library: %w", err)
	}
	return v, nil
}

// Version connects to the Redis server of url as Open does, checks it the
// same way (see New), and returns the version of sortie's Functions
// library the server holds: 0 when it holds none, LibraryVersion when it
// holds this build's. On a cluster it is the newest a primary holds when
// that is newer than this build's, else the oldest (0 when a primary holds
// none). It loads nothing; Open loads the library.
func Version(ctx context.Context, rawURL string) (int, error) {
	rdb, _, err := newClient(rawURL)
	if err != nil {
		return 0, err
	}
	defer rdb.Close()
	if err := checkServer(ctx, rdb); err != nil {
		return 0, err
	}
	lo, hi, err := libraryVersions(ctx, rdb)
	return deciding(lo, hi), err
}

// sameCode reports whether the server's library is this build's code.
func sameCode(ctx context.Context, rdb redis.UniversalClient) bool {
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "sortie", WithCode: true}).Result()
	if err != nil {
		return false
	}
	for _, l := range libs {
		if l.Name == "sortie" {
			return l.Code == library
		}
	}
	return false
}

// loadEverywhere loads the library on the server, or on every primary of
// a cluster.
func loadEverywhere(ctx context.Context, rdb redis.UniversalClient) error {
	return eachServer(ctx, rdb, func(ctx context.Context, c redis.UniversalClient) error {
		return c.FunctionLoadReplace(ctx, library).Err()
	})
}
