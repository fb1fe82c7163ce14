package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
)

// queueNames returns every queue the store has used, by name.
func (s *Store) queueNames(ctx context.Context) ([]string, error) {
	names, err := s.rdb.SMembers(ctx, s.k.queues()).Result()
	if err != nil {
		return nil, s.readError("list queues", err)
	}
	slices.Sort(names)
	return names, nil
}

// QueueConfigure replaces a queue's settings in one call of
// sortie_configure. See store.Store.
func (s *Store) QueueConfigure(ctx context.Context, p *store.QueueConfigureParams) (*store.QueueRow, error) {
	if err := p.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrInvalidArgument, err)
	}
	set := &p.Settings
	v, err := s.fcall(ctx, "sortie_configure", s.k.queue(p.Queue)+"cfg", s.k.prefix, p.Queue,
		group(groupOf(p.Queue)), micros(p.Now),
		strconv.Itoa(set.MaxRunning), strconv.Itoa(set.RateLimit), durMicros(set.RatePeriod),
		strconv.Itoa(set.PartitionMaxRunning), strconv.Itoa(set.PartitionRateLimit), durMicros(set.PartitionRatePeriod),
		strconv.Itoa(set.MaxDepth), strconv.Itoa(int(set.Overflow)))
	if err != nil {
		return nil, err
	}
	return queueFromReply(p.Queue, v)
}

// QueuePause pauses or resumes a queue in one call of sortie_pause. See
// store.Store.
func (s *Store) QueuePause(ctx context.Context, p *store.QueuePauseParams) (*store.QueueRow, error) {
	paused := "0"
	if p.Paused {
		paused = "1"
	}
	v, err := s.fcall(ctx, "sortie_pause", s.k.queue(p.Queue)+"cfg", s.k.prefix, p.Queue,
		group(groupOf(p.Queue)), micros(p.Now), paused)
	if err != nil {
		return nil, err
	}
	return queueFromReply(p.Queue, v)
}

func queueFromReply(name string, v any) (*store.QueueRow, error) {
	kv, err := stringList(v)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return decodeQueue(name, m), nil
}

// decodeQueue makes a QueueRow of a queue's cfg hash.
func decodeQueue(name string, m map[string]string) *store.QueueRow {
	n := func(f string) int { v, _ := strconv.Atoi(m[f]); return v }
	d := func(f string) time.Duration {
		v, _ := strconv.ParseInt(m[f], 10, 64)
		return time.Duration(v) * time.Microsecond
	}
	dropped, _ := strconv.ParseInt(m["dropped"], 10, 64)
	return &store.QueueRow{
		Name:   name,
		Paused: m["paused"] == "1",
		Settings: store.QueueSettings{
			MaxRunning: n("mr"), RateLimit: n("rl"), RatePeriod: d("rp"),
			PartitionMaxRunning: n("pmr"), PartitionRateLimit: n("prl"), PartitionRatePeriod: d("prp"),
			MaxDepth: n("md"), Overflow: store.Overflow(n("ov")),
		},
		Dropped:   dropped,
		UpdatedAt: parseMicros(m["ua"]),
	}
}

// QueueGet returns a queue's state. See store.Store.
func (s *Store) QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.QueueRow, error) {
	m, err := s.rdb.HGetAll(ctx, s.k.queue(p.Queue)+"cfg").Result()
	if err != nil {
		return nil, s.readError("get queue", err)
	}
	return decodeQueue(p.Queue, m), nil
}

// QueueList returns every queue that has jobs, settings or a pause, by
// name. See store.Store.
func (s *Store) QueueList(ctx context.Context, _ *store.QueueListParams) ([]*store.QueueRow, error) {
	names, err := s.queueNames(ctx)
	if err != nil {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	cfgs := make([]*redis.MapStringStringCmd, len(names))
	sizes := make([][]*redis.IntCmd, len(names))
	for i, q := range names {
		cfgs[i] = pipe.HGetAll(ctx, s.k.queue(q)+"cfg")
		for _, st := range store.JobStates {
			sizes[i] = append(sizes[i], pipe.ZCard(ctx, s.k.queue(q)+"x:"+string(st)))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("list queues", err)
	}
	out := []*store.QueueRow{}
	for i, q := range names {
		m := cfgs[i].Val()
		has := m["set"] == "1" || m["paused"] == "1"
		for _, c := range sizes[i] {
			has = has || c.Val() > 0
		}
		if has {
			out = append(out, decodeQueue(q, m))
		}
	}
	return out, nil
}

// PeriodicList returns every schedule's state, by name. See store.Store.
func (s *Store) PeriodicList(ctx context.Context, _ *store.PeriodicListParams) ([]store.PeriodicRow, error) {
	pipe := s.rdb.Pipeline()
	last := pipe.HGetAll(ctx, s.k.periodic())
	at := pipe.HGetAll(ctx, s.k.periodicAt())
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("list schedules", err)
	}
	out := []store.PeriodicRow{}
	for name, v := range last.Val() {
		out = append(out, store.PeriodicRow{Name: name, Last: parseMicros(v), UpdatedAt: parseMicros(at.Val()[name])})
	}
	slices.SortFunc(out, func(a, b store.PeriodicRow) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}
