package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/steps"
)

// Durable steps. A job's steps live in three hashes beside the job's own,
// in its key group (P:{g}:j:<id>:sm, :sr, :sc; see sortie.lua's header):
// each step's meta (order, kind, attempt, when, wake time, children and
// how many are pending), the results, and a spawn step's children. A
// child names its parent and spawn step in its own hash, and every
// function that moves a child into or out of the pending states keeps
// the step's pending count in the same call, releasing a parent that
// awaits it. On Redis Cluster a spawn's children must be in the parent's
// key group (ErrCrossGroup otherwise), so that call stays on one slot.

// StepRecord records steps in one call of sortie_step_record per key
// group. See store.Store.
func (s *Store) StepRecord(ctx context.Context, p *store.StepRecordParams) ([]store.StepResult, error) {
	if err := steps.CheckRecords(p.Steps); err != nil {
		return nil, err
	}
	out := make([]store.StepResult, len(p.Steps))
	if len(p.Steps) == 0 {
		return out, nil
	}
	now := micros(p.Now)
	id := func(i int) int64 { return p.Steps[i].ID }
	send := func(idx []int, g int64) (refused []int, err error) {
		args := make([]any, 0, 3+len(idx)*5)
		args = append(args, s.arg0, now, strconv.Itoa(len(idx)))
		for _, i := range idx {
			r := p.Steps[i]
			args = append(args, idString(r.ID), group(g), strconv.FormatInt(r.ClaimToken, 10), r.Name, string(r.Result))
		}
		v, err := s.fcall(ctx, "sortie_step_record", s.k.jobIn(id(idx[0]), g), args...)
		if err != nil {
			return nil, err
		}
		arr, ok := v.([]any)
		if !ok || len(arr) != len(idx) {
			return nil, fmt.Errorf("%w: step_record: unexpected reply %v", errLibrary, v)
		}
		for k, i := range idx {
			n, _ := arr[k].(int64)
			out[i] = store.StepResult{Applied: n > 0, Exists: n == 2}
			if n == 0 {
				refused = append(refused, i)
			}
		}
		return refused, nil
	}
	if err := s.sendByGroup(ctx, len(p.Steps), id, send); err != nil {
		return nil, err
	}
	return out, nil
}

// stepCall calls a step function on job id, in the job's group, with
// args after the job's ID, group and claim token; it returns the reply,
// or nil when the job is not found anywhere (a stale claim).
func (s *Store) stepCall(ctx context.Context, fn string, id, token int64, args ...any) (any, error) {
	var reply any
	send := func(_ []int, g int64) ([]int, error) {
		a := append([]any{s.arg0, idString(id), group(g), strconv.FormatInt(token, 10)}, args...)
		v, err := s.fcall(ctx, fn, s.k.jobIn(id, g), a...)
		if err != nil {
			return nil, err
		}
		reply = v
		if arr, ok := v.([]any); ok && len(arr) > 0 {
			if n, _ := arr[0].(int64); n == 0 {
				return []int{0}, nil
			}
		}
		return nil, nil
	}
	if err := s.sendByGroup(ctx, 1, func(int) int64 { return id }, send); err != nil {
		return nil, err
	}
	return reply, nil
}

// suspendResult decodes the reply of sortie_step_sleep and
// sortie_step_await: applied, exists, cancel requested, state.
func suspendResult(id int64, name string, want store.StepKind, v any) (*store.StepResult, error) {
	if v == nil {
		return &store.StepResult{}, nil
	}
	if code, f, ok := libError(v); ok {
		switch code {
		case "kind":
			return nil, steps.WrongKindError(id, name, store.StepKind(f[0]), want)
		case "nospawn":
			return nil, steps.NoSpawnError(id, name)
		}
		return nil, fmt.Errorf("%w: unknown refusal %q", errLibrary, code)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 4 {
		return nil, fmt.Errorf("%w: unexpected step reply %v", errLibrary, v)
	}
	applied, _ := arr[0].(int64)
	exists, _ := arr[1].(int64)
	cancel, _ := arr[2].(int64)
	state, _ := arr[3].(string)
	return &store.StepResult{Applied: applied == 1, Exists: exists == 1, CancelRequested: cancel == 1,
		Suspended: state != "", State: store.JobState(state)}, nil
}

// StepSleep ends a running attempt at a durable sleep in one call of
// sortie_step_sleep. See store.Store.
func (s *Store) StepSleep(ctx context.Context, p *store.StepSleepParams) (*store.StepResult, error) {
	if err := steps.CheckSleep(p); err != nil {
		return nil, err
	}
	v, err := s.stepCall(ctx, "sortie_step_sleep", p.ID, p.ClaimToken, p.Name, micros(p.Until), micros(p.Now))
	if err != nil {
		return nil, err
	}
	return suspendResult(p.ID, p.Name, store.StepSleep, v)
}

// StepAwait ends a running attempt until the children of one of its
// spawn steps have finished, in one call of sortie_step_await. See
// store.Store.
func (s *Store) StepAwait(ctx context.Context, p *store.StepAwaitParams) (*store.StepResult, error) {
	if err := steps.CheckAwait(p); err != nil {
		return nil, err
	}
	v, err := s.stepCall(ctx, "sortie_step_await", p.ID, p.ClaimToken, p.Name, micros(p.Now))
	if err != nil {
		return nil, err
	}
	return suspendResult(p.ID, p.Name, store.StepSpawn, v)
}

// StepSpawn enqueues the children of a running job and records them as
// its spawn step, in one call of sortie_step_spawn. On Redis Cluster the
// children must be in the parent's key group. See store.Store.
func (s *Store) StepSpawn(ctx context.Context, p *store.StepSpawnParams) (*store.StepResult, error) {
	if err := steps.CheckSpawn(p); err != nil {
		return nil, err
	}
	args, err := s.batchArgs(p.Jobs, p.Now, false)
	if err != nil {
		return nil, err
	}
	if err := s.spawnGroup(ctx, p); err != nil {
		return nil, err
	}
	if err := s.clusterPrepare(ctx, p.Jobs, args); err != nil {
		return nil, err
	}
	cwp := "0"
	if p.CancelWithParent {
		cwp = "1"
	}
	v, err := s.stepCall(ctx, "sortie_step_spawn", p.ID, p.ClaimToken, append([]any{p.Name, cwp}, args...)...)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return &store.StepResult{}, nil
	}
	if code, f, ok := libError(v); ok {
		if code == "kind" {
			return nil, steps.WrongKindError(p.ID, p.Name, store.StepKind(f[0]), store.StepSpawn)
		}
		return nil, enqueueError(p.Jobs, code, f)
	}
	arr, err := stringList(v)
	if err != nil || len(arr) != 3 {
		return nil, fmt.Errorf("%w: step_spawn: unexpected reply %v", errLibrary, v)
	}
	ids, err := parseIDList(arr[2])
	if err != nil {
		return nil, err
	}
	return &store.StepResult{Applied: arr[0] == "1", Exists: arr[1] == "1", Children: ids}, nil
}

// spawnGroup checks, on a cluster, that a spawn's children and their
// dependencies are in the parent's key group.
func (s *Store) spawnGroup(ctx context.Context, p *store.StepSpawnParams) error {
	if !s.cluster {
		return nil
	}
	g, err := s.batchGroup(ctx, p.Jobs)
	if err != nil {
		return err
	}
	home, err := s.jobGroups(ctx, []int64{p.ID})
	if err != nil {
		return err
	}
	if h, ok := home[p.ID]; ok && h != g {
		return fmt.Errorf("%w: job %d spawns jobs of queue %q, of another group (a spawn's children share their parent's key group)",
			ErrCrossGroup, p.ID, p.Jobs[0].Queue)
	}
	return nil
}

// parseIDList reads comma-separated job IDs.
func parseIDList(csv string) ([]int64, error) {
	if csv == "" {
		return nil, nil
	}
	parts := strings.Split(csv, ",")
	ids := make([]int64, len(parts))
	for i, p := range parts {
		id, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: bad job ID list %q", errLibrary, csv)
		}
		ids[i] = id
	}
	return ids, nil
}

// StepList returns a job's steps with their results and children: one
// read to find the job, one pipeline for its steps. See store.Store.
func (s *Store) StepList(ctx context.Context, p *store.StepListParams) ([]store.JobStep, error) {
	_, g, err := s.getJob(ctx, p.ID)
	if err != nil {
		return nil, fmt.Errorf("list steps: %w", err)
	}
	key := s.k.jobIn(p.ID, g)
	pipe := s.rdb.Pipeline()
	meta := pipe.HGetAll(ctx, key+":sm")
	res := pipe.HGetAll(ctx, key+":sr")
	kids := pipe.HGetAll(ctx, key+":sc")
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("list steps", err)
	}
	list, err := decodeSteps(p.ID, meta.Val())
	if err != nil {
		return nil, err
	}
	for i := range list {
		st := &list[i]
		switch st.Kind {
		case store.StepRun:
			st.Result = []byte(res.Val()[st.Name])
		case store.StepSpawn:
			if st.Children, err = parseIDList(kids.Val()[st.Name]); err != nil {
				return nil, err
			}
		}
	}
	return list, nil
}

// decodeSteps reads the steps' meta hash of job id (see sortie.lua's
// step_meta) into steps without results or children, in order.
func decodeSteps(id int64, meta map[string]string) ([]store.JobStep, error) {
	if len(meta) == 0 {
		return []store.JobStep{}, nil
	}
	type placed struct {
		idx  int
		step store.JobStep
	}
	list := make([]placed, 0, len(meta))
	for name, m := range meta {
		f := strings.Split(m, ",")
		if len(f) != 7 {
			return nil, fmt.Errorf("%w: job %d: bad step meta %q", errLibrary, id, m)
		}
		n := make([]int64, 7)
		for i, x := range f {
			if i != 1 {
				n[i], _ = strconv.ParseInt(x, 10, 64)
			}
		}
		st := store.JobStep{Name: name, Kind: store.StepKind(f[1]), Attempt: int(n[2]), RecordedAt: parseStored(f[3])}
		switch st.Kind {
		case store.StepRun:
			st.Size = int(n[5])
		case store.StepSleep:
			st.Until = parseStored(f[4])
		case store.StepSpawn:
			st.ChildCount, st.Pending = int(n[5]), int(n[6])
		}
		list = append(list, placed{int(n[0]), st})
	}
	slices.SortFunc(list, func(a, b placed) int { return a.idx - b.idx })
	out := make([]store.JobStep, len(list))
	for i, p := range list {
		out[i] = p.step
	}
	return out, nil
}

// fillSteps sets the Steps of rows as JobGet shows them (without results
// and children), reading each job's step meta in one pipeline; group
// gives each job's key group.
func (s *Store) fillSteps(ctx context.Context, rows []*store.JobRow, group func(id int64) int64) error {
	if len(rows) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(rows))
	for i, r := range rows {
		cmds[i] = pipe.HGetAll(ctx, s.k.jobIn(r.ID, group(r.ID))+":sm")
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return s.readError("read steps", err)
	}
	for i, r := range rows {
		if len(cmds[i].Val()) == 0 {
			continue
		}
		list, err := decodeSteps(r.ID, cmds[i].Val())
		if err != nil {
			return err
		}
		r.Steps = list
	}
	return nil
}

// withSteps returns row with its steps read from group g.
func (s *Store) withSteps(ctx context.Context, row *store.JobRow, g int64) (*store.JobRow, error) {
	if err := s.fillSteps(ctx, []*store.JobRow{row}, func(int64) int64 { return g }); err != nil {
		return nil, err
	}
	return row, nil
}

// encodeSteps returns steps as sortie_import takes them after a job's
// hash fields: per step its meta, result and children under the fields
// "\x01m:", "\x01r:" and "\x01c:" followed by its name (see
// sortie.lua's import_steps). A spawn step's pending count is the
// library's to count.
func encodeSteps(list []store.JobStep) []any {
	f := make([]any, 0, 6*len(list))
	for i, st := range list {
		until, n := "0", len(st.Children)
		switch st.Kind {
		case store.StepSleep:
			until = micros(st.Until)
		case store.StepRun:
			n = len(st.Result)
		}
		meta := strings.Join([]string{strconv.Itoa(i + 1), string(st.Kind), strconv.Itoa(st.Attempt), micros(st.RecordedAt),
			until, strconv.Itoa(n), "0"}, ",")
		f = append(f, "\x01m:"+st.Name, meta)
		switch st.Kind {
		case store.StepRun:
			f = append(f, "\x01r:"+st.Name, string(st.Result))
		case store.StepSpawn:
			ids := make([]string, len(st.Children))
			for k, c := range st.Children {
				ids[k] = idString(c)
			}
			f = append(f, "\x01c:"+st.Name, strings.Join(ids, ","))
		}
	}
	return f
}

// deletedRow decodes sortie_delete's reply: the job's hash as it was,
// then its steps' meta as fields "\x01m:<name>".
func deletedRow(id int64, v any) (*store.JobRow, error) {
	kv, err := stringList(v)
	if err != nil {
		return nil, err
	}
	meta := make(map[string]string)
	for i := 0; i+1 < len(kv); i += 2 {
		if name, ok := strings.CutPrefix(kv[i], "\x01m:"); ok {
			meta[name] = kv[i+1]
		}
	}
	r, err := decodeRow(id, kv)
	if err != nil || len(meta) == 0 {
		return r, err
	}
	r.Steps, err = decodeSteps(id, meta)
	return r, err
}
