package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
)

// JobCancel cancels a job in one call of sortie_cancel. See store.Store.
func (s *Store) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobRow, error) {
	return s.jobCall(ctx, "sortie_cancel", p.ID, p.Now)
}

// JobDelete removes a job in one call of sortie_delete. See store.Store.
func (s *Store) JobDelete(ctx context.Context, p *store.JobDeleteParams) (*store.JobRow, error) {
	return s.jobCall(ctx, "sortie_delete", p.ID, p.Now)
}

// JobRetry runs a job again, and revives the jobs its ending cancelled, in
// one call of sortie_retry. See store.Store.
func (s *Store) JobRetry(ctx context.Context, p *store.JobRetryParams) (*store.JobRow, error) {
	return s.jobCall(ctx, "sortie_retry", p.ID, p.Now)
}

// jobCall calls an operator's function on job id and decodes the job it
// returns. On a cluster a job the call does not find may be an imported
// one in another group (P:fid, see locate.go): the call goes there.
func (s *Store) jobCall(ctx context.Context, fn string, id int64, now time.Time) (*store.JobRow, error) {
	if id <= 0 {
		return nil, fmt.Errorf("job %d: %w", id, store.ErrNotFound)
	}
	home, err := s.jobGroups(ctx, []int64{id})
	if err != nil {
		return nil, err
	}
	g, ok := home[id]
	if !ok {
		return nil, fmt.Errorf("job %d: %w", id, store.ErrNotFound)
	}
	v, err := s.fcall(ctx, fn, s.k.jobIn(id, g), s.arg0, idString(id), micros(now))
	if err != nil {
		return nil, err
	}
	if code, _, ok := libError(v); ok && code == "notfound" && s.cluster && !isNewID(id) {
		fg, err := s.foreignGroups(ctx, []int64{id})
		if err != nil {
			return nil, err
		}
		if h, ok := fg[id]; ok && h != g {
			g = h
			if v, err = s.fcall(ctx, fn, s.k.jobIn(id, g), s.arg0, idString(id), micros(now)); err != nil {
				return nil, err
			}
			if _, _, refused := libError(v); !refused && fn == "sortie_delete" {
				// The library cannot reach P:fid from the job's slot.
				if err := s.rdb.HDel(ctx, s.k.fid(), idString(id)).Err(); err != nil {
					return nil, s.readError("forget a deleted job's group", err)
				}
			}
		}
	}
	if err := refusal(id, v); err != nil {
		return nil, err
	}
	if fn == "sortie_delete" {
		return deletedRow(id, v)
	}
	r, err := rowFromReply(id, v)
	if err != nil {
		return nil, err
	}
	return s.withSteps(ctx, r, g)
}

// refusal returns the error of an operator function's refusal on job id,
// nil when v is not a refusal.
func refusal(id int64, v any) error {
	code, f, ok := libError(v)
	if !ok {
		return nil
	}
	switch code {
	case "notfound":
		return fmt.Errorf("job %d: %w", id, store.ErrNotFound)
	case "running":
		return fmt.Errorf("job %d: %w", id, store.ErrJobRunning)
	case "unique":
		return fmt.Errorf("job %d: key %q held by job %s: %w", id, f[0], f[1], store.ErrUniqueConflict)
	}
	return fmt.Errorf("%w: unknown refusal %q", errLibrary, code)
}

// JobActMany applies p.Action to each job of p.IDs, in order, in one call
// of sortie_act; on Redis Cluster, one call per key group (jobs of other
// groups share no unique key or dependency, so the order between groups
// changes nothing), imported jobs placed by P:fid. See store.Store.
func (s *Store) JobActMany(ctx context.Context, p *store.JobActManyParams) ([]store.ActResult, error) {
	if err := store.ValidateActMany(p); err != nil {
		return nil, err
	}
	out := make([]store.ActResult, len(p.IDs))
	idx := make([]int, 0, len(p.IDs))
	for i, id := range p.IDs {
		if id <= 0 {
			out[i].Err = fmt.Errorf("job %d: %w", id, store.ErrNotFound)
			continue
		}
		idx = append(idx, i)
	}
	calls, groups, err := s.actCalls(ctx, p.IDs, idx)
	if err != nil {
		return nil, err
	}
	now := micros(p.Now)
	var forget []string
	for c, call := range calls {
		args := make([]any, 0, 4+len(call))
		args = append(args, s.arg0, string(p.Action), now, strconv.Itoa(len(call)))
		for _, i := range call {
			args = append(args, idString(p.IDs[i]))
		}
		v, err := s.fcall(ctx, actFunction(p.Action), s.k.jobIn(p.IDs[call[0]], groups[c]), args...)
		if err != nil {
			return nil, err
		}
		replies, ok := v.([]any)
		if !ok || len(replies) != len(call) {
			return nil, fmt.Errorf("%w: act: unexpected reply %v", errLibrary, v)
		}
		for k, i := range call {
			out[i].Err = refusal(p.IDs[i], replies[k])
			if n, _ := replies[k].(int64); n == 2 {
				forget = append(forget, idString(p.IDs[i]))
			}
		}
	}
	if len(forget) > 0 {
		// Deleted imported jobs whose P:fid entries the library could not
		// reach from their slot.
		if err := s.rdb.HDel(ctx, s.k.fid(), forget...).Err(); err != nil {
			return nil, s.readError("forget deleted jobs' groups", err)
		}
	}
	return out, nil
}

// actFunction returns the library function of an action: the actions that
// free memory (cancel, delete) run under OOM, so that a full server can
// be emptied.
func actFunction(a store.JobAction) string {
	if a == store.ActionCancel || a == store.ActionDelete {
		return "sortie_act_free"
	}
	return "sortie_act"
}

// actCalls splits the jobs idx of ids (indexes into ids) into the calls of
// sortie_act, each with the key group it works in: one call on one
// server (the library finds imported jobs itself), one per group in order
// of first appearance on a cluster, where an imported job's group is the
// one P:fid records.
func (s *Store) actCalls(ctx context.Context, ids []int64, idx []int) ([][]int, []int64, error) {
	if len(idx) == 0 {
		return nil, nil, nil
	}
	if !s.cluster {
		// One call: the library finds every job itself; the key routes.
		return [][]int{idx}, []int64{naturalGroup(ids[idx[0]])}, nil
	}
	listed := make([]int64, len(idx))
	for k, i := range idx {
		listed[k] = ids[i]
	}
	fg, err := s.foreignGroups(ctx, listed)
	if err != nil {
		return nil, nil, err
	}
	home, err := s.jobGroups(ctx, listed)
	if err != nil {
		return nil, nil, err
	}
	groupOf := func(id int64) int64 {
		if g, ok := fg[id]; ok && !isNewID(id) {
			return g
		}
		// A job found nowhere goes to group 0, whose call finds no job.
		return home[id]
	}
	calls := byGroup(len(idx), func(k int) int64 { return groupOf(listed[k]) })
	groups := make([]int64, len(calls))
	for c, call := range calls {
		for k := range call {
			call[k] = idx[call[k]]
		}
		groups[c] = groupOf(ids[call[0]])
	}
	return calls, groups, nil
}

// JobPrune deletes finished jobs queue by queue, each in one call of
// sortie_prune. See store.Store.
func (s *Store) JobPrune(ctx context.Context, p *store.JobPruneParams) (int, error) {
	if err := store.ValidateLimit("JobPruneParams", p.Limit); err != nil {
		return 0, err
	}
	queues, err := s.queueNames(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, q := range queues {
		if total >= p.Limit {
			break
		}
		v, err := s.fcall(ctx, "sortie_prune", s.k.queue(q)+"cfg", s.arg0, q,
			group(s.k.groupOf(q)), micros(p.Now), strconv.Itoa(p.Limit-total),
			micros(p.CompletedBefore), micros(p.CancelledBefore), micros(p.DeadBefore), "1")
		if err != nil {
			return total, err
		}
		list, err := stringList(v)
		if err != nil || len(list) == 0 {
			return total, fmt.Errorf("redisstore: prune: unexpected reply %v", v)
		}
		n, _ := strconv.Atoi(list[0])
		total += n
		if gone := list[1:]; len(gone) > 0 {
			// Imported jobs whose P:fid entries the library could not
			// reach from the queue's slot (on a cluster).
			if err := s.rdb.HDel(ctx, s.k.fid(), gone...).Err(); err != nil {
				return total, s.readError("forget pruned jobs' groups", err)
			}
		}
	}
	return total, nil
}

// JobGet returns one job: one read, or for an imported job in another
// group than its ID gives, three (see locate.go). See store.Store.
func (s *Store) JobGet(ctx context.Context, p *store.JobGetParams) (*store.JobRow, error) {
	r, _, err := s.getJob(ctx, p.ID)
	return r, err
}

// decodeMap decodes a job hash read with HGETALL.
func decodeMap(id int64, m map[string]string) (*store.JobRow, error) {
	kv := make([]string, 0, 2*len(m))
	for f, v := range m {
		kv = append(kv, f, v)
	}
	return decodeRow(id, kv)
}

// readError wraps an error of a call the store makes (op names it):
// store.ErrClosed once the store is closed, store.ErrStoreFull for a
// server out of memory (fullServer).
func (s *Store) readError(op string, err error) error {
	if err = s.callError(err); errors.Is(err, store.ErrClosed) {
		return err
	}
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

// callError is readError for an error that names its call already.
func (s *Store) callError(err error) error {
	select {
	case <-s.closed:
		return store.ErrClosed
	default:
	}
	return fullServer(err)
}

// JobCounts returns the number of jobs per queue and state (see
// queueCounts). See store.Store.
func (s *Store) JobCounts(ctx context.Context, p *store.JobCountsParams) ([]store.QueueStateCount, error) {
	queues, err := s.queueNames(ctx)
	if err != nil {
		return nil, err
	}
	if p != nil && p.Queue != "" {
		queues = []string{p.Queue}
	}
	pipe := s.rdb.Pipeline()
	counts := make([]func() map[store.JobState]int64, len(queues))
	for i, q := range queues {
		counts[i] = s.queueCounts(ctx, pipe, q)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("count jobs", err)
	}
	out := []store.QueueStateCount{}
	for i, q := range queues {
		n := counts[i]()
		for _, st := range store.JobStates {
			if n[st] > 0 {
				out = append(out, store.QueueStateCount{Queue: q, State: st, Count: n[st]})
			}
		}
	}
	return out, nil
}

// queueCounts queues on pipe the reads of queue q's job counts and
// returns a function that, once pipe ran, returns them by state: the
// counts the library keeps (QP n), the running set's size, and the sizes
// of the ID indexes of an earlier library version not yet moved.
func (s *Store) queueCounts(ctx context.Context, pipe redis.Pipeliner, q string) func() map[store.JobState]int64 {
	kept := pipe.HGetAll(ctx, s.k.counts(q))
	running := pipe.ZCard(ctx, s.k.running(q))
	old := make(map[store.JobState]*redis.IntCmd, len(store.JobStates))
	for _, st := range store.JobStates {
		if st != store.JobStateRunning {
			old[st] = pipe.ZCard(ctx, s.k.oldStateSet(q, st))
		}
	}
	return func() map[store.JobState]int64 {
		n := map[store.JobState]int64{store.JobStateRunning: running.Val()}
		for st, c := range old {
			n[st] = c.Val()
		}
		for st, v := range kept.Val() {
			c, _ := strconv.ParseInt(v, 10, 64)
			n[store.JobState(st)] += c
		}
		return n
	}
}
