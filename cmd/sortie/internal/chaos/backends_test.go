package chaos

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// backends are the stores the scenarios run on. A store joins every
// scenario with one entry here: each scenario runs on every backend that
// has what it needs (open for several processes, faults of a kind).
var backends = []*backend{
	{
		name:     "memory",
		newStore: newMemoryStore,
		faults:   []fault{{kind: faultInjected, new: newInjectedStore}},
	},
	{
		name:      "sqlite",
		newStore:  newSQLiteStore,
		open:      openSQLite,
		serveArgs: func(u string) ([]string, error) { return []string{"--store", u}, nil },
		faults:    []fault{{kind: faultDisk, new: newSmallDiskSQLite}},
		// Three processes share SQLite's one write lock: a live process's
		// lease extension can wait for it for seconds (see
		// internal/testkit/multiproc), and must never wait past its lease.
		lease: 10 * time.Second,
	},
	{
		name:      "postgres",
		newStore:  newPostgresStore,
		open:      openPostgres,
		serveArgs: postgresServeArgs,
		faults:    []fault{{kind: faultServer, new: newPrivatePostgres}},
		lease:     10 * time.Second,
	},
	{
		name:      "redis",
		newStore:  newRedisStore,
		open:      openRedis,
		serveArgs: func(u string) ([]string, error) { return []string{"--store", u}, nil },
		faults:    []fault{{kind: faultServer, new: newPrivateRedis}},
		lease:     10 * time.Second,
	},
}

// A backend is a store the scenarios run on.
type backend struct {
	// name names the store in test names and in the counts table.
	name string
	// newStore makes an empty store that lives as long as t.
	newStore func(t *testing.T) *target
	// open opens, in a worker process, the store named by a target's url.
	// Nil when only the process that made a store can use it: the
	// scenarios with several processes leave such a store out.
	open func(ctx context.Context, url string, logger *slog.Logger) (store.Store, error)
	// serveArgs returns the `sortie serve` flags that open the store named
	// by url. Nil when serve cannot open it: the API scenario then serves
	// the same HTTP API from the test process.
	serveArgs func(url string) ([]string, error)
	// faults are the ways the store can be taken away.
	faults []fault
	// lease is the lease of the worker processes' claims: long enough that
	// a live process never loses one while the others load the store,
	// short enough that a dead process's jobs are rescued soon.
	lease time.Duration
}

// backendNamed returns the backend called name, or nil.
func backendNamed(name string) *backend {
	for _, b := range backends {
		if b.name == name {
			return b
		}
	}
	return nil
}

// A faultKind says how a fault takes a store away.
type faultKind string

const (
	// faultServer: the store's server is shut down (immediate mode), and
	// can be restarted.
	faultServer faultKind = "server down"
	// faultDisk: the disk holding the store is full.
	faultDisk faultKind = "disk full"
	// faultInjected: every call of this process to the store fails
	// (internal/testkit/storefault), for stores no other process can reach.
	faultInjected faultKind = "calls failing"
)

// A fault makes an empty store together with the outage that takes it away.
type fault struct {
	kind faultKind
	new  func(t *testing.T) *target
}

// A target is one empty store made for a scenario.
type target struct {
	b *backend
	// url names the store to worker processes (backend.open) and to
	// `sortie serve` (backend.serveArgs); empty when only this process can
	// reach it.
	url string
	// st is the store, open in the test process until the test ends.
	st store.Store
	// outage takes the store away; nil for targets of newStore.
	outage outage
}

// An outage takes a target's store away and brings it back.
type outage interface {
	// begin returns once the store records nothing more until end.
	begin(t *testing.T)
	// end returns once the store can record again.
	end(t *testing.T)
	kind() faultKind
}

// quietLogger is the logger of the stores the test process opens: their
// reports (a listener lost while the server is down) are expected there.
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// closeWith closes st when t ends.
func closeWith(t *testing.T, st store.Store) {
	t.Cleanup(func() {
		if c, ok := st.(io.Closer); ok {
			within(t, 30*time.Second, "closing the store", func() {
				if err := c.Close(); err != nil {
					t.Errorf("close store: %v", err)
				}
			})
		}
	})
}

func newMemoryStore(t *testing.T) *target {
	st := memstore.New()
	closeWith(t, st)
	return &target{st: st}
}

func newInjectedStore(t *testing.T) *target {
	inner := memstore.New()
	closeWith(t, inner)
	fs := storefault.New(inner)
	return &target{st: fs, outage: injectedOutage{fs}}
}

// injectedOutage makes every call of this process to a store fail.
type injectedOutage struct{ fs *storefault.Store }

func (o injectedOutage) begin(*testing.T) { o.fs.Fail("*", nil) }
func (o injectedOutage) end(*testing.T)   { o.fs.Heal() }
func (injectedOutage) kind() faultKind    { return faultInjected }

// sqliteOptions are the options of every SQLite store of the scenarios.
// Several processes share the write lock: a write waits for it rather than
// fail while another process commits.
var sqliteOptions = &sqlitestore.Options{BusyTimeout: 10 * time.Second}

func openSQLite(_ context.Context, path string, _ *slog.Logger) (store.Store, error) {
	return sqlitestore.Open(path, sqliteOptions)
}

// newSQLiteStoreAt opens a new SQLite store at path for t.
func newSQLiteStoreAt(t *testing.T, path string) *target {
	st, err := openSQLite(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	closeWith(t, st)
	return &target{url: path, st: st}
}

func newSQLiteStore(t *testing.T) *target {
	return newSQLiteStoreAt(t, filepath.Join(t.TempDir(), "sortie.db"))
}

func openPostgres(ctx context.Context, u string, logger *slog.Logger) (store.Store, error) {
	dsn, schema, err := pgtest.SplitSchema(u)
	if err != nil {
		return nil, err
	}
	// Every process migrates: Migrate is idempotent and serialized by an
	// advisory lock.
	return pgstore.Open(ctx, dsn, &pgstore.Options{Schema: schema, Migrate: true, Logger: logger})
}

func postgresServeArgs(u string) ([]string, error) {
	dsn, schema, err := pgtest.SplitSchema(u)
	if err != nil {
		return nil, err
	}
	return []string{"--store", dsn, "--schema", schema, "--migrate"}, nil
}

// newPostgresStoreOn makes an empty store in schema on the server at
// serverURL.
func newPostgresStoreOn(t *testing.T, serverURL, schema string) *target {
	u, err := pgtest.WithSchema(serverURL, schema)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := openPostgres(ctx, u, quietLogger)
	if err != nil {
		t.Fatal(err)
	}
	closeWith(t, st)
	return &target{url: u, st: st}
}

func newPostgresStore(t *testing.T) *target {
	return newPostgresStoreOn(t, pgtest.URL(t), pgtest.Schema(t))
}

// newPrivatePostgres makes a store on a server of the test's own, which
// the outage shuts down in immediate mode (a crash) and starts again.
func newPrivatePostgres(t *testing.T) *target {
	srv := pgtest.StartServer(t)
	tg := newPostgresStoreOn(t, srv.URL, "sortie_chaos")
	tg.outage = &serverOutage{srv: srv}
	return tg
}

// serverOutage shuts a private PostgreSQL server down in immediate mode.
type serverOutage struct{ srv *pgtest.Server }

func (o *serverOutage) begin(t *testing.T) { o.srv.Down(t, pgtest.Immediate) }
func (o *serverOutage) end(t *testing.T)   { o.srv.Up(t) }
func (*serverOutage) kind() faultKind      { return faultServer }

// restart crashes the server (immediate shutdown), leaves it down for down,
// and starts it again.
func (o *serverOutage) restart(t *testing.T, down time.Duration) {
	o.srv.Restart(t, down, pgtest.Immediate)
}

// make returns an empty store of b for t.
func (b *backend) make(t *testing.T) *target {
	tg := b.newStore(t)
	tg.b = b
	return tg
}

// make returns an empty store of b for t, with f's outage.
func (f fault) make(t *testing.T, b *backend) *target {
	tg := f.new(t)
	tg.b = b
	return tg
}

// closeStore closes st, in a worker process.
func closeStore(st store.Store) {
	if c, ok := st.(io.Closer); ok {
		_ = c.Close()
	}
}

// multiProcess returns the backends several processes can share.
func multiProcess() []*backend {
	var out []*backend
	for _, b := range backends {
		if b.open != nil {
			out = append(out, b)
		}
	}
	return out
}
