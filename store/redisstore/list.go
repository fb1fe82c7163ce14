package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
)

// listChunk is how many IDs JobList reads from each per-state index per
// round trip.
const listChunk = 256

// JobList returns up to p.Limit jobs matching the filters in ID order. It
// merges the per-queue, per-state ID indexes (one queue's, or every
// queue's; one state's, or all eight) from the cursor on, a chunk at a
// time, and reads the jobs of each chunk in one pipeline; the Kind,
// WorkflowID and ParentID filters are applied to the jobs read (a
// parent's children come after it, so the listing starts or stops at
// the parent). See store.Store.
func (s *Store) JobList(ctx context.Context, p *store.JobListParams) ([]*store.JobRow, error) {
	if err := store.ValidateLimit("JobListParams", p.Limit); err != nil {
		return nil, err
	}
	if p.State != "" && !p.State.Valid() {
		return nil, fmt.Errorf("list jobs: unknown state %q", p.State)
	}
	out := []*store.JobRow{}
	idx, err := s.listIndexes(ctx, p)
	if err != nil {
		return nil, err
	}
	// An imported job may be in another group than its ID gives (see
	// locate.go): listChunk says where, from the queue of its index.
	foreign := make(map[int64]int64)
	groupOf := func(id int64) int64 {
		if g, ok := foreign[id]; ok {
			return g
		}
		return naturalGroup(id)
	}
	cursor := p.AfterID
	if !p.Desc && p.WorkflowID > 0 {
		cursor = max(cursor, p.WorkflowID-1)
	}
	if !p.Desc && p.ParentID > 0 {
		// A parent's children come after it.
		cursor = max(cursor, p.ParentID)
	}
	for len(out) < p.Limit {
		ids, next, more, err := s.listChunk(ctx, idx, cursor, p.Desc, foreign)
		if err != nil {
			return nil, err
		}
		if p.Desc && p.WorkflowID > 0 {
			ids = slices.DeleteFunc(ids, func(id int64) bool { return id < p.WorkflowID })
			more = more && next >= p.WorkflowID
		}
		if p.Desc && p.ParentID > 0 {
			ids = slices.DeleteFunc(ids, func(id int64) bool { return id <= p.ParentID })
			more = more && next > p.ParentID
		}
		rows, err := s.readRows(ctx, ids, groupOf)
		if err != nil {
			return nil, err
		}
		if p.ParentID != 0 {
			rows = slices.DeleteFunc(rows, func(r *store.JobRow) bool { return r.ParentID != p.ParentID })
		}
		if err := s.fillSteps(ctx, rows, groupOf); err != nil {
			return nil, err
		}
		for _, r := range rows {
			if (p.State != "" && r.State != p.State) || (p.Kind != "" && r.Kind != p.Kind) ||
				(p.WorkflowID != 0 && r.WorkflowID != p.WorkflowID) || (p.Queue != "" && r.Queue != p.Queue) {
				continue
			}
			out = append(out, r)
			if len(out) == p.Limit {
				break
			}
		}
		if !more {
			break
		}
		cursor = next
	}
	return out, nil
}

// index is an ID index of a queue, in the queue's group.
type index struct {
	key   string
	group int64
	kind  indexKind
}

// indexKind says how an index is read.
type indexKind int

const (
	// bucketed is a state's ID index (keys.stateIndex), read by
	// sortie_index_range.
	bucketed indexKind = iota
	// byLease is the running set, ordered by lease expiry: read whole
	// (there are as many as the workers running them) and sorted.
	byLease
	// oneSet is a state's ID index of a library version before 13, one
	// sorted set by ID, until Open moves it (migrateIndexes).
	oneSet
)

// listIndexes returns the ID indexes a listing merges.
func (s *Store) listIndexes(ctx context.Context, p *store.JobListParams) ([]index, error) {
	queues := []string{p.Queue}
	if p.Queue == "" {
		var err error
		if queues, err = s.queueNames(ctx); err != nil {
			return nil, err
		}
	}
	states := store.JobStates
	if p.State != "" {
		states = []store.JobState{p.State}
	}
	idx := make([]index, 0, len(queues)*len(states))
	for _, q := range queues {
		g := s.k.groupOf(q)
		for _, st := range states {
			if st == store.JobStateRunning {
				idx = append(idx, index{s.k.running(q), g, byLease})
				continue
			}
			idx = append(idx, index{s.k.stateIndex(q, st), g, bucketed}, index{s.k.oldStateSet(q, st), g, oneSet})
		}
	}
	return idx, nil
}

// listChunk reads up to listChunk IDs past cursor from each index and
// returns, in order, those no index can still have a nearer one than:
// up to the nearest last ID of an index that returned a full chunk. next
// is the cursor for the following chunk; more is false when every index
// is exhausted. It records in foreign the group of each ID found in an
// index of another group than the ID gives (an imported job).
func (s *Store) listChunk(ctx context.Context, idx []index, cursor int64, desc bool, foreign map[int64]int64) (ids []int64, next int64, more bool, err error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(idx))
	for i, x := range idx {
		switch x.kind {
		case byLease:
			cmds[i] = pipe.ZRange(ctx, x.key, 0, -1)
		case bucketed:
			order := "0"
			if desc {
				order = "1"
			}
			cmds[i] = redis.NewStringSliceCmd(ctx, "fcall_ro", "sortie_index_range", 1, x.key, idString(cursor), order, listChunk)
			_ = pipe.Process(ctx, cmds[i])
		case oneSet:
			r := &redis.ZRangeBy{Min: "(" + idString(cursor), Max: "+", Count: listChunk}
			if desc {
				r.Min, r.Max = "-", "+"
				if cursor > 0 {
					r.Max = "(" + idString(cursor)
				}
				cmds[i] = pipe.ZRevRangeByLex(ctx, x.key, r)
			} else {
				cmds[i] = pipe.ZRangeByLex(ctx, x.key, r)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, 0, false, s.readError("list jobs", err)
	}
	var bound int64
	for i, c := range cmds {
		v := c.Val()
		all := idx[i].kind == byLease
		for _, m := range v {
			id, _ := strconv.ParseInt(m, 10, 64)
			if all && (cursor > 0 && (!desc && id <= cursor || desc && id >= cursor)) {
				continue
			}
			ids = append(ids, id)
			if g := idx[i].group; isNewID(id) || g != naturalGroup(id) {
				foreign[id] = g
				s.remember(id, g)
			}
		}
		if !all && len(v) == listChunk {
			last, _ := strconv.ParseInt(v[len(v)-1], 10, 64)
			if !more || (!desc && last < bound) || (desc && last > bound) {
				bound = last
			}
			more = true
		}
	}
	slices.Sort(ids)
	if desc {
		slices.Reverse(ids)
	}
	ids = slices.Compact(ids)
	if more {
		ids = slices.DeleteFunc(ids, func(id int64) bool { return (!desc && id > bound) || (desc && id < bound) })
		next = bound
	}
	return ids, next, more, nil
}

// readRows reads jobs by ID, each in group groupOf(id), in one pipeline,
// leaving out those gone.
func (s *Store) readRows(ctx context.Context, ids []int64, groupOf func(int64) int64) ([]*store.JobRow, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, s.k.jobIn(id, groupOf(id)))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("list jobs", err)
	}
	rows := make([]*store.JobRow, 0, len(ids))
	for i, c := range cmds {
		if len(c.Val()) == 0 {
			continue
		}
		r, err := decodeMap(ids[i], c.Val())
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}
