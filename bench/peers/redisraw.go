package peers

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
)

// RedisRaw runs raw Redis baselines, plain commands with no script: the
// floor under any queue on the same server, as river-raw is on
// PostgreSQL. A job is a hash (its seq and args) and a member of one
// sorted set by seq:
//
//   - enqueue-single: one MULTI/EXEC (HSET, ZADD) per job, from Producers
//     connections, one transaction per round trip;
//   - enqueue-batch: the same transactions, BatchSize of them pipelined
//     per round trip (one EXEC each), from Producers connections: run it
//     with --batch 16 for the pipelined figure beside redis-benchmark's;
//   - drain: Producers loops of ZPOPMIN Workers members, then one
//     pipeline deleting their hashes, until the set is empty.
//
// Latency has no raw form: there is no worker to wake.
type RedisRaw struct {
	rdb    *redis.Client
	server string
}

var _ Peer = (*RedisRaw)(nil)

// OpenRedisRaw connects to the Redis server at url. Each run uses keys
// of its own, peerbench_<random>:..., and deletes them (its drain does).
func OpenRedisRaw(ctx context.Context, url string) (*RedisRaw, error) {
	rdb, version, err := openRedis(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("redis-raw: connect: %w", err)
	}
	return &RedisRaw{rdb: rdb, server: version}, nil
}

// Name returns "redis-raw".
func (p *RedisRaw) Name() string { return "redis-raw" }

// Config returns "".
func (p *RedisRaw) Config() string { return "" }

// Version returns go-redis's and the server's versions.
func (p *RedisRaw) Version() string {
	return fmt.Sprintf("go-redis %s, Redis %s", moduleVersion("github.com/redis/go-redis/v9"), p.server)
}

// Settings describes the commands of w.
func (p *RedisRaw) Settings(w bench.Workload, o Options) string {
	o, _ = withDefaults(o, w)
	switch w {
	case bench.Drain:
		return fmt.Sprintf("ZPOPMIN %d, then DEL of their hashes in one pipeline, %d connections", o.Workers, o.Producers)
	case bench.EnqueueSingle:
		return fmt.Sprintf("MULTI HSET ZADD EXEC, one a round trip, %d connections", o.Producers)
	case bench.EnqueueBatch:
		return fmt.Sprintf("MULTI HSET ZADD EXEC, %d pipelined a round trip, %d connections", o.BatchSize, o.Producers)
	}
	return "-"
}

// Close closes the connections.
func (p *RedisRaw) Close() error { return p.rdb.Close() }

// Run runs w once on keys of its own.
func (p *RedisRaw) Run(ctx context.Context, w bench.Workload, opts Options) (res bench.Result, err error) {
	if w != bench.Drain && w != bench.EnqueueSingle && w != bench.EnqueueBatch {
		return res, fmt.Errorf("redis-raw: workload %s has no raw form", w)
	}
	o, err := withDefaults(opts, w)
	if err != nil {
		return res, err
	}
	r := &redisRawRun{rdb: p.rdb, prefix: randomName("peerbench_") + ":", rec: bench.NewRecorder(o.Jobs, false)}
	insertMany := func(ctx context.Context, lo, hi int64) error {
		pipe := p.rdb.Pipeline()
		for seq := lo; seq < hi; seq++ {
			r.txn(ctx, pipe, seq)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	insert := func(ctx context.Context, seq int64) error { return insertMany(ctx, seq, seq+1) }
	n := o.Jobs
	switch w {
	case bench.EnqueueSingle, bench.EnqueueBatch:
		if res, err = timeEnqueues(ctx, w, o, insert, insertMany); err != nil {
			return res, fmt.Errorf("redis-raw: %w", err)
		}
	case bench.Drain:
		if err := bench.Preload(ctx, n, insertMany); err != nil {
			return res, fmt.Errorf("redis-raw: %w", err)
		}
	}
	counts, err := r.counts(ctx)
	if err != nil {
		return res, err
	}
	problems := availableCheck(counts, n)
	// Drain is timed; after an enqueue workload the same loops empty the
	// set untimed, so that the check covers every job.
	runtime.GC()
	took, err := r.drain(ctx, o.Producers, o.Workers)
	if err != nil {
		return res, err
	}
	if w == bench.Drain {
		res.SetThroughput(n, took)
		res.Workers, res.Producers = o.Workers, o.Producers
	}
	counts, err = r.counts(ctx)
	if err != nil {
		return res, err
	}
	return res, bench.Check(r.rec.Tally(counts, problems))
}

// redisRawRun is one run of redis-raw.
type redisRawRun struct {
	rdb     *redis.Client
	prefix  string
	rec     *bench.Recorder
	deleted atomic.Int64
}

func (r *redisRawRun) job(seq int64) string { return r.prefix + "j:" + strconv.FormatInt(seq, 10) }

// txn queues job seq's transaction on pipe: MULTI, HSET, ZADD, EXEC.
func (r *redisRawRun) txn(ctx context.Context, pipe redis.Pipeliner, seq int64) {
	pipe.Do(ctx, "MULTI")
	pipe.Do(ctx, "HSET", r.job(seq), "s", seq, "args", rawArgs(seq))
	pipe.Do(ctx, "ZADD", r.prefix+"q", seq, seq)
	pipe.Do(ctx, "EXEC")
}

// drain runs loops loops of ZPOPMIN limit, deleting the popped jobs'
// hashes, until the set is empty; it records each job's seq and returns
// how long it took.
func (r *redisRawRun) drain(ctx context.Context, loops, limit int) (time.Duration, error) {
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range loops {
		g.Go(func() error {
			for gctx.Err() == nil {
				zs, err := r.rdb.ZPopMin(gctx, r.prefix+"q", int64(limit)).Result()
				if err != nil {
					return fmt.Errorf("redis-raw: pop: %w", err)
				}
				if len(zs) == 0 {
					return nil
				}
				pipe := r.rdb.Pipeline()
				for _, z := range zs {
					pipe.Del(gctx, r.job(int64(z.Score)))
				}
				if _, err := pipe.Exec(gctx); err != nil {
					return fmt.Errorf("redis-raw: delete: %w", err)
				}
				for _, z := range zs {
					r.rec.Record(int64(z.Score), 0)
				}
				r.deleted.Add(int64(len(zs)))
			}
			return nil
		})
	}
	err := g.Wait()
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	return took, ctx.Err()
}

// counts counts the jobs left in the set as available and the popped ones
// as completed.
func (r *redisRawRun) counts(ctx context.Context) ([]store.QueueStateCount, error) {
	left, err := r.rdb.ZCard(ctx, r.prefix+"q").Result()
	if err != nil {
		return nil, fmt.Errorf("redis-raw: count jobs: %w", err)
	}
	return []store.QueueStateCount{
		{Queue: "raw", State: store.JobStateAvailable, Count: left},
		{Queue: "raw", State: store.JobStateCompleted, Count: r.deleted.Load()},
	}, nil
}
