package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/store/pgstore"
	"github.com/sortiehq/sortie/store/redisstore"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// Memory returns the in-memory store as a Target: a new empty memstore per run.
func Memory() Target {
	return Target{
		Name: "memory",
		Open: func(context.Context) (store.Store, func() error, error) {
			st := memstore.New()
			return st, st.Close, nil
		},
	}
}

// SQLite returns the SQLite store as a Target. With path empty each run gets
// a new database in a temporary directory, removed when the run ends (dir
// chooses where the directory goes; empty means os.TempDir). Otherwise every
// run opens the database at path and leaves it in place. opts may be nil.
func SQLite(path, dir string, opts *sqlitestore.Options) Target {
	var o sqlitestore.Options
	if opts != nil {
		o = *opts
	}
	return Target{
		Name:        "sqlite",
		Synchronous: o.Synchronous.String(),
		Open: func(context.Context) (store.Store, func() error, error) {
			if path != "" {
				st, err := sqlitestore.Open(path, &o)
				if err != nil {
					return nil, nil, err
				}
				return st, st.Close, nil
			}
			tmp, err := os.MkdirTemp(dir, "sortie-bench-")
			if err != nil {
				return nil, nil, err
			}
			st, err := sqlitestore.Open(filepath.Join(tmp, "sortie.db"), &o)
			if err != nil {
				_ = os.RemoveAll(tmp)
				return nil, nil, err
			}
			return st, func() error {
				return errors.Join(st.Close(), os.RemoveAll(tmp))
			}, nil
		},
	}
}

// Postgres returns the PostgreSQL store at url as a Target. With schema
// empty each run gets a new schema (sortie_bench_ and a random suffix),
// dropped when the run ends; otherwise every run opens that schema
// (migrating it) and leaves it in place.
func Postgres(url, schema string) Target {
	return Target{
		Name: "postgres",
		Open: func(ctx context.Context) (store.Store, func() error, error) {
			name := schema
			if name == "" {
				var err error
				if name, err = runName("sortie_bench_"); err != nil {
					return nil, nil, err
				}
			}
			st, err := pgstore.Open(ctx, url, &pgstore.Options{Schema: name, Migrate: true})
			if err != nil {
				return nil, nil, err
			}
			if schema != "" {
				return st, st.Close, nil
			}
			return st, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := st.Pool().Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
				return errors.Join(err, st.Close())
			}, nil
		},
	}
}

// Redis returns the Redis store at url (redis:// or rediss://, see
// redisstore.Open) as a Target. Unless url names a key prefix
// (?prefix=NAME), each run gets a new prefix (sortie-bench- and a random
// suffix) whose keys are deleted when the run ends; otherwise every run
// opens that prefix and leaves its keys in place.
func Redis(url string) Target {
	return Target{
		Name: "redis",
		Open: func(ctx context.Context) (store.Store, func() error, error) {
			_, prefix, err := redisstore.ParseURL(url)
			if err != nil {
				return nil, nil, err
			}
			if prefix != "" {
				st, err := redisstore.Open(ctx, url, nil)
				if err != nil {
					return nil, nil, err
				}
				return st, st.Close, nil
			}
			if prefix, err = runName("sortie-bench-"); err != nil {
				return nil, nil, err
			}
			st, err := redisstore.Open(ctx, url, &redisstore.Options{Prefix: prefix})
			if err != nil {
				return nil, nil, err
			}
			return st, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				return errors.Join(st.Close(), deleteRedisKeys(ctx, url, prefix))
			}, nil
		},
	}
}

// deleteRedisKeys deletes every key of prefix on the Redis server at url,
// or on every primary of the cluster it names (addr=): the keys of a store
// opened with that prefix. The prefix must hold no glob characters
// (runName's names hold none).
func deleteRedisKeys(ctx context.Context, rawURL, prefix string) error {
	if u, err := url.Parse(rawURL); err == nil && u.Query().Has("addr") {
		opts, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return err
		}
		c := redis.NewClusterClient(opts)
		defer c.Close()
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return deleteNodeKeys(ctx, node, prefix)
		})
	}
	opts, _, err := redisstore.ParseURL(rawURL)
	if err != nil {
		return err
	}
	c := redis.NewClient(opts)
	defer c.Close()
	return deleteNodeKeys(ctx, c, prefix)
}

// deleteNodeKeys deletes the keys of prefix on one server, a SCAN batch
// at a time, one UNLINK a key in a pipeline: on a cluster node an UNLINK
// of keys in different slots fails (CROSSSLOT).
func deleteNodeKeys(ctx context.Context, c *redis.Client, prefix string) error {
	iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	batch := make([]string, 0, 1000)
	unlink := func() error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.Unlink(ctx, k)
			}
			return nil
		})
		batch = batch[:0]
		if err != nil {
			return fmt.Errorf("delete the run's keys: %w", err)
		}
		return nil
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
			if err := unlink(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("list the run's keys: %w", err)
	}
	if len(batch) > 0 {
		return unlink()
	}
	return nil
}

// runName returns prefix followed by a random suffix: the name of what a
// run makes for itself and removes at its end.
func runName(prefix string) (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return prefix + hex.EncodeToString(b[:]), nil
}
