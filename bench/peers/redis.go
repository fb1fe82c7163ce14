package peers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The harness's own Redis connection, for the Redis peers (asynq, bullmq):
// the server's version, the keys of a run deleted after it, and INFO
// memory for the memory workload. The peers' clients make their own
// connections; the harness is not charged for them, nor they for it.

// openRedis connects to the Redis server at url (redis://, rediss:// or
// unix://, as go-redis's ParseURL reads them) and returns the client and
// the server's version.
func openRedis(ctx context.Context, url string) (*redis.Client, string, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, "", err
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, "", err
	}
	version := "unknown"
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		if v, ok := infoField(info, "redis_version"); ok {
			version = v
		}
	}
	return rdb, version, nil
}

// infoField returns field name of an INFO reply.
func infoField(info, name string) (string, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

// usedMemory returns INFO memory's used_memory, the bytes Redis's allocator
// holds, and used_memory_dataset, those bytes less Redis's overhead
// (clients' buffers, the replication backlog, the AOF buffer, the main
// dictionaries).
func usedMemory(ctx context.Context, rdb *redis.Client) (used, dataset int64, err error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("INFO memory: %w", err)
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"used_memory", &used}, {"used_memory_dataset", &dataset}} {
		s, ok := infoField(info, f.name)
		if !ok {
			return 0, 0, fmt.Errorf("INFO memory has no %s", f.name)
		}
		if *f.v, err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("INFO memory: %s: %w", f.name, err)
		}
	}
	return used, dataset, nil
}

// Memory settling: after the enqueues, used_memory is read every
// settleEvery until two readings differ by at most settleSlack, for at most
// settleFor.
const (
	settleEvery = 250 * time.Millisecond
	settleSlack = 64 << 10
	settleFor   = 10 * time.Second
)

// settledMemory waits until used_memory stops moving (Redis frees lazily
// and the AOF buffer drains each second) and returns the last readings.
func settledMemory(ctx context.Context, rdb *redis.Client) (used, dataset int64, err error) {
	used, dataset, err = usedMemory(ctx, rdb)
	for deadline := time.Now().Add(settleFor); err == nil && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(settleEvery):
		}
		var u, d int64
		if u, d, err = usedMemory(ctx, rdb); err != nil {
			break
		}
		settled := max(u-used, used-u) <= settleSlack
		used, dataset = u, d
		if settled {
			break
		}
	}
	return used, dataset, err
}

// deleteKeys deletes the keys that match pattern (SCAN MATCH, then UNLINK
// in batches), given a minute even when ctx has ended, and returns how many
// it deleted.
func deleteKeys(ctx context.Context, rdb *redis.Client, pattern string) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	n := 0
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	batch := make([]string, 0, 1000)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := rdb.Unlink(ctx, batch...).Err()
		n += len(batch)
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return n, err
	}
	return n, flush()
}

// globEscape escapes the characters that SCAN's MATCH pattern reads as
// glob syntax.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}
