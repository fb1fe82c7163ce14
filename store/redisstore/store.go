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
// loads. A server holding a newer one refuses to start this build: an
// older sortie must not replace the functions a newer one relies on.
// Version 15 starts new buckets of the ID indexes at up to 32 IDs, not
// 100: adding to a bucket walks its listpack, so a smaller bucket costs
// each add less (about a microsecond of the server's time a job enqueued
// or completed, for 9 bytes of memory a queued job); buckets that earlier
// versions filled stay as they are until they change. Processes of
// version 14 already running keep working beside it (its functions take
// the same arguments); one started once it is loaded refuses to start
// (ErrLibraryNewer), as any older build does.
// Version 14 adds sortie_claim_wait and sortie_unwait: a claim that
// finds nothing may wait on the server, and a call that makes jobs
// available claims them for the waiters in its own step (Store.JobFetchWait);
// processes of version 13 keep working beside it (they listen on the
// watch channels, which every version still publishes to).
// Version 13 keeps each state's ID index as buckets of up to 100 IDs (a
// quarter of the memory of one sorted set a state) with the counts beside
// them, a lane's and a finished state's jobs that arrive in order in a
// list, and adds sortie_index_range and sortie_index_migrate, which Open
// calls to move the indexes of earlier versions; processes of earlier
// versions must stop first (their listings and counts read the old
// indexes).
// Version 12 keeps a rate window's starts two periods and
// store.MaxStartAhead, not two periods: a fetch that reserved its start
// further ahead than another forgot starts the other's window held.
// Version 11 adds sortie_finish_u and sortie_release_u, whose reports
// carry a thirteenth field: a release whose handler never started gives
// its start back to the rate windows (store.Report.Unstarted);
// sortie_finish and sortie_release keep version 10's arguments.
// Version 10 keeps durable steps (sortie_step_record, sortie_step_sleep,
// sortie_step_await, sortie_step_spawn; a job's steps in hashes beside
// it, a child's parent in its hash, kept by every change of the child).
// Version 9 adds sortie_add, the plain jobs' enqueue, several callers'
// batches to a call, sortie_complete, completions with 4 arguments each,
// and sortie_claim, a claim that returns its jobs when they are few.
// Version 8 hands out job IDs and claim tokens that never fall below the
// server's clock (so a counter that Redis rolled back in a crash cannot
// hand out its lost values again), keeps a job with such an ID under
// P:j:<id> on one server, adds sortie_ids, and stamps a claim's
// AttemptedAt no earlier than the job's RunAt and CreatedAt
// (fetchplan.AttemptedAt); version 7 adds sortie_fetch_rows, a claim that
// returns its jobs; version 6 adds sortie_act, the operators' actions on many jobs in one
// call; version 5 imports jobs (sortie_import, sortie_seq_raise) and finds
// imported jobs whose ID gives another key group than their queue's
// (P:fid); version 4 keeps the history counts, version 3 added the
// process registry.
const LibraryVersion = 15

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
	// (one round trip) instead of the jobs being read after it (two).
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

	// Logger receives the store's own reports (waiting for the server).
	// Defaults to slog.Default().
	Logger *slog.Logger

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
	// libraryMu serializes keepLibrary's checks and loads.
	libraryMu sync.Mutex
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
	if err := loadLibrary(ctx, rdb); err != nil {
		return nil, err
	}
	_, cluster := rdb.(*redis.ClusterClient)
	mode := "s"
	if cluster {
		mode = "c"
	}
	s := &Store{rdb: rdb, cluster: cluster, arg0: mode + o.Prefix, k: keys{prefix: o.Prefix, groupName: o.Group, cluster: cluster},
		closed: make(chan struct{}), nonce: rand.Text()[:12], logger: o.Logger,
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
			return nil, lerr
		}
		v, err = s.rdb.FCall(ctx, fn, []string{key}, args...).Result()
	}
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		select {
		case <-s.closed:
			return nil, store.ErrClosed
		default:
		}
		return nil, fmt.Errorf("redisstore: %s: %w", strings.TrimPrefix(fn, "sortie_"), err)
	}
	return v, nil
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
