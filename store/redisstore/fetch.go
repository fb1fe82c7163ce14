package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
)

// claimRowsFew is the most jobs a claim of sortie_claim returns with
// their hashes (the library's ROWS_FEW).
const claimRowsFew = 4

// JobFetch claims up to p.Limit jobs of p.Queue in one call of
// sortie_claim, which also issues their claim tokens and returns up to
// claimRowsFew claimed jobs (a worker woken for a new job starts it after
// one round trip), and reads more claimed jobs in one pipeline; or, far
// from the server (Options.ClaimRows), in one call of sortie_fetch_rows,
// whose reply carries every job. See store.Store.
func (s *Store) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	if err := store.ValidateLimit("JobFetchParams", p.Limit); err != nil {
		return nil, err
	}
	now := time.UnixMicro(p.Now.UnixMicro()).UTC()
	until := now.Add(time.Duration(p.Lease.Microseconds()) * time.Microsecond)
	args := make([]any, 0, 7+len(p.Kinds))
	args = append(args, s.arg0, p.Queue, group(s.k.groupOf(p.Queue)), micros(now), micros(until), p.Worker, strconv.Itoa(p.Limit))
	for _, k := range p.Kinds {
		args = append(args, k)
	}
	fn := "sortie_claim"
	if s.claimRows {
		fn = "sortie_fetch_rows"
	}
	v, err := s.fcall(ctx, fn, s.k.queue(p.Queue)+"h", args...)
	if err != nil {
		return nil, err
	}
	flag := "1"
	if !s.claimRows {
		if v, flag, err = splitRowsFlag(v); err != nil {
			return nil, err
		}
	}
	return s.claimedJobs(ctx, p.Queue, v, flag == "1")
}

// claimedJobs reads the jobs of a claim's reply v (sortie_fetch's, or
// sortie_fetch_rows's when withRows) and returns them as JobFetch does.
func (s *Store) claimedJobs(ctx context.Context, queue string, v any, withRows bool) (*store.JobFetchResult, error) {
	var (
		hashes []any
		err    error
	)
	if withRows {
		if v, hashes, err = splitClaimRows(v); err != nil {
			return nil, err
		}
	}
	list, err := stringList(v)
	if err != nil || len(list)%2 != 1 {
		return nil, fmt.Errorf("redisstore: fetch: unexpected reply %v", v)
	}
	res := &store.JobFetchResult{NextAt: parseMicros(list[0])}
	ids := make([]int64, 0, len(list)/2)
	toks := make([]int64, 0, len(list)/2)
	for i := 1; i+1 < len(list); i += 2 {
		id, err1 := strconv.ParseInt(list[i], 10, 64)
		tok, err2 := strconv.ParseInt(list[i+1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("redisstore: fetch: bad job ID or token %q %q", list[i], list[i+1])
		}
		ids, toks = append(ids, id), append(toks, tok)
	}
	if len(ids) == 0 {
		return res, nil
	}
	// The jobs are claimed: read them. Only their worker (this caller), a
	// cancel request or, after the lease, a rescue can change them now.
	// They are the queue's: in its group, whatever their IDs say.
	var rows []*store.JobRow
	if withRows {
		rows, err = decodeHashes(ids, hashes)
	} else {
		g := s.k.groupOf(queue)
		rows, err = s.readRows(ctx, ids, func(int64) int64 { return g })
	}
	if err != nil {
		return nil, err
	}
	if len(rows) != len(ids) {
		return nil, fmt.Errorf("redisstore: fetch: %d of %d claimed jobs could not be read", len(ids)-len(rows), len(ids))
	}
	for i, r := range rows {
		s.remember(r.ID, s.k.groupOf(queue))
		// This claim's token, whatever happened since (a lease shorter than
		// the read could have been rescued and claimed again: fencing then
		// refuses this worker's outcome).
		r.ClaimToken = toks[i]
	}
	res.Jobs = rows
	return res, nil
}

// splitRowsFlag takes the flag out of sortie_claim's reply, which then
// reads as sortie_fetch's, or with rows (flag "1") as sortie_fetch_rows's.
func splitRowsFlag(v any) (rest any, flag string, err error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return nil, "", fmt.Errorf("redisstore: fetch: unexpected reply %v", v)
	}
	flag, _ = arr[1].(string)
	out := make([]any, 0, len(arr)-1)
	out = append(out, arr[0])
	return append(out, arr[2:]...), flag, nil
}

// splitClaimRows splits sortie_fetch_rows's reply into sortie_fetch's
// part (NextAt, then an ID and a token per job) and the jobs' hashes.
func splitClaimRows(v any) (head []any, hashes []any, err error) {
	arr, ok := v.([]any)
	if !ok || len(arr)%3 != 1 {
		return nil, nil, fmt.Errorf("redisstore: fetch: unexpected reply %v", v)
	}
	n := (len(arr) - 1) / 3
	return arr[:1+2*n], arr[1+2*n:], nil
}

// decodeHashes decodes the jobs of ids from their hashes, each a list of
// fields and values as HGETALL gives them in the library.
func decodeHashes(ids []int64, hashes []any) ([]*store.JobRow, error) {
	rows := make([]*store.JobRow, 0, len(ids))
	for i, h := range hashes {
		fv, err := stringList(h)
		if err != nil || len(fv)%2 != 0 {
			return nil, fmt.Errorf("redisstore: fetch: job %d: unexpected fields %v", ids[i], h)
		}
		if len(fv) == 0 {
			continue
		}
		r, err := decodeRow(ids[i], fv)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// JobFinish applies the reports in sortie_complete (completions) and
// sortie_finish (the others, and completions sent again after a failed
// call), which check each claim token on the server. Reports are sent in
// one call per key group and function (one call for a batch of one
// queue's completions); those refused for want of their job are sent
// again to the group P:fid records (an imported job, see locate.go). See
// store.Store.
func (s *Store) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	if err := store.ValidateReports(p.Reports); err != nil {
		return nil, err
	}
	out := make([]store.ReportResult, len(p.Reports))
	now := micros(p.Now)
	id := func(i int) int64 { return p.Reports[i].ID }
	send := func(idx []int, g int64) (refused []int, err error) {
		completions, others := s.splitCompletions(p.Reports, idx)
		if len(completions) > 0 {
			if refused, err = s.sendCompletions(ctx, p.Reports, completions, g, now, out); err != nil {
				return nil, err
			}
		}
		if len(others) == 0 {
			return refused, nil
		}
		r, err := s.sendReports(ctx, p.Reports, others, g, now, out)
		return append(refused, r...), err
	}
	if err := s.sendByGroup(ctx, len(p.Reports), id, send); err != nil {
		return nil, err
	}
	return out, nil
}

// splitCompletions splits the reports idx into completions that
// sortie_complete takes and the others (a completion sent again after a
// failed call goes to sortie_finish, which knows an outcome applied
// before).
func (s *Store) splitCompletions(rs []*store.Report, idx []int) (completions, others []int) {
	for _, i := range idx {
		if rs[i].Kind == store.ReportCompleted && !s.resent.has(rs[i]) {
			completions = append(completions, i)
		} else {
			others = append(others, i)
		}
	}
	return completions, others
}

// sendCompletions sends completions idx of jobs of group g in one call of
// sortie_complete, setting their results in out, and returns those
// refused.
func (s *Store) sendCompletions(ctx context.Context, rs []*store.Report, idx []int, g int64, now string, out []store.ReportResult) ([]int, error) {
	args := make([]any, 0, 3+len(idx)*4)
	args = append(args, s.arg0, now, strconv.Itoa(len(idx)))
	gs := group(g)
	for _, i := range idx {
		result := ""
		if rs[i].Result != nil {
			result = "1" + string(rs[i].Result)
		}
		args = append(args, idString(rs[i].ID), gs, strconv.FormatInt(rs[i].ClaimToken, 10), result)
	}
	return s.finishCall(ctx, "sortie_complete", rs, idx, g, args, out)
}

// sendReports sends reports idx of jobs of group g in one call of
// sortie_finish (sortie_release when all release their jobs), setting
// their results in out, and returns those refused.
func (s *Store) sendReports(ctx context.Context, rs []*store.Report, idx []int, g int64, now string, out []store.ReportResult) ([]int, error) {
	args := make([]any, 0, 3+len(idx)*reportFields)
	args = append(args, s.arg0, now, strconv.Itoa(len(idx)))
	for _, i := range idx {
		args = appendReport(args, rs[i], g, s.resent.has(rs[i]))
	}
	fn := "sortie_finish_u"
	if allReleased(rs, idx) {
		// Releases run under OOM: a stopping worker can put its jobs back
		// on a full server.
		fn = "sortie_release_u"
	}
	return s.finishCall(ctx, fn, rs, idx, g, args, out)
}

// finishCall calls fn, a function that returns a state per report (”:
// refused), and sets the results of reports idx in out.
func (s *Store) finishCall(ctx context.Context, fn string, rs []*store.Report, idx []int, g int64, args []any, out []store.ReportResult) (refused []int, err error) {
	v, err := s.fcall(ctx, fn, s.k.jobIn(rs[idx[0]].ID, g), args...)
	if err != nil {
		// The reports may have been applied, and their reply lost: when
		// they come again, they say so.
		s.resent.add(rs, idx)
		return nil, err
	}
	s.resent.forget(rs, idx)
	states, err := stringList(v)
	if err != nil || len(states) != len(idx) {
		return nil, fmt.Errorf("redisstore: finish: unexpected reply %v", v)
	}
	for k, i := range idx {
		if states[k] != "" {
			out[i] = store.ReportResult{Applied: true, State: store.JobState(states[k])}
		} else {
			refused = append(refused, i)
		}
	}
	return refused, nil
}

// allReleased reports whether the reports idx all release their jobs.
func allReleased(rs []*store.Report, idx []int) bool {
	for _, i := range idx {
		if rs[i].Kind != store.ReportReleased {
			return false
		}
	}
	return true
}

// reportFields is the number of sortie_finish_u's arguments per report
// (REPORT_FIELDS_U in sortie.lua; sortie_finish, which version 10's
// processes call, takes the first 12).
const reportFields = 13

// appendReport encodes one report, of a job in group g, as sortie_finish's
// arguments.
func appendReport(args []any, r *store.Report, g int64, resent bool) []any {
	hasErr, attempt, at, msg, stack := "0", "0", "0", "", ""
	if e := r.Error; e != nil {
		hasErr, attempt, at, msg, stack = "1", strconv.Itoa(e.Attempt), micros(e.At), e.Message, e.Stack
	}
	result := ""
	if r.Result != nil {
		result = "1" + string(r.Result)
	}
	again, unstarted := "0", "0"
	if resent {
		again = "1"
	}
	if r.Unstarted {
		unstarted = "1"
	}
	return append(args, idString(r.ID), group(g), strconv.FormatInt(r.ClaimToken, 10),
		strconv.Itoa(int(r.Kind)), micros(r.RunAt), hasErr, attempt, at, msg, stack, result, again, unstarted)
}

// resentMax bounds the reports a store remembers as possibly applied;
// past it they are forgotten all at once.
const resentMax = 1 << 16

// resentReports are the claims whose reports were in a sortie_finish call
// that failed: it may have applied them and lost its reply. Sent again,
// such a report whose outcome the store holds gets its result instead of
// a refusal (see sortie.lua's finish); a report sent twice otherwise is
// refused, as the store contract says.
type resentReports struct {
	mu sync.Mutex
	m  map[store.LeaseRef]struct{}
}

func (r *resentReports) add(rs []*store.Report, idx []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m)+len(idx) > resentMax {
		r.m = make(map[store.LeaseRef]struct{})
	}
	for _, i := range idx {
		r.m[store.LeaseRef{ID: rs[i].ID, ClaimToken: rs[i].ClaimToken}] = struct{}{}
	}
}

func (r *resentReports) has(rep *store.Report) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[store.LeaseRef{ID: rep.ID, ClaimToken: rep.ClaimToken}]
	return ok
}

func (r *resentReports) forget(rs []*store.Report, idx []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) == 0 {
		return
	}
	for _, i := range idx {
		delete(r.m, store.LeaseRef{ID: rs[i].ID, ClaimToken: rs[i].ClaimToken})
	}
}

// byGroup returns the indexes 0..n-1 grouped by groupOf(i), each group in
// index order, groups in order of first appearance.
func byGroup(n int, groupOf func(int) int64) [][]int {
	if n == 0 {
		return nil
	}
	g0 := groupOf(0)
	same := true
	for i := 1; i < n && same; i++ {
		same = groupOf(i) == g0
	}
	if same {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	var out [][]int
	at := make(map[int64]int)
	for i := range n {
		g := groupOf(i)
		k, ok := at[g]
		if !ok {
			k = len(out)
			at[g] = k
			out = append(out, nil)
		}
		out[k] = append(out[k], i)
	}
	return out
}

// LeaseExtend extends leases in sortie_extend, which checks each claim
// token on the server, one call per key group; leases refused for want of
// their job are sent again to the group P:fid records, as in JobFinish.
// See store.Store.
func (s *Store) LeaseExtend(ctx context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error) {
	out := make([]store.LeaseStatus, len(p.Leases))
	now := time.UnixMicro(p.Now.UnixMicro())
	until := micros(now.Add(time.Duration(p.Lease.Microseconds()) * time.Microsecond))
	id := func(i int) int64 { return p.Leases[i].ID }
	send := func(idx []int, g int64) (refused []int, err error) {
		args := make([]any, 0, 3+len(idx)*5)
		args = append(args, s.arg0, until, strconv.Itoa(len(idx)))
		for _, i := range idx {
			ref := p.Leases[i]
			has, pr := "0", ""
			if v, ok := p.Progress[ref]; ok {
				has, pr = "1", strconv.FormatFloat(v, 'g', -1, 64)
			}
			args = append(args, idString(ref.ID), group(g), strconv.FormatInt(ref.ClaimToken, 10), has, pr)
		}
		v, err := s.fcall(ctx, "sortie_extend", s.k.jobIn(id(idx[0]), g), args...)
		if err != nil {
			return nil, err
		}
		arr, ok := v.([]any)
		if !ok || len(arr) != len(idx) {
			return nil, fmt.Errorf("redisstore: extend: unexpected reply %v", v)
		}
		for k, i := range idx {
			n, _ := arr[k].(int64)
			out[i] = store.LeaseStatus{Held: n > 0, CancelRequested: n == 2}
			if n == 0 {
				refused = append(refused, i)
			}
		}
		return refused, nil
	}
	if err := s.sendByGroup(ctx, len(p.Leases), id, send); err != nil {
		return nil, err
	}
	return out, nil
}

// JobRescue takes back expired leases queue by queue, each in one call of
// sortie_rescue; one pipeline first finds the queues that have any. See
// store.Store.
func (s *Store) JobRescue(ctx context.Context, p *store.JobRescueParams) (int, error) {
	if err := store.ValidateLimit("JobRescueParams", p.Limit); err != nil {
		return 0, err
	}
	queues, err := s.queuesWith(ctx, func(q string) (string, string) { return s.k.queue(q) + "r", "(" + micros(p.Now) })
	if err != nil {
		return 0, err
	}
	total := 0
	for _, q := range queues {
		if total >= p.Limit {
			break
		}
		v, err := s.fcall(ctx, "sortie_rescue", s.k.queue(q)+"r", s.arg0, q,
			group(s.k.groupOf(q)), micros(p.Now), strconv.Itoa(p.Limit-total))
		if err != nil {
			return total, err
		}
		n, _ := v.(int64)
		total += int(n)
	}
	return total, nil
}

// queuesWith returns the queues whose sorted set key(q) has a member
// scored below max(q) (a ZCOUNT bound), read in one pipeline.
func (s *Store) queuesWith(ctx context.Context, key func(q string) (string, string)) ([]string, error) {
	names, err := s.queueNames(ctx)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(names))
	for i, q := range names {
		k, max := key(q)
		cmds[i] = pipe.ZCount(ctx, k, "-inf", max)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("find queues", err)
	}
	out := names[:0]
	for i, q := range names {
		if cmds[i].Val() > 0 {
			out = append(out, q)
		}
	}
	return out, nil
}
