package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// clusterList lists queue q in P:queues on a cluster (the library does on
// one server).
func (s *Store) clusterList(ctx context.Context, q string) error {
	if !s.cluster {
		return nil
	}
	if _, ok := s.listed.Load(q); ok {
		return nil
	}
	return s.listQueue(ctx, q)
}

// QueueConfigure replaces a queue's settings in one call of
// sortie_configure. See store.Store.
func (s *Store) QueueConfigure(ctx context.Context, p *store.QueueConfigureParams) (*store.QueueRow, error) {
	if err := p.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrInvalidArgument, err)
	}
	set := &p.Settings
	if err := s.clusterList(ctx, p.Queue); err != nil {
		return nil, err
	}
	v, err := s.fcall(ctx, "sortie_configure", s.k.queue(p.Queue)+"cfg", s.arg0, p.Queue,
		group(s.k.groupOf(p.Queue)), micros(p.Now),
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
	if err := s.clusterList(ctx, p.Queue); err != nil {
		return nil, err
	}
	v, err := s.fcall(ctx, "sortie_pause", s.k.queue(p.Queue)+"cfg", s.arg0, p.Queue,
		group(s.k.groupOf(p.Queue)), micros(p.Now), paused)
	if err != nil {
		return nil, err
	}
	return queueFromReply(p.Queue, v)
}

// laneKeyLen is the length of a lane member (priority, RunAt, ID), which
// starts each of a queue's heads (QP h), followed by the lane's ID.
const laneKeyLen = 1 + 18 + 16

// QueueDelete deletes an empty queue's settings, pause and rate window: a
// check-and-set under WATCH of the queue's state sets and settings (one
// slot, as every key of a queue), run again when an enqueue or a change
// comes between the check and the delete. The name stays in P:queues, the
// set of queues ever used that rescue and pruning walk; QueueList lists
// only queues with jobs, settings or a pause. See store.Store.
func (s *Store) QueueDelete(ctx context.Context, p *store.QueueDeleteParams) error {
	qp := s.k.queue(p.Queue)
	watched := []string{qp + "cfg", s.k.counts(p.Queue), s.k.running(p.Queue), qp + "h"}
	for _, st := range store.JobStates {
		if st != store.JobStateRunning {
			watched = append(watched, s.k.oldStateSet(p.Queue, st))
		}
	}
	del := func(tx *redis.Tx) error {
		var counts func() map[store.JobState]int64
		var heads *redis.StringSliceCmd
		if _, err := tx.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			counts = s.queueCounts(ctx, pipe, p.Queue)
			heads = pipe.ZRange(ctx, qp+"h", 0, -1)
			return nil
		}); err != nil && err != redis.Nil {
			return err
		}
		var jobs int64
		for _, n := range counts() {
			jobs += n
		}
		if jobs != 0 {
			return store.QueueNotEmptyError(p.Queue, jobs)
		}
		_, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Del(ctx, qp+"cfg", qp+"rate", qp+"prun", s.k.counts(p.Queue), qp+"h",
				qp+"F:completed", qp+"F:cancelled", qp+"F:dead")
			// A lane or a finished list of a queue with no job left holds
			// stale members only (see sortie.lua's lanes and finished
			// sets).
			for _, h := range heads.Val() {
				if len(h) > laneKeyLen {
					pipe.Del(ctx, qp+"L:"+h[laneKeyLen:], qp+"l:"+h[laneKeyLen:])
				}
			}
			return nil
		})
		return err
	}
	for range 100 {
		err := s.rdb.Watch(ctx, del, watched...)
		switch {
		case err == nil || store.Plain(err):
			return err
		case !errors.Is(err, redis.TxFailedErr):
			return s.readError(fmt.Sprintf("delete queue %q", p.Queue), err)
		}
	}
	return fmt.Errorf("redisstore: delete queue %q: it kept changing while being deleted; try again", p.Queue)
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
	sizes := make([]func() map[store.JobState]int64, len(names))
	for i, q := range names {
		cfgs[i] = pipe.HGetAll(ctx, s.k.queue(q)+"cfg")
		sizes[i] = s.queueCounts(ctx, pipe, q)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("list queues", err)
	}
	out := []*store.QueueRow{}
	for i, q := range names {
		m := cfgs[i].Val()
		has := m["set"] == "1" || m["paused"] == "1"
		for _, c := range sizes[i]() {
			has = has || c > 0
		}
		if has {
			out = append(out, decodeQueue(q, m))
		}
	}
	return out, nil
}

// PeriodicList returns every schedule's state, by name. See store.Store.
func (s *Store) PeriodicList(ctx context.Context, _ *store.PeriodicListParams) ([]store.PeriodicRow, error) {
	where := map[string]string{} // name -> its hash
	if s.cluster {
		groups, err := s.rdb.HGetAll(ctx, s.k.periodics()).Result()
		if err != nil {
			return nil, s.readError("list schedules", err)
		}
		for name, g := range groups {
			n, _ := strconv.ParseInt(g, 10, 64)
			where[name] = s.k.tag(n) + "periodic"
		}
	} else {
		names, err := s.rdb.HKeys(ctx, s.k.periodic()).Result()
		if err != nil {
			return nil, s.readError("list schedules", err)
		}
		for _, name := range names {
			where[name] = s.k.periodic()
		}
	}
	pipe := s.rdb.Pipeline()
	type ask struct{ last, at *redis.StringCmd }
	asks := make(map[string]ask, len(where))
	for name, key := range where {
		asks[name] = ask{pipe.HGet(ctx, key, name), pipe.HGet(ctx, key+":at", name)}
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("list schedules", err)
	}
	out := []store.PeriodicRow{}
	for name, a := range asks {
		if a.last.Val() == "" {
			continue
		}
		out = append(out, store.PeriodicRow{Name: name, Last: parseMicros(a.last.Val()), UpdatedAt: parseMicros(a.at.Val())})
	}
	slices.SortFunc(out, func(a, b store.PeriodicRow) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
