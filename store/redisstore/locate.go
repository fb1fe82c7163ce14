package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
)

// Where a job is. Every key of a job carries the group of its queue (on
// one server, a job with a new ID has one hash whatever its group; see
// keys.job). An ID below newIDMin, handed out by an earlier version,
// holds that group (seq*groups + g); an imported job keeps the ID another
// store gave it, and when that ID gives another group than its queue's,
// the hash P:fid maps the ID to its group. Reads that start from a queue
// (JobFetch, JobList) know the group; those that start from an ID look in
// P:fid when the job is not where its ID says: JobGet, JobCancel,
// JobDelete and JobRetry on a cluster (on one server the library looks
// itself), the reports JobFinish and LeaseExtend had refused, JobWait.
//
// A new ID holds no group (see sortie.lua's new_values: it must be free
// to follow the clock). On one server that costs nothing. On a cluster
// the store remembers the group of every job it enqueued, claimed or
// listed (homes), and looks for the others in the groups of the store's
// queues (one pipeline, findGroups): so a worker's outcomes and leases
// never look, and an operator's call on a job this process has not seen
// looks once.

// homesMax bounds the groups a store remembers; past it they are
// forgotten all at once, and found again when needed.
const homesMax = 1 << 17

// homes remembers the key groups of jobs with new IDs on a cluster.
type homes struct {
	mu sync.Mutex
	m  map[int64]int64
}

// remember records that job id is in group g (on a cluster; a no-op
// elsewhere, and for old IDs, which give their group).
func (s *Store) remember(id, g int64) {
	if !s.cluster || !isNewID(id) {
		return
	}
	s.homes.mu.Lock()
	if s.homes.m == nil || len(s.homes.m) >= homesMax {
		s.homes.m = make(map[int64]int64)
	}
	s.homes.m[id] = g
	s.homes.mu.Unlock()
}

// jobGroups returns the key group of each job of ids, for routing a call:
// the group an old ID gives (an imported job may be elsewhere: see
// foreignGroups); 0 for a new ID on one server, whose keys carry none
// (the library reads the group from the job); on a cluster, the group
// this store saw the job in, else the one of the store's queues' groups
// holding it. A job found nowhere is left out.
func (s *Store) jobGroups(ctx context.Context, ids []int64) (map[int64]int64, error) {
	out := make(map[int64]int64, len(ids))
	var unknown []int64
	s.homes.mu.Lock()
	for _, id := range ids {
		switch g, ok := s.homes.m[id]; {
		case !isNewID(id):
			out[id] = naturalGroup(id)
		case !s.cluster:
			out[id] = 0
		case ok:
			out[id] = g
		default:
			unknown = append(unknown, id)
		}
	}
	s.homes.mu.Unlock()
	if len(unknown) == 0 {
		return out, nil
	}
	found, err := s.findGroups(ctx, unknown)
	if err != nil {
		return nil, err
	}
	for id, g := range found {
		out[id] = g
		s.remember(id, g)
	}
	return out, nil
}

// findGroups looks for jobs with new IDs, on a cluster, in the groups of
// the store's queues: one EXISTS per job and group, in one pipeline.
func (s *Store) findGroups(ctx context.Context, ids []int64) (map[int64]int64, error) {
	names, err := s.queueNames(ctx)
	if err != nil {
		return nil, err
	}
	seen := make(map[int64]bool)
	var gs []int64
	for _, q := range names {
		if g := s.k.groupOf(q); !seen[g] {
			seen[g] = true
			gs = append(gs, g)
		}
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, 0, len(ids)*len(gs))
	for _, id := range ids {
		for _, g := range gs {
			cmds = append(cmds, pipe.Exists(ctx, s.k.jobIn(id, g)))
		}
	}
	if len(cmds) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("locate jobs", err)
	}
	out := make(map[int64]int64)
	for i, id := range ids {
		for k, g := range gs {
			if cmds[i*len(gs)+k].Val() > 0 {
				out[id] = g
			}
		}
	}
	return out, nil
}

// fidChunk is how many IDs one HMGET of P:fid asks for.
const fidChunk = 1000

// fidLookup asks, in pipe, for the groups P:fid records for ids; groups
// reads the answers once the pipeline ran.
type fidLookup struct {
	ids  []int64
	cmds []*redis.SliceCmd
}

func (s *Store) lookupFID(ctx context.Context, pipe redis.Pipeliner, ids []int64) *fidLookup {
	l := &fidLookup{ids: ids}
	for from := 0; from < len(ids); from += fidChunk {
		part := ids[from:min(from+fidChunk, len(ids))]
		fields := make([]string, len(part))
		for i, id := range part {
			fields[i] = idString(id)
		}
		l.cmds = append(l.cmds, pipe.HMGet(ctx, s.k.fid(), fields...))
	}
	return l
}

// groups returns the groups recorded, by ID.
func (l *fidLookup) groups() map[int64]int64 {
	out := make(map[int64]int64)
	for c, cmd := range l.cmds {
		for i, v := range cmd.Val() {
			str, ok := v.(string)
			if !ok {
				continue
			}
			if g, err := strconv.ParseInt(str, 10, 64); err == nil {
				out[l.ids[c*fidChunk+i]] = g
			}
		}
	}
	return out
}

// foreignGroups returns the groups P:fid records for ids: imported jobs
// that are not in the group their ID gives.
func (s *Store) foreignGroups(ctx context.Context, ids []int64) (map[int64]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	l := s.lookupFID(ctx, pipe, ids)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("locate imported jobs", err)
	}
	return l.groups(), nil
}

// getJob returns job id and the group its keys are in.
func (s *Store) getJob(ctx context.Context, id int64) (*store.JobRow, int64, error) {
	if id <= 0 {
		return nil, 0, fmt.Errorf("job %d: %w", id, store.ErrNotFound)
	}
	gs, err := s.jobGroups(ctx, []int64{id})
	if err != nil {
		return nil, 0, err
	}
	g, ok := gs[id]
	if !ok {
		return nil, 0, fmt.Errorf("job %d: %w", id, store.ErrNotFound)
	}
	kv, err := s.rdb.HGetAll(ctx, s.k.jobIn(id, g)).Result()
	if err != nil {
		return nil, 0, s.readError("get job", err)
	}
	if own, ok := kv["g"]; ok && !s.cluster {
		// A new ID's job on one server keeps its group.
		g, _ = strconv.ParseInt(own, 10, 64)
	}
	if len(kv) == 0 && !isNewID(id) {
		fg, err := s.foreignGroups(ctx, []int64{id})
		if err != nil {
			return nil, 0, err
		}
		if h, ok := fg[id]; ok && h != g {
			g = h
			if kv, err = s.rdb.HGetAll(ctx, s.k.jobIn(id, g)).Result(); err != nil {
				return nil, 0, s.readError("get job", err)
			}
		}
	}
	if len(kv) == 0 {
		return nil, 0, fmt.Errorf("job %d: %w", id, store.ErrNotFound)
	}
	r, err := decodeMap(id, kv)
	if err != nil {
		return nil, 0, err
	}
	r, err = s.withSteps(ctx, r, g)
	return r, g, err
}

// sendByGroup sends the n items of a finish or lease call, item i being
// about job id(i): one call per key group of the IDs, then, for the items
// a call refused whose job an import placed in another group (P:fid), one
// more call per that group. send makes one call in group g and returns
// the indexes it refused.
func (s *Store) sendByGroup(ctx context.Context, n int, id func(int) int64, send func(idx []int, g int64) ([]int, error)) error {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = id(i)
	}
	home, err := s.jobGroups(ctx, ids)
	if err != nil {
		return err
	}
	// A job found nowhere keeps its zero result: refused, as its call
	// would have.
	found := make([]int, 0, n)
	for i, id := range ids {
		if _, ok := home[id]; ok {
			found = append(found, i)
		}
	}
	var refused []int
	for _, part := range byGroup(len(found), func(k int) int64 { return home[ids[found[k]]] }) {
		idx := make([]int, len(part))
		for k, f := range part {
			idx[k] = found[f]
		}
		r, err := send(idx, home[ids[idx[0]]])
		if err != nil {
			return err
		}
		refused = append(refused, r...)
	}
	parts, fg, err := s.relocate(ctx, refused, id)
	if err != nil {
		return err
	}
	for _, idx := range parts {
		if _, err := send(idx, fg[id(idx[0])]); err != nil {
			return err
		}
	}
	return nil
}

// relocate returns, of the indexes of jobs whose reports or leases a
// group's call refused, those P:fid places in another group than the one
// asked, grouped by that group as byGroup does.
func (s *Store) relocate(ctx context.Context, refused []int, id func(int) int64) ([][]int, map[int64]int64, error) {
	if len(refused) == 0 {
		return nil, nil, nil
	}
	ids := make([]int64, len(refused))
	for k, i := range refused {
		ids[k] = id(i)
	}
	fg, err := s.foreignGroups(ctx, ids)
	if err != nil || len(fg) == 0 {
		return nil, nil, err
	}
	var moved []int
	for _, i := range refused {
		if g, ok := fg[id(i)]; ok && !isNewID(id(i)) && g != naturalGroup(id(i)) {
			moved = append(moved, i)
		}
	}
	if len(moved) == 0 {
		return nil, nil, nil
	}
	parts := byGroup(len(moved), func(k int) int64 { return fg[id(moved[k])] })
	for _, p := range parts {
		for k := range p {
			p[k] = moved[p[k]]
		}
	}
	return parts, fg, nil
}
