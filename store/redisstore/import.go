package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/imported"
)

// importCallMax is the most jobs one call of sortie_import writes, so
// that a call holds the server for milliseconds, not seconds; JobImport
// splits bigger imports into calls of this size.
const importCallMax = 1000

// JobImport writes exported jobs as they were. See store.Store.
//
// Each job goes to the key group of its queue with the ID it had. An ID
// that gives another group (IDs from another store do, see locate.go) is
// recorded in P:fid, so that what starts from the ID finds the job.
//
// The jobs are written by calls of sortie_import of at most
// importCallMax jobs, each all or nothing; on a cluster each call holds
// the jobs of one key group (a function touches one slot), and a job
// linked to a job of another group (DependsOn, CancelledBy) is refused
// with ErrCrossGroup, as an enqueue is. So that the import as a whole is
// all or nothing, JobImport first raises the ID sequence past the
// imported IDs (no enqueue takes one from then on; a refused import may
// leave IDs unused, as a refused enqueue on a cluster does), then checks
// every job before any call writes: IDs present (imported.Same,
// read in one pipeline), unique keys held (in the store and earlier in
// the import). Only if nothing conflicts does it write P:fid and send the
// calls. Each call checks again, atomically, what may have changed in its
// slot since the check (the jobs' IDs, their unique keys). The window
// left: a concurrent enqueue that takes a unique key of an import split
// into several calls, after the check and before the call that holds the
// key. That call then writes nothing, JobImport reports the conflict,
// and the earlier calls' jobs stay written: the error says how many, and
// the same import run again reports them present and adds the rest. (A
// concurrent import of the same IDs into other groups is not detected on
// a cluster; on one server the call checks every place an ID can be.)
// An import of at most importCallMax jobs on one server, or of one key
// group on a cluster, is one call and has no window.
//
// Per-minute history, rate windows and queue settings are not written.
func (s *Store) JobImport(ctx context.Context, p *store.JobImportParams) ([]store.ImportResult, error) {
	if err := store.ImportValidate(p.Jobs); err != nil {
		return nil, err
	}
	res := make([]store.ImportResult, len(p.Jobs))
	if len(p.Jobs) == 0 {
		return res, nil
	}
	im := &importing{rows: p.Jobs, groups: make([]int64, len(p.Jobs)), fid: make(map[int64]int64)}
	for i, r := range p.Jobs {
		im.groups[i] = s.k.groupOf(r.Queue)
	}
	if s.cluster {
		if err := s.importLinks(ctx, im); err != nil {
			return nil, err
		}
	}
	if !p.DryRun {
		// IDs increase (ImportValidate): the last is the largest.
		last := p.Jobs[len(p.Jobs)-1].ID
		if _, err := s.fcall(ctx, "sortie_seq_raise", s.k.seq(), s.arg0, strconv.FormatInt(last, 10)); err != nil {
			return nil, err
		}
	}
	all := make([]int, len(p.Jobs))
	for i := range all {
		all[i] = i
	}
	conflict, err := s.importCheck(ctx, im, all, res)
	if err != nil {
		return nil, err
	}
	if conflict || p.DryRun {
		return res, nil
	}
	if err := s.importWrite(ctx, im, res, p.Now); err != nil {
		return nil, err
	}
	return res, nil
}

// importing is one JobImport's jobs and what it learnt of them.
type importing struct {
	rows []*store.JobRow
	// groups holds each job's key group: its queue's.
	groups []int64
	// fid holds what P:fid records of the jobs' IDs (importCheck).
	fid map[int64]int64
}

// uniqueKey is the hash of unique keys of group g: one per group on a
// cluster, one for the store on one server (see sortie.lua's ukey).
func (s *Store) uniqueKey(g int64) string {
	if s.cluster {
		return s.k.tag(g) + "u"
	}
	return s.k.prefix + ":u"
}

// storedFields are what imported.Same compares of a stored job,
// after its state, which says whether it exists.
var storedFields = []string{"st", "q", "k", "ca", "ra", "args"}

// storedJob returns the job an HMGET of storedFields read, or nil.
func storedJob(c *redis.SliceCmd) *store.JobRow {
	v := c.Val()
	if len(v) != len(storedFields) || v[0] == nil {
		return nil
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	r := &store.JobRow{Queue: str(1), Kind: str(2), CreatedAt: parseStored(str(3)), Args: []byte(str(5))}
	if v[3] == nil {
		r.CreatedAt = parseStored(str(4))
	}
	return r
}

// importCheck sets res for the jobs idx of im: present (the same job
// stored under its ID, wherever its ID and P:fid say it could be), ID
// taken (another job), unique key taken (held by a pending job of the
// store, or of an earlier job of idx), or added. It reports whether any
// conflicts.
func (s *Store) importCheck(ctx context.Context, im *importing, idx []int, res []store.ImportResult) (bool, error) {
	stored, holders, err := s.importLookup(ctx, im, idx)
	if err != nil {
		return false, err
	}
	type scoped struct {
		g   int64
		key string
	}
	keys := make(map[scoped]int64) // held by pending jobs of idx
	conflict := false
	for k, i := range idx {
		r := im.rows[i]
		res[i] = store.ImportResult{Status: store.ImportAdded}
		if stored[k] != nil {
			res[i].Status = store.ImportPresent
			if !imported.Same(stored[k], r) {
				res[i].Status, conflict = store.ImportIDTaken, true
			}
			continue
		}
		if r.UniqueKey == "" || !r.State.Pending() {
			continue
		}
		if h, ok := holders[k]; ok {
			res[i], conflict = store.ImportResult{Status: store.ImportUniqueTaken, Other: h}, true
			continue
		}
		sk := scoped{key: r.UniqueKey}
		if s.cluster {
			sk.g = im.groups[i]
		}
		if other, ok := keys[sk]; ok {
			res[i], conflict = store.ImportResult{Status: store.ImportUniqueTaken, Other: other}, true
			continue
		}
		keys[sk] = r.ID
	}
	return conflict, nil
}

// importLookup reads, for the jobs idx of im, the job stored under each
// ID (nil when none: looked for where the ID says, in the job's group,
// and where P:fid says, which it keeps in im.fid) and the holder of each
// pending job's unique key, by position in idx.
func (s *Store) importLookup(ctx context.Context, im *importing, idx []int) ([]*store.JobRow, map[int]int64, error) {
	pipe := s.rdb.Pipeline()
	natural := make([]*redis.SliceCmd, len(idx))
	home := make([]*redis.SliceCmd, len(idx))
	holder := make(map[int]*redis.StringCmd)
	ids := make([]int64, len(idx))
	for k, i := range idx {
		r := im.rows[i]
		ids[k] = r.ID
		natural[k] = pipe.HMGet(ctx, s.k.job(r.ID), storedFields...)
		if g := im.groups[i]; isNewID(r.ID) || g != naturalGroup(r.ID) {
			home[k] = pipe.HMGet(ctx, s.k.jobIn(r.ID, g), storedFields...)
		}
		if r.UniqueKey != "" && r.State.Pending() {
			holder[k] = pipe.HGet(ctx, s.uniqueKey(im.groups[i]), r.UniqueKey)
		}
	}
	fl := s.lookupFID(ctx, pipe, ids)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, nil, s.readError("check imported jobs", err)
	}
	for id, g := range fl.groups() {
		im.fid[id] = g
	}
	stored := make([]*store.JobRow, len(idx))
	pipe = s.rdb.Pipeline()
	elsewhere := make(map[int]*redis.SliceCmd)
	for k, i := range idx {
		if stored[k] = storedJob(natural[k]); stored[k] == nil && home[k] != nil {
			stored[k] = storedJob(home[k])
		}
		// A job imported before under a queue of a third group.
		if h, ok := im.fid[ids[k]]; ok && stored[k] == nil && !isNewID(ids[k]) && h != naturalGroup(ids[k]) && h != im.groups[i] {
			elsewhere[k] = pipe.HMGet(ctx, s.k.jobIn(ids[k], h), storedFields...)
		}
	}
	if len(elsewhere) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, nil, s.readError("check imported jobs", err)
		}
		for k, c := range elsewhere {
			stored[k] = storedJob(c)
		}
	}
	holders := make(map[int]int64)
	for k, c := range holder {
		if h, err := c.Result(); err == nil {
			holders[k], _ = strconv.ParseInt(h, 10, 64)
		}
	}
	return stored, holders, nil
}

// importLinks refuses, on a cluster, a job linked to a job of another key
// group: a dependency (its dependents set), the dependency that
// cancelled it (the set its retry revives) or its parent (whose spawn
// step counts it) must be in the job's slot. A
// link to a job the store does not hold is kept, as a deleted job's.
func (s *Store) importLinks(ctx context.Context, im *importing) error {
	at := make(map[int64]int, len(im.rows))
	for i, r := range im.rows {
		at[r.ID] = i
	}
	type link struct {
		i  int
		to int64
	}
	var outside []link
	var targets []int64
	seen := make(map[int64]bool)
	for i, r := range im.rows {
		to := r.DependsOn
		if r.CancelledBy != 0 {
			to = append(to[:len(to):len(to)], r.CancelledBy)
		}
		if r.ParentID != 0 {
			to = append(to[:len(to):len(to)], r.ParentID)
		}
		for _, d := range to {
			if j, ok := at[d]; ok {
				if im.groups[j] != im.groups[i] {
					return crossLink(r, d)
				}
				continue
			}
			outside = append(outside, link{i, d})
			if !seen[d] {
				seen[d] = true
				targets = append(targets, d)
			}
		}
	}
	if len(outside) == 0 {
		return nil
	}
	where, err := s.groupsOfStored(ctx, targets)
	if err != nil {
		return err
	}
	for _, l := range outside {
		if g, ok := where[l.to]; ok && g != im.groups[l.i] {
			return crossLink(im.rows[l.i], l.to)
		}
	}
	return nil
}

func crossLink(r *store.JobRow, to int64) error {
	what := "depends on"
	switch to {
	case r.CancelledBy:
		what = "was cancelled by"
	case r.ParentID:
		what = "was spawned by"
	}
	return fmt.Errorf("%w: imported job %d of queue %q %s job %d, of another group", ErrCrossGroup, r.ID, r.Queue, what, to)
}

// groupsOfStored returns the group of each of ids the store holds.
func (s *Store) groupsOfStored(ctx context.Context, ids []int64) (map[int64]int64, error) {
	var old, fresh []int64
	for _, id := range ids {
		if isNewID(id) {
			fresh = append(fresh, id)
		} else {
			old = append(old, id)
		}
	}
	where, err := s.jobGroups(ctx, fresh)
	if err != nil {
		return nil, err
	}
	ids = old
	pipe := s.rdb.Pipeline()
	exists := make([]*redis.IntCmd, len(ids))
	for k, id := range ids {
		exists[k] = pipe.Exists(ctx, s.k.job(id))
	}
	fl := s.lookupFID(ctx, pipe, ids)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("check imported links", err)
	}
	fg := fl.groups()
	pipe = s.rdb.Pipeline()
	moved := make(map[int64]*redis.IntCmd)
	for k, id := range ids {
		if exists[k].Val() == 1 {
			where[id] = naturalGroup(id)
		} else if h, ok := fg[id]; ok && h != naturalGroup(id) {
			moved[id] = pipe.Exists(ctx, s.k.jobIn(id, h))
		}
	}
	if len(moved) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, s.readError("check imported links", err)
		}
		for id, c := range moved {
			if c.Val() == 1 {
				where[id] = fg[id]
			}
		}
	}
	return where, nil
}

// importWrite writes the jobs res says are added: P:fid (and, on a
// cluster, the list of queues) first, then the calls of sortie_import. A
// call that finds a job taken since the check writes nothing: the jobs of
// its call are checked again (res), and if they conflict, importWrite
// returns nil when no call wrote anything (res says why) and an error
// saying how many jobs are written otherwise. If they do not (the same
// jobs, imported meanwhile, are present), the call goes again once
// without them.
func (s *Store) importWrite(ctx context.Context, im *importing, res []store.ImportResult, now time.Time) error {
	var added []int
	var maxToken int64
	fields := make(map[int][]any)
	for i, r := range im.rows {
		if res[i].Status != store.ImportAdded {
			continue
		}
		f, err := encodeRow(r)
		if err != nil {
			return fmt.Errorf("job %d: %w", r.ID, err)
		}
		fields[i] = append(f, encodeSteps(r.Steps)...)
		added = append(added, i)
		maxToken = max(maxToken, r.ClaimToken)
	}
	if len(added) == 0 {
		return nil
	}
	if err := s.importPrepare(ctx, im, added); err != nil {
		return err
	}
	written := 0
	for n, c := range s.importCalls(im, added) {
		for try := 0; len(c) > 0; try++ {
			if s.importHook != nil {
				s.importHook(n)
			}
			taken, err := s.importCall(ctx, im, c, fields, now, maxToken)
			switch {
			case err != nil && written == 0:
				return err
			case err != nil:
				return fmt.Errorf("redisstore: import stopped with %d of %d jobs written (importing the same jobs again adds the rest): %w", written, len(added), err)
			case !taken:
				written += len(c)
				c = nil
			case try > 0:
				return fmt.Errorf("redisstore: import stopped with %d of %d jobs written: jobs changed while importing; import the same jobs again", written, len(added))
			default:
				var stop bool
				if c, stop, err = s.importRefused(ctx, im, c, res, written, len(added)); stop || err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// importRefused checks again the jobs c of a call that found one taken
// since the check, and returns those still to add; or stop, with nil when
// nothing is written yet (res says why) and an error saying how many jobs
// are otherwise.
func (s *Store) importRefused(ctx context.Context, im *importing, c []int, res []store.ImportResult, written, total int) (still []int, stop bool, err error) {
	conflict, err := s.importCheck(ctx, im, c, res)
	if err != nil {
		return nil, true, err
	}
	for _, i := range c {
		switch {
		case res[i].Status == store.ImportAdded:
			still = append(still, i)
		case !res[i].Status.Conflict() || written == 0:
		default:
			return nil, true, fmt.Errorf("redisstore: import stopped with %d of %d jobs written: job %d is %s since the check; import the same jobs again (those written are present)", written, total, im.rows[i].ID, res[i].Status)
		}
	}
	return still, conflict, nil
}

// importPrepare writes, before the jobs, P:fid for those whose ID gives
// another group than their queue's (and forgets stale entries of the
// others, left by a job imported and deleted before), and on a cluster
// lists their queues in P:queues.
func (s *Store) importPrepare(ctx context.Context, im *importing, added []int) error {
	var set []any
	var stale []string
	var queues []any
	listing := make(map[string]bool)
	for _, i := range added {
		id, q := im.rows[i].ID, im.rows[i].Queue
		if g := im.groups[i]; !isNewID(id) && g != naturalGroup(id) {
			set = append(set, idString(id), group(g))
		} else if _, ok := im.fid[id]; ok {
			stale = append(stale, idString(id))
		}
		if _, ok := s.listed.Load(q); s.cluster && !ok && !listing[q] {
			listing[q] = true
			queues = append(queues, q)
		}
	}
	if len(set) == 0 && len(stale) == 0 && len(queues) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for from := 0; from < len(set); from += 2 * fidChunk {
		pipe.HSet(ctx, s.k.fid(), set[from:min(from+2*fidChunk, len(set))]...)
	}
	if len(stale) > 0 {
		pipe.HDel(ctx, s.k.fid(), stale...)
	}
	if len(queues) > 0 {
		pipe.SAdd(ctx, s.k.queues(), queues...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return s.readError("prepare the import", err)
	}
	for q := range listing {
		s.listed.Store(q, struct{}{})
	}
	return nil
}

// importCalls splits the added jobs into calls of sortie_import: at most
// importCallMax jobs each, in ID order, of one key group on a cluster.
func (s *Store) importCalls(im *importing, added []int) [][]int {
	parts := [][]int{added}
	if s.cluster {
		parts = byGroup(len(added), func(k int) int64 { return im.groups[added[k]] })
		for _, p := range parts {
			for k := range p {
				p[k] = added[p[k]]
			}
		}
	}
	var calls [][]int
	for _, p := range parts {
		for len(p) > importCallMax {
			calls = append(calls, p[:importCallMax])
			p = p[importCallMax:]
		}
		calls = append(calls, p)
	}
	return calls
}

// importCall writes jobs c in one call of sortie_import, or reports that
// one of them is taken and nothing was written.
func (s *Store) importCall(ctx context.Context, im *importing, c []int, fields map[int][]any, now time.Time, maxToken int64) (taken bool, err error) {
	n := 5
	for _, i := range c {
		n += 3 + len(fields[i])
	}
	args := make([]any, 0, n)
	args = append(args, s.arg0, micros(now), strconv.FormatInt(maxToken, 10), strconv.Itoa(len(c)))
	for _, i := range c {
		args = append(args, idString(im.rows[i].ID), group(im.groups[i]), strconv.Itoa(len(fields[i])/2))
		args = append(args, fields[i]...)
	}
	v, err := s.fcall(ctx, "sortie_import", s.k.token(im.groups[c[0]]), args...)
	if err != nil {
		return false, err
	}
	if code, _, ok := libError(v); ok {
		if code == "conflict" {
			return true, nil
		}
		return false, fmt.Errorf("%w: import: unknown refusal %q", errLibrary, code)
	}
	return false, nil
}
