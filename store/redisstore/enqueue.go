package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/depgraph"
	"github.com/sortiehq/sortie/store/internal/intake"
)

// JobEnqueueMany inserts p.Jobs atomically, in one call of sortie_add
// for a plain batch (see add.go), else of sortie_enqueue. See
// store.Store.
func (s *Store) JobEnqueueMany(ctx context.Context, p *store.JobEnqueueManyParams) ([]store.EnqueueResult, error) {
	if err := store.ValidateJobs(p.Jobs); err != nil {
		return nil, err
	}
	if len(p.Jobs) == 0 {
		return []store.EnqueueResult{}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if plainBatch(p) {
		res, slow, err := s.enqueuePlain(ctx, p)
		if err != nil || !slow {
			return res, err
		}
	}
	args, err := s.batchArgs(p.Jobs, p.Now, p.Workflow)
	if err != nil {
		return nil, err
	}
	if _, err := s.batchGroup(ctx, p.Jobs); err != nil {
		return nil, err
	}
	if err := s.clusterPrepare(ctx, p.Jobs, args); err != nil {
		return nil, err
	}
	b := &pendingBatch{jobs: p.Jobs, args: args}
	s.sendBatches(ctx, []*pendingBatch{b})
	return b.res, b.err
}

// pendingBatch is a batch, its encoded arguments and, once sent, its
// results. (sortie_enqueue takes several, each atomic on its own; a call
// carries one: carrying the batches of concurrent callers in one call
// was measured slower with 8 producers on 2 cores than each caller's own
// call on its own connection, since the library's work per job is the
// same and the callers then wait for one another.)
type pendingBatch struct {
	jobs []*store.NewJob
	args []any
	res  []store.EnqueueResult
	err  error
}

// ErrCrossGroup is returned on Redis Cluster for a batch, or a
// dependency, that spans key groups: one call of the library can touch
// one slot only, and sortie does not split what must be atomic.
var ErrCrossGroup = errors.New("redisstore: on Redis Cluster a batch, workflow, chain or dependency must stay in one key group")

// batchGroup returns the key group of a batch's jobs. On a cluster every
// job, and every job it depends on, must be in one group; on one server
// the first job's group is returned. A dependency whose ID gives another
// group may be an imported job of this one (see locate.go).
func (s *Store) batchGroup(ctx context.Context, jobs []*store.NewJob) (int64, error) {
	g := s.k.groupOf(jobs[0].Queue)
	if !s.cluster {
		return g, nil
	}
	var other, fresh []int64
	queueOf := make(map[int64]string)
	for _, j := range jobs {
		if jg := s.k.groupOf(j.Queue); jg != g {
			return 0, fmt.Errorf("%w: queues %q and %q are in different groups (by default a queue's group is its name up to the first ':'; see Options.Group)", ErrCrossGroup, jobs[0].Queue, j.Queue)
		}
		for _, d := range j.DependsOn {
			switch {
			case isNewID(d):
				fresh = append(fresh, d)
			case naturalGroup(d) != g:
				other = append(other, d)
			}
			queueOf[d] = j.Queue
		}
	}
	fg, err := s.foreignGroups(ctx, other)
	if err != nil {
		return 0, err
	}
	home, err := s.jobGroups(ctx, fresh)
	if err != nil {
		return 0, err
	}
	for _, d := range other {
		if h, ok := fg[d]; !ok || h != g {
			return 0, fmt.Errorf("%w: job of queue %q depends on job %d, of another group", ErrCrossGroup, queueOf[d], d)
		}
	}
	for _, d := range fresh {
		// A dependency found nowhere is left to the library, which
		// refuses it as unknown.
		if h, ok := home[d]; ok && h != g {
			return 0, fmt.Errorf("%w: job of queue %q depends on job %d, of another group", ErrCrossGroup, queueOf[d], d)
		}
	}
	return g, nil
}

// clusterPrepare does on a cluster what the library does itself on one
// server: it lists the batch's queues in P:queues (once per process) and
// takes the batch's IDs from P:seq (sortie_ids), setting the batch's
// first ID.
func (s *Store) clusterPrepare(ctx context.Context, jobs []*store.NewJob, args []any) error {
	if !s.cluster {
		return nil
	}
	first, err := s.clusterReserve(ctx, jobs)
	if err != nil {
		return err
	}
	args[3] = first
	return nil
}

// clusterReserve lists the queues of jobs in P:queues (once per process)
// and takes IDs for them from P:seq (sortie_ids), returning the first.
func (s *Store) clusterReserve(ctx context.Context, jobs []*store.NewJob) (string, error) {
	for _, j := range jobs {
		if _, ok := s.listed.Load(j.Queue); ok {
			continue
		}
		if err := s.listQueue(ctx, j.Queue); err != nil {
			return "", err
		}
	}
	v, err := s.fcall(ctx, "sortie_ids", s.k.seq(), s.arg0, strconv.Itoa(len(jobs)))
	if err != nil {
		return "", err
	}
	first, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: ids: unexpected reply %v", errLibrary, v)
	}
	return first, nil
}

// listQueue adds q to P:queues (on a cluster; on one server the library
// does).
func (s *Store) listQueue(ctx context.Context, q string) error {
	if err := s.rdb.SAdd(ctx, s.k.queues(), q).Err(); err != nil {
		return s.readError("list queue", err)
	}
	s.listed.Store(q, struct{}{})
	return nil
}

// batchArgs encodes a validated batch as one batch of sortie_enqueue's
// arguments (from its now on).
func (s *Store) batchArgs(jobs []*store.NewJob, now time.Time, workflow bool) ([]any, error) {
	res := make([]store.EnqueueResult, len(jobs))
	intake.MarkDuplicates(jobs, res)
	args := make([]any, 0, 4+len(jobs)*14)
	wf := "0"
	if workflow {
		wf = "1"
	}
	args = append(args, micros(now), wf, strconv.Itoa(len(jobs)), "")
	for i, j := range jobs {
		state, runAt := intake.StartState(j.RunAt, now)
		x, err := encodeExtra(j)
		if err != nil {
			if len(jobs) > 1 {
				return nil, fmt.Errorf("job %d of %d (kind %q): %w", i+1, len(jobs), j.Kind, err)
			}
			return nil, err
		}
		dup := "-1"
		if res[i].Duplicate {
			dup = strconv.FormatInt(-1-res[i].ID, 10)
		}
		idf := "0"
		if j.IgnoreDepFailure {
			idf = "1"
		}
		args = append(args, j.Queue, group(s.k.groupOf(j.Queue)), j.Kind, strconv.Itoa(j.Priority),
			strconv.Itoa(j.MaxAttempts), micros(runAt), string(state), j.UniqueKey, j.PartitionKey,
			string(j.Args), x, idf, dup, depList(j))
	}
	return args, nil
}

// sendBatches sends batches in one call of sortie_enqueue and gives each
// its results or error.
func (s *Store) sendBatches(ctx context.Context, bs []*pendingBatch) {
	n := 2
	for _, b := range bs {
		n += len(b.args)
	}
	args := make([]any, 0, n)
	args = append(args, s.arg0, strconv.Itoa(len(bs)))
	for _, b := range bs {
		args = append(args, b.args...)
	}
	v, err := s.fcall(ctx, "sortie_enqueue", s.k.queue(bs[0].jobs[0].Queue)+"h", args...)
	var replies []any
	if err == nil {
		var ok bool
		if replies, ok = v.([]any); !ok || len(replies) != len(bs) {
			err = fmt.Errorf("redisstore: enqueue: unexpected reply %v", v)
		}
	}
	for i, b := range bs {
		if err != nil {
			b.err = err
		} else {
			b.res, b.err = s.enqueueResults(b.jobs, replies[i])
		}
	}
}

// depList encodes a job's dependencies: existing IDs as they are, earlier
// jobs of the batch as -(index+1).
func depList(j *store.NewJob) string {
	if !j.HasDeps() {
		return ""
	}
	parts := make([]string, 0, len(j.DependsOn)+len(j.DependsOnIndex))
	for _, d := range j.DependsOn {
		parts = append(parts, idString(d))
	}
	for _, x := range j.DependsOnIndex {
		parts = append(parts, strconv.Itoa(-(x + 1)))
	}
	return strings.Join(parts, ",")
}

// enqueueResults decodes sortie_enqueue's reply.
func (s *Store) enqueueResults(jobs []*store.NewJob, v any) ([]store.EnqueueResult, error) {
	if code, f, ok := libError(v); ok {
		return nil, enqueueError(jobs, code, f)
	}
	list, err := stringList(v)
	if err != nil {
		return nil, err
	}
	if len(list) != 3*len(jobs) {
		return nil, fmt.Errorf("redisstore: enqueue: %d values for %d jobs", len(list), len(jobs))
	}
	res := make([]store.EnqueueResult, len(jobs))
	for i := range res {
		dup := list[3*i+1] == "1"
		if dup && list[3*i] == "" {
			res[i] = store.EnqueueResult{ID: -1 - int64(firstWithKey(jobs, i)), Duplicate: true}
			continue
		}
		id, err := strconv.ParseInt(list[3*i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redisstore: enqueue: bad job ID %q", list[3*i])
		}
		res[i] = store.EnqueueResult{ID: id, Duplicate: dup, State: store.JobState(list[3*i+2])}
		if !dup {
			s.remember(id, s.k.groupOf(jobs[i].Queue))
		}
	}
	intake.ResolveDuplicates(res)
	return res, nil
}

// firstWithKey returns the index of the batch's first job with job i's
// unique key.
func firstWithKey(jobs []*store.NewJob, i int) int {
	for f := range i {
		if jobs[f].UniqueKey == jobs[i].UniqueKey {
			return f
		}
	}
	return i
}

// enqueueError makes the store error of a library refusal.
func enqueueError(jobs []*store.NewJob, code string, f []string) error {
	switch code {
	case "dep":
		i, _ := strconv.Atoi(f[0])
		d, _ := strconv.ParseInt(f[1], 10, 64)
		return depgraph.UnknownError(i-1, len(jobs), jobs[i-1].Kind, d)
	case "full":
		maxDepth, _ := strconv.Atoi(f[1])
		queued, _ := strconv.ParseInt(f[2], 10, 64)
		adding, _ := strconv.ParseInt(f[3], 10, 64)
		return store.QueueFullError(f[0], maxDepth, queued, adding)
	}
	return fmt.Errorf("%w: enqueue: unknown refusal %q", errLibrary, code)
}

// PeriodicAdvance moves a schedule's last slot and enqueues its jobs in
// one call of sortie_periodic. See store.Store.
func (s *Store) PeriodicAdvance(ctx context.Context, p *store.PeriodicAdvanceParams) (*store.PeriodicAdvanceResult, error) {
	if err := store.ValidateJobs(p.Jobs); err != nil {
		return nil, err
	}
	args, err := s.batchArgs(p.Jobs, p.Now, false)
	if err != nil {
		return nil, err
	}
	key, err := s.periodicKey(ctx, p.Name, p.Jobs)
	if err != nil {
		return nil, err
	}
	if err := s.clusterPrepare(ctx, p.Jobs, args); err != nil {
		return nil, err
	}
	args = append([]any{s.arg0, p.Name, micros(p.From), micros(p.To)}, args...)
	v, err := s.fcall(ctx, "sortie_periodic", key, args...)
	if err != nil {
		return nil, err
	}
	if code, f, ok := libError(v); ok {
		return nil, enqueueError(p.Jobs, code, f)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) < 1 {
		return nil, fmt.Errorf("redisstore: periodic: unexpected reply %v", v)
	}
	if applied, _ := arr[0].(int64); applied == 0 {
		last, _ := arr[1].(string)
		return &store.PeriodicAdvanceResult{Last: parseMicros(last)}, nil
	}
	res, err := s.enqueueResults(p.Jobs, arr[1:])
	if err != nil {
		return nil, err
	}
	return &store.PeriodicAdvanceResult{Applied: true, Last: p.To, Results: res}, nil
}

// periodicKey returns the hash that keeps schedule name's last slot: the
// store's one on one server; on a cluster the one of the key group of the
// schedule's jobs, which P:periodics records at the first advance so that
// every later one (with jobs or without) finds it.
func (s *Store) periodicKey(ctx context.Context, name string, jobs []*store.NewJob) (string, error) {
	if !s.cluster {
		return s.k.periodic(), nil
	}
	g := s.k.groupOf("periodic:" + name)
	if len(jobs) > 0 {
		var err error
		if g, err = s.batchGroup(ctx, jobs); err != nil {
			return "", err
		}
	}
	if err := s.rdb.HSetNX(ctx, s.k.periodics(), name, g).Err(); err != nil {
		return "", s.readError("register schedule", err)
	}
	kept, err := s.rdb.HGet(ctx, s.k.periodics(), name).Int64()
	if err != nil {
		return "", s.readError("register schedule", err)
	}
	if len(jobs) > 0 && kept != g {
		return "", fmt.Errorf("%w: schedule %q keeps its state in the key group of its first jobs' queue; queue %q is in another", ErrCrossGroup, name, jobs[0].Queue)
	}
	return s.k.tag(kept) + "periodic", nil
}
