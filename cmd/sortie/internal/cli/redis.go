package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store/redisstore"
)

func init() {
	// go-redis logs each failed dial on the standard logger. The commands
	// say themselves that a store cannot be reached (serve once when an
	// outage starts and once when it ends), so those lines only repeat it.
	redis.SetLogger(quietRedisLog{})
}

// quietRedisLog is a go-redis logger that prints nothing.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// errRedisSchema is the usage error of --schema with a Redis store, whose
// key prefix is part of its URL.
var errRedisSchema = errors.New("--schema applies to postgres stores only: a Redis store's key prefix goes in the URL, redis://HOST:PORT/DB?prefix=NAME")

// schemaFlagHelp is the help of --schema where it names the schema a
// command works on.
const schemaFlagHelp = "PostgreSQL `schema` holding sortie's tables (default sortie);\na Redis store's key prefix goes in its URL instead, ?prefix=NAME (default sortie)"

// schemaFlagErr returns the usage error of --schema on a store of kind, or
// nil when kind is PostgreSQL.
func schemaFlagErr(kind string) error {
	switch kind {
	case storePostgres:
		return nil
	case storeRedis:
		return errRedisSchema
	}
	return errors.New("--schema applies to postgres stores only")
}

// redisWhat names the store of a Redis URL for the command's output:
// "redis 127.0.0.1:6379/0, key prefix sortie".
func redisWhat(dsn string) string {
	opts, prefix, err := redisstore.ParseURL(dsn)
	if err != nil {
		return "redis store"
	}
	if prefix == "" {
		prefix = redisstore.DefaultPrefix
	}
	return fmt.Sprintf("redis %s/%d, key prefix %s", opts.Addr, opts.DB, prefix)
}

// redisURLWithPrefix returns the Redis URL dsn naming key prefix prefix.
func redisURLWithPrefix(dsn, prefix string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("prefix", prefix)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// openRedis opens the Redis store of dsn, loading sortie's Functions
// library when the server holds an older one or none, as every process
// using the store does: what sortie migrate does on Redis.
func openRedis(ctx context.Context, dsn string) (*redisstore.Store, error) {
	return openRedisWaiting(ctx, dsn, 0, nil, true)
}

// openRedisWaiting opens the Redis store of dsn, keeping trying a server
// that does not answer for up to wait (--wait-for-store), logging to
// logger. With load it loads sortie's library when the server holds an
// older one or none (serve, migrate); without, it says to run sortie
// migrate (migrationRule: once it is loaded, older processes cannot
// start).
func openRedisWaiting(ctx context.Context, dsn string, wait time.Duration, logger *slog.Logger, load bool) (*redisstore.Store, error) {
	st, err := redisstore.Open(ctx, dsn, &redisstore.Options{WaitForServer: wait, Logger: logger, RequireLibrary: !load})
	switch {
	case errors.Is(err, redisstore.ErrServerWait):
		return nil, fmt.Errorf("%w (gave up waiting for it after %s)", explainRedisErr(err, dsn), wait)
	case errors.Is(err, redisstore.ErrLibraryOlder):
		holds := strings.TrimPrefix(err.Error(), redisstore.ErrLibraryOlder.Error()+": ")
		return nil, fmt.Errorf("%s does not hold this sortie's Functions library (%s): run sortie migrate "+
			"(processes of older sortie builds cannot start once it is loaded)", redisServer(dsn), holds)
	case err != nil:
		return nil, explainRedisErr(err, dsn)
	}
	return st, nil
}

// redisServer names the Redis server of dsn in a message: "the Redis
// server at HOST:PORT".
func redisServer(dsn string) string {
	if opts, _, err := redisstore.ParseURL(dsn); err == nil {
		return "the Redis server at " + opts.Addr
	}
	return "the Redis server"
}

// migrateRedis loads sortie's Functions library on the Redis server of
// dsn, or with check only reads its version, returning errNeedsMigration
// when it is older or missing.
func migrateRedis(ctx context.Context, dsn string, check bool) (migration, error) {
	server := redisServer(dsn)
	m := migration{what: "sortie's Functions library on " + server, absent: "is not loaded yet", to: redisstore.LibraryVersion}
	from, err := redisstore.Version(ctx, dsn)
	m.from = from
	switch {
	case err != nil:
		return m, explainRedisErr(err, dsn)
	case from > redisstore.LibraryVersion:
		return m, fmt.Errorf("%w: %s holds version %d, this sortie knows up to %d; upgrade sortie",
			redisstore.ErrLibraryNewer, server, from, redisstore.LibraryVersion)
	case check && from < redisstore.LibraryVersion:
		return m, errNeedsMigration
	case check:
		return m, nil
	}
	st, err := openRedis(ctx, dsn)
	if err != nil {
		return m, err
	}
	return m, st.Close()
}

// explainRedisErr says in words what went wrong reaching the Redis server
// of dsn, naming the server (never the password): unreachable, refused
// credentials, or still loading its data. Other errors (a server that may evict keys, or is older than
// Redis 7) say so themselves.
func explainRedisErr(err error, dsn string) error {
	server, user := "the Redis server", "default"
	if opts, _, perr := redisstore.ParseURL(dsn); perr == nil {
		server = "the Redis server at " + opts.Addr
		if opts.Username != "" {
			user = opts.Username
		}
	}
	var (
		rerr redis.Error
		ne   net.Error
	)
	switch {
	case redis.HasErrorPrefix(err, "NOAUTH"):
		return fmt.Errorf("%s requires a password: give it in --store, redis://:PASSWORD@HOST:PORT (or redis://USER:PASSWORD@...)", server)
	case redis.IsAuthError(err):
		msg := err.Error()
		if errors.As(err, &rerr) {
			msg = rerr.Error() // the server's words, without the wrapping
		}
		return fmt.Errorf("authentication failed: %s refused user %q (check the user and password in --store): %s", server, user, msg)
	case redis.HasErrorPrefix(err, "LOADING"):
		return fmt.Errorf("%s is still loading its data after a restart (LOADING): try again once it has "+
			"(sortie serve waits for it with --wait-for-store)", server)
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("cannot reach %s: timed out connecting", server)
	case errors.As(err, &ne):
		return fmt.Errorf("cannot reach %s: %v", server, ne)
	}
	return err
}
