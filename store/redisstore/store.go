package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/combine"
	"github.com/sortiehq/sortie/store"
)

// DefaultPrefix is the key prefix when Options.Prefix is empty.
const DefaultPrefix = "sortie"

// LibraryVersion is the version of the Functions library this build
// loads. A server holding a newer one refuses to start this build
// (ErrLibraryNewer): an older sortie must not replace the functions a
// newer one relies on. The functions of each version take the arguments
// of the version before it, so processes of version 15 that are running
// when this version is loaded keep working beside it (a process of 15
// started afterwards refuses the server), and the data this version
// writes is what version 15 reads: to go back, stop every process of
// this version, delete the library (FUNCTION DELETE sortie) and start
// version 15's. A server of version 12 or earlier moves its ID indexes
// when this version opens it (the indexes of version 13 and later are
// bucketed); its processes must stop first, since they read the old
// indexes.
const LibraryVersion = 16

// Options configure a Store. The zero value is usable.
type Options struct {
	// Prefix starts every key of the store, so that several stores (or
	// tests) share one server. It may not contain '{' or '}'. Defaults
	// to DefaultPrefix. A URL can set it with ?prefix=NAME.
	Prefix string

	// Group names the key group of a queue (nil: DefaultGroup). A queue's
	// keys and its jobs' keys share one hash tag, derived from its group,
	// so on Redis Cluster a group lives on one slot. What spans queues —
	// one batch, a workflow or a chain, a dependency, a unique key — must
	// stay in one group on a cluster (see the package doc); on one server
	// groups change nothing but key names. Every process of a store must
	// use the same function.
	Group func(queue string) string

	// ClaimRows says whether a claim returns the claimed jobs in its reply
	// (one round trip) instead of the jobs being read after it (two; a
	// claim of up to 4 jobs returns them in its reply either way).
	// Passing the jobs through the library costs the server a few
	// microseconds a job, more than a second round trip costs on a near
	// server, and less than it costs on a far one. ClaimRowsAuto (the
	// default) decides at Open from the server's round trip: rows in the
	// claim when the median of a few PINGs takes at least
	// ClaimRowsRoundTrip.
	ClaimRows ClaimRows

	// WaitForServer is how long Open keeps trying to reach a server that
	// does not answer (refusing connections, timing out, or LOADING while
	// it reads its data after a restart), retrying with backoff and
	// logging once when it starts waiting and once when the server
	// answers. Other errors (a bad URL, a refused password, a server that
	// may evict keys, a newer library) fail at once. Ignored by New.
	// Defaults to 0: fail at once.
	WaitForServer time.Duration

	// Logger receives the store's own reports: waiting for the server,
	// the library loaded again on a server that lost it, a newer library
	// loaded by another process, a server that restarted, a server that
	// refuses blocking waits. Defaults to slog.Default().
	Logger *slog.Logger

	// RequireLibrary makes Open refuse a server that holds an older
	// version of sortie's Functions library, or none (ErrLibraryOlder),
	// instead of loading this build's: once it is loaded, processes of
	// older builds can no longer start (ErrLibraryNewer). sortie's
	// commands for operators set it, so that only sortie migrate and
	// sortie serve upgrade a server. Defaults to false: load it.
	RequireLibrary bool

	// KeepDialLogs keeps go-redis's own log line for each connection that
	// fails to open. By default Open silences those lines (for the whole
	// process: go-redis's logger is global), since the client logs an
	// outage once when it starts and once when it ends. Ignored by New.
	KeepDialLogs bool
}

// ClaimRows is Options.ClaimRows.
type ClaimRows int

// The ClaimRows choices.
const (
	ClaimRowsAuto ClaimRows = iota
	ClaimRowsAlways
	ClaimRowsNever
)

// ClaimRowsRoundTrip is the round trip from which ClaimRowsAuto puts the
// claimed jobs in the claim's reply: about the server time of passing a
// claim's worth of jobs (100) through the library.
const ClaimRowsRoundTrip = 500 * time.Microsecond

// Store is a store.Store on Redis 7 or later. See the package doc.
type Store struct {
	rdb     redis.UniversalClient
	cluster bool
	// arg0 is the first argument of every library call: mode and prefix.
	arg0 string
	// listed holds the queues this process put in P:queues (on a cluster,
	// where the library cannot).
	listed sync.Map
	own    bool // Close closes rdb
	k      keys
	hub    *hub
	closed chan struct{}
	once   sync.Once
	// claimRows: JobFetch calls sortie_fetch_rows (Options.ClaimRows).
	claimRows bool
	// resent holds the reports of failed finish calls (fetch.go).
	resent resentReports
	// combine gathers concurrent plain enqueues (add.go).
	combine combine.Combiner[*addReq]
	// homes holds the key groups of jobs with new IDs on a cluster (see
	// locate.go).
	homes homes
	// nonce and waiters make each waiting claim's waiter ID (JobFetchWait);
	// noBlock is set once the server refused a BLPOP (an ACL without
	// blocking commands): waits then watch.
	nonce   string
	waiters atomic.Int64
	noBlock atomic.Bool
	logger  *slog.Logger
	// libraryMu serializes keepLibrary's checks and loads, and guards
	// newerLogged (a newer library was logged); requireLibrary:
	// Options.RequireLibrary, keepLibrary loads nothing.
	libraryMu      sync.Mutex
	newerLogged    bool
	requireLibrary bool
	// checkMu guards what ServerCheck keeps of each server between its
	// rounds: memoryHigh, the servers whose memory it reports (by address);
	// runIDs, each one's run ID (noteStart); libraryErrors, each one's
	// last failure to load the library (noteLibraryError).
	checkMu       sync.Mutex
	memoryHigh    map[string]bool
	runIDs        map[string]string
	libraryErrors map[string]string
	// blocking holds a token per blocked call (blockSlots); fallback the
	// watches of waits that found none free.
	blocking   chan struct{}
	fallbackMu sync.Mutex
	fallback   map[string]*store.Watch
	// importHook, set by tests, runs before each call of sortie_import
	// that JobImport makes, with its number (from 0).
	importHook func(call int)
}

var _ store.Store = (*Store)(nil)

// Open connects to the Redis server of url (redis:// or rediss://, with
// go-redis's URL options, and ?prefix=NAME), checks it (see New) and
// returns the store. A URL naming more nodes with addr= parameters
// (redis://host1:port?addr=host2:port&addr=host3:port) opens a Redis
// Cluster. Close closes the connections.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	rdb, prefix, err := newClient(rawURL)
	if err != nil {
		return nil, err
	}
	o := withDefaults(opts)
	if prefix != "" {
		o.Prefix = prefix
	}
	if !o.KeepDialLogs {
		silenceDialLogs()
	}
	var s *Store
	err = openWaiting(ctx, &o, redisTarget(rawURL), func() (err error) {
		s, err = newStore(ctx, rdb, o)
		return err
	})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	s.own = true
	return s, nil
}

// newClient makes the client of a URL: a cluster client when it names
// more nodes (addr=), a client of one server otherwise.
func newClient(rawURL string) (redis.UniversalClient, string, error) {
	rest, prefix, err := splitURL(rawURL)
	if err != nil {
		return nil, "", err
	}
	// go-redis retries a command after a network error, which could run
	// a state change twice (an enqueue whose reply was lost) and hides
	// short outages from the client, whose own backoff retries and logs
	// them once. So it does not, unless the URL says max_retries.
	keepRetries := strings.Contains(rest, "max_retries=")
	if isClusterURL(rest) {
		copts, err := redis.ParseClusterURL(rest)
		if err != nil {
			return nil, "", fmt.Errorf("redisstore: parse URL: %w", err)
		}
		if !keepRetries {
			copts.MaxRetries = -1
		}
		return redis.NewClusterClient(copts), prefix, nil
	}
	ropts, err := redis.ParseURL(rest)
	if err != nil {
		return nil, "", fmt.Errorf("redisstore: parse URL: %w", err)
	}
	if !keepRetries {
		ropts.MaxRetries = -1
	}
	return redis.NewClient(ropts), prefix, nil
}

// redisTarget names the server of a URL for a log line, without its
// password.
func redisTarget(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Host
	}
	return "the Redis server"
}

// isClusterURL reports whether a URL names more nodes (addr=).
func isClusterURL(u string) bool {
	p, err := url.Parse(u)
	return err == nil && p.Query().Has("addr")
}

// splitURL checks a URL's scheme and takes sortie's own parameter
// (prefix) out of it, returning the rest for go-redis.
func splitURL(rawURL string) (rest, prefix string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", fmt.Errorf("redisstore: parse URL: %w", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return "", "", fmt.Errorf("redisstore: URL scheme %q: want redis:// or rediss://", u.Scheme)
	}
	q := u.Query()
	prefix = q.Get("prefix")
	if err := checkPrefix(prefix); err != nil {
		return "", "", err
	}
	q.Del("prefix")
	u.RawQuery = q.Encode()
	return u.String(), prefix, nil
}

// ParseURL parses a URL as Open does: redis:// or rediss://, with
// go-redis's URL options, and sortie's own ?prefix=NAME, which it returns
// apart (empty when the URL has none). For a cluster URL (more nodes in
// addr= parameters) it returns the options of the first node.
func ParseURL(rawURL string) (opts *redis.Options, prefix string, err error) {
	rest, prefix, err := splitURL(rawURL)
	if err != nil {
		return nil, "", err
	}
	if isClusterURL(rest) {
		c, err := redis.ParseClusterURL(rest)
		if err != nil {
			return nil, "", fmt.Errorf("redisstore: parse URL: %w", err)
		}
		return &redis.Options{Addr: c.Addrs[0], Username: c.Username, Password: c.Password, TLSConfig: c.TLSConfig}, prefix, nil
	}
	opts, err = redis.ParseURL(rest)
	if err != nil {
		return nil, "", fmt.Errorf("redisstore: parse URL: %w", err)
	}
	return opts, prefix, nil
}

// checkPrefix refuses a key prefix that would break the keys' hash tags.
func checkPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("redisstore: prefix %q may not contain '{' or '}'", p)
	}
	return nil
}

// New returns a store on rdb, which the caller keeps and closes. It checks
// that the server runs Redis 7 or later and never evicts keys
// (maxmemory-policy noeviction: eviction would silently delete jobs), and
// loads the Functions library, replacing an older version; a newer one is
// an error.
func New(ctx context.Context, rdb redis.UniversalClient, opts *Options) (*Store, error) {
	return newStore(ctx, rdb, withDefaults(opts))
}

func withDefaults(opts *Options) Options {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	return o
}

func newStore(ctx context.Context, rdb redis.UniversalClient, o Options) (*Store, error) {
	if err := checkPrefix(o.Prefix); err != nil {
		return nil, err
	}
	if o.ClaimRows < ClaimRowsAuto || o.ClaimRows > ClaimRowsNever {
		return nil, fmt.Errorf("redisstore: Options.ClaimRows is %d: want ClaimRowsAuto, ClaimRowsAlways or ClaimRowsNever", o.ClaimRows)
	}
	if err := checkServer(ctx, rdb); err != nil {
		return nil, err
	}
	load := loadLibrary
	if o.RequireLibrary {
		load = requireLibrary
	}
	if err := load(ctx, rdb); err != nil {
		return nil, err
	}
	_, cluster := rdb.(*redis.ClusterClient)
	mode := "s"
	if cluster {
		mode = "c"
	}
	s := &Store{rdb: rdb, cluster: cluster, arg0: mode + o.Prefix, k: keys{prefix: o.Prefix, groupName: o.Group, cluster: cluster},
		closed: make(chan struct{}), nonce: rand.Text()[:12], logger: o.Logger, requireLibrary: o.RequireLibrary,
		blocking: make(chan struct{}, blockSlots(rdb))}
	s.combine.Config = combine.Config{MaxJobs: combineMaxCall}
	switch o.ClaimRows {
	case ClaimRowsAlways:
		s.claimRows = true
	case ClaimRowsAuto:
		s.claimRows = roundTrip(ctx, rdb) >= ClaimRowsRoundTrip
	}
	if err := s.migrateIndexes(ctx); err != nil {
		return nil, err
	}
	s.hub = newHub(s)
	return s, nil
}

// roundTrip returns the median time of five PINGs (0 when they fail:
// Open has checked the server already).
func roundTrip(ctx context.Context, rdb redis.UniversalClient) time.Duration {
	var ts []time.Duration
	for range 5 {
		start := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return 0
		}
		ts = append(ts, time.Since(start))
	}
	slices.Sort(ts)
	return ts[len(ts)/2]
}

// Close stops the store's watchers and, for a store made by Open, closes
// its connections. It is safe to call more than once.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		close(s.closed)
		s.fallbackMu.Lock()
		for _, w := range s.fallback {
			w.Close()
		}
		s.fallbackMu.Unlock()
		s.hub.close()
		if s.own {
			err = s.rdb.Close()
		}
	})
	return err
}

// checkServer refuses a server older than Redis 7 or one that may evict keys.
func checkServer(ctx context.Context, rdb redis.UniversalClient) error {
	info, err := rdb.Info(ctx, "server", "memory").Result()
	if err != nil {
		return fmt.Errorf("redisstore: connect: %w", err)
	}
	version := infoField(info, "redis_version")
	major, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	if major < 7 {
		return fmt.Errorf("redisstore: the server runs Redis %s; sortie needs Redis 7 or later (Functions)", version)
	}
	if p := infoField(info, "maxmemory_policy"); p != "" && p != "noeviction" {
		return fmt.Errorf("redisstore: the server's maxmemory-policy is %s; sortie needs noeviction, "+
			"because any other policy lets Redis delete keys when memory runs short, and a deleted key is a lost job "+
			"(set maxmemory-policy noeviction: a full server then refuses enqueues instead)", p)
	}
	return nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// errors from the library's {'E', code, ...} replies.
var errLibrary = errors.New("redisstore: sortie library")

func (s *Store) fcall(ctx context.Context, fn string, key string, args ...any) (any, error) {
	v, err := s.rdb.FCall(ctx, fn, []string{key}, args...).Result()
	if missingFunction(err) {
		// The server lost the library since Open loaded it: nothing ran.
		if lerr := s.keepLibraryEverywhere(ctx); lerr != nil {
			return nil, s.callError(lerr)
		}
		v, err = s.rdb.FCall(ctx, fn, []string{key}, args...).Result()
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, s.readError(strings.TrimPrefix(fn, "sortie_"), err)
	}
	return v, nil
}

// fullServer returns err as store.ErrStoreFull, saying how to make room,
// when it is the server's refusal of a write for want of memory (OOM).
func fullServer(err error) error {
	if !redis.HasErrorPrefix(err, "OOM") {
		return err
	}
	return store.FullError("the Redis server is at its maxmemory and refuses writes (delete finished jobs, "+
		"sortie delete --all --state completed; keep them for less time; or raise maxmemory)", err)
}

// libError returns the code and fields of a library error reply, or ok
// false for any other reply.
func libError(v any) (code string, fields []string, ok bool) {
	arr, isArr := v.([]any)
	if !isArr || len(arr) < 2 {
		return "", nil, false
	}
	if e, _ := arr[0].(string); e != "E" {
		return "", nil, false
	}
	list, err := stringList(arr)
	if err != nil {
		return "", nil, false
	}
	return list[1], list[2:], true
}

// Prefix returns the key prefix of the store.
func (s *Store) Prefix() string { return s.k.prefix }
