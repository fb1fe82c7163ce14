package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
)

// Where a job is. Every key of a job carries the group of its queue, and
// the IDs the store hands out hold that group (seq*groups + g), so a job's
// keys follow from its ID. An imported job keeps the ID another store gave
// it (JobImport); when that ID gives another group than its queue's, the
// hash P:fid maps the ID to its group. Reads that start from a queue
// (JobFetch, JobList) know the group; those that start from an ID look in
// P:fid when the job is not where its ID says: JobGet, JobCancel,
// JobDelete and JobRetry on a cluster (on one server the library looks
// itself), the reports JobFinish and LeaseExtend had refused, JobWait.
// A job the store numbered itself never costs the look-up, and a missing
// one costs one more read.

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
	g := groupOfID(id)
	kv, err := s.rdb.HGetAll(ctx, s.k.jobIn(id, g)).Result()
	if err != nil {
		return nil, 0, s.readError("get job", err)
	}
	if len(kv) == 0 {
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
	return r, g, err
}

// sendByGroup sends the n items of a finish or lease call, item i being
// about job id(i): one call per key group of the IDs, then, for the items
// a call refused whose job an import placed in another group (P:fid), one
// more call per that group. send makes one call in group g and returns
// the indexes it refused.
func (s *Store) sendByGroup(ctx context.Context, n int, id func(int) int64, send func(idx []int, g int64) ([]int, error)) error {
	var refused []int
	for _, idx := range byGroup(n, func(i int) int64 { return groupOfID(id(i)) }) {
		r, err := send(idx, groupOfID(id(idx[0])))
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
		if g, ok := fg[id(i)]; ok && g != groupOfID(id(i)) {
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
