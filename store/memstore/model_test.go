package memstore_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/fetchplan"
)

// model is a deliberately naive Store: every operation scans all jobs. The
// random test below runs the same operations on it and on memstore and
// compares every answer, which exercises memstore's lanes, lazy deletion,
// chunked index and lease heap against a plainly correct implementation.
type model struct {
	jobs   map[int64]*store.JobRow
	nextID int64
	token  int64
}

func newModel() *model { return &model{jobs: map[int64]*store.JobRow{}, nextID: 1} }

func clone(r *store.JobRow) *store.JobRow {
	c := *r
	c.Args = slices.Clone(r.Args)
	c.Meta = slices.Clone(r.Meta)
	c.Tags = slices.Clone(r.Tags)
	c.Errors = slices.Clone(r.Errors)
	c.Result = slices.Clone(r.Result)
	return &c
}

func (m *model) sorted() []*store.JobRow {
	out := make([]*store.JobRow, 0, len(m.jobs))
	for _, r := range m.jobs {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *store.JobRow) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func (m *model) holder(key string) *store.JobRow {
	if key == "" {
		return nil
	}
	for _, r := range m.jobs {
		if r.UniqueKey == key && r.State.Pending() {
			return r
		}
	}
	return nil
}

func (m *model) enqueue(jobs []*store.NewJob, now time.Time) []store.EnqueueResult {
	var res []store.EnqueueResult
	for _, nj := range jobs {
		if h := m.holder(nj.UniqueKey); h != nil {
			res = append(res, store.EnqueueResult{ID: h.ID, Duplicate: true, State: h.State})
			continue
		}
		r := &store.JobRow{
			ID: m.nextID, Kind: nj.Kind, Queue: nj.Queue, Args: slices.Clone(nj.Args), Priority: nj.Priority,
			MaxAttempts: nj.MaxAttempts, RunAt: nj.RunAt, CreatedAt: now, UniqueKey: nj.UniqueKey,
			Tags: slices.Clone(nj.Tags), Meta: slices.Clone(nj.Meta), Timeout: nj.Timeout, State: store.JobStateAvailable,
		}
		m.nextID++
		if r.RunAt.IsZero() {
			r.RunAt = now
		} else if r.RunAt.After(now) {
			r.State = store.JobStateScheduled
		}
		m.jobs[r.ID] = r
		res = append(res, store.EnqueueResult{ID: r.ID, State: r.State})
	}
	return res
}

func (m *model) fetch(p *store.JobFetchParams) []*store.JobRow {
	var cands []*store.JobRow
	for _, r := range m.jobs {
		due := r.State == store.JobStateAvailable ||
			((r.State == store.JobStateScheduled || r.State == store.JobStateRetrying) && !r.RunAt.After(p.Now))
		if r.Queue == p.Queue && due && (len(p.Kinds) == 0 || slices.Contains(p.Kinds, r.Kind)) {
			cands = append(cands, r)
		}
	}
	slices.SortFunc(cands, func(a, b *store.JobRow) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), a.RunAt.Compare(b.RunAt), cmp.Compare(a.ID, b.ID))
	})
	out := []*store.JobRow{}
	for _, r := range cands[:min(len(cands), p.Limit)] {
		m.token++
		r.State, r.Attempt, r.AttemptedAt, r.AttemptedBy = store.JobStateRunning, r.Attempt+1, fetchplan.AttemptedAt(p.Now, r), p.Worker
		r.LeaseUntil, r.ClaimToken = p.Now.Add(p.Lease), m.token
		out = append(out, clone(r))
	}
	return out
}

func addError(r *store.JobRow, e store.AttemptError, now time.Time) {
	if e.Attempt == 0 {
		e.Attempt = r.Attempt
	}
	if e.At.IsZero() {
		e.At = now
	}
	r.Errors = append(slices.Clone(r.Errors), e)
}

func (m *model) finish(p *store.JobFinishParams) []store.ReportResult {
	var res []store.ReportResult
	for _, o := range p.Reports {
		r := m.jobs[o.ID]
		if r == nil || r.State != store.JobStateRunning || r.ClaimToken != o.ClaimToken {
			res = append(res, store.ReportResult{})
			continue
		}
		r.LeaseUntil, r.CancelRequested = time.Time{}, false
		switch o.Kind {
		case store.ReportCompleted:
			r.State, r.FinalizedAt = store.JobStateCompleted, p.Now
			r.Result = slices.Clone(o.Result)
		case store.ReportFailed:
			e := store.AttemptError{Message: store.NoErrorMessage}
			if o.Error != nil {
				e = *o.Error
			}
			addError(r, e, p.Now)
			if r.Attempt >= r.MaxAttempts {
				r.State, r.FinalizedAt = store.JobStateDead, p.Now
			} else {
				r.State, r.RunAt = store.JobStateRetrying, cmp.Or(o.RunAt, p.Now)
			}
		case store.ReportCancelled:
			if o.Error != nil {
				addError(r, *o.Error, p.Now)
			}
			r.State, r.FinalizedAt = store.JobStateCancelled, p.Now
		case store.ReportSnoozed:
			r.Attempt--
			r.RunAt = cmp.Or(o.RunAt, p.Now)
			r.State = store.JobStateAvailable
			if r.RunAt.After(p.Now) {
				r.State = store.JobStateScheduled
			}
		case store.ReportReleased:
			r.Attempt--
			r.State = store.JobStateAvailable
		}
		res = append(res, store.ReportResult{Applied: true, State: r.State})
	}
	return res
}

func (m *model) rescue(p *store.JobRescueParams) int {
	var exp []*store.JobRow
	for _, r := range m.jobs {
		if r.State == store.JobStateRunning && r.LeaseUntil.Before(p.Now) {
			exp = append(exp, r)
		}
	}
	slices.SortFunc(exp, func(a, b *store.JobRow) int {
		return cmp.Or(a.LeaseUntil.Compare(b.LeaseUntil), cmp.Compare(a.ID, b.ID))
	})
	exp = exp[:min(len(exp), p.Limit)]
	for _, r := range exp {
		cancelled := r.CancelRequested
		r.LeaseUntil, r.CancelRequested = time.Time{}, false
		addError(r, store.AttemptError{Message: store.LeaseLostMessage}, p.Now)
		switch {
		case cancelled:
			r.State, r.FinalizedAt = store.JobStateCancelled, p.Now
		case r.Attempt >= r.MaxAttempts:
			r.State, r.FinalizedAt = store.JobStateDead, p.Now
		default:
			r.State = store.JobStateAvailable
		}
	}
	return len(exp)
}

func (m *model) extend(p *store.LeaseExtendParams) []store.LeaseStatus {
	var out []store.LeaseStatus
	for _, l := range p.Leases {
		r := m.jobs[l.ID]
		var ls store.LeaseStatus
		if r != nil && r.State == store.JobStateRunning && r.ClaimToken == l.ClaimToken {
			r.LeaseUntil = p.Now.Add(p.Lease)
			ls = store.LeaseStatus{Held: true, CancelRequested: r.CancelRequested}
		}
		out = append(out, ls)
	}
	return out
}

func (m *model) cancel(id int64, now time.Time) (*store.JobRow, error) {
	r := m.jobs[id]
	switch {
	case r == nil:
		return nil, store.ErrNotFound
	case r.State == store.JobStateRunning:
		r.CancelRequested = true
	case r.State.Pending():
		r.State, r.FinalizedAt = store.JobStateCancelled, now
	}
	return clone(r), nil
}

func (m *model) delete(id int64) (*store.JobRow, error) {
	r := m.jobs[id]
	switch {
	case r == nil:
		return nil, store.ErrNotFound
	case r.State == store.JobStateRunning:
		return nil, store.ErrJobRunning
	}
	delete(m.jobs, id)
	return r, nil
}

func (m *model) retry(id int64, now time.Time) (*store.JobRow, error) {
	r := m.jobs[id]
	switch {
	case r == nil:
		return nil, store.ErrNotFound
	case r.State == store.JobStateRunning:
		return nil, store.ErrJobRunning
	case r.State == store.JobStateAvailable:
		return clone(r), nil
	case r.State.Finished() && m.holder(r.UniqueKey) != nil:
		return nil, store.ErrUniqueConflict
	}
	if r.Attempt >= r.MaxAttempts {
		r.MaxAttempts = r.Attempt + 1
	}
	r.State, r.RunAt, r.FinalizedAt = store.JobStateAvailable, now, time.Time{}
	return clone(r), nil
}

func (m *model) prune(p *store.JobPruneParams) int {
	n := 0
	for i, st := range []store.JobState{store.JobStateCompleted, store.JobStateCancelled, store.JobStateDead} {
		cut := []time.Time{p.CompletedBefore, p.CancelledBefore, p.DeadBefore}[i]
		if cut.IsZero() {
			continue
		}
		var del []*store.JobRow
		for _, r := range m.jobs {
			if r.State == st && r.FinalizedAt.Before(cut) {
				del = append(del, r)
			}
		}
		slices.SortFunc(del, func(a, b *store.JobRow) int {
			return cmp.Or(a.FinalizedAt.Compare(b.FinalizedAt), cmp.Compare(a.ID, b.ID))
		})
		for _, r := range del[:min(len(del), p.Limit-n)] {
			delete(m.jobs, r.ID)
			n++
		}
	}
	return n
}

func (m *model) list(p *store.JobListParams) []*store.JobRow {
	all := m.sorted()
	if p.Desc {
		slices.Reverse(all)
	}
	out := []*store.JobRow{}
	for _, r := range all {
		if len(out) == p.Limit {
			break
		}
		if p.AfterID > 0 && (!p.Desc && r.ID <= p.AfterID || p.Desc && r.ID >= p.AfterID) {
			continue
		}
		if (p.Queue == "" || r.Queue == p.Queue) && (p.State == "" || r.State == p.State) && (p.Kind == "" || r.Kind == p.Kind) {
			out = append(out, clone(r))
		}
	}
	return out
}

func (m *model) counts() []store.QueueStateCount {
	c := map[string]map[store.JobState]int64{}
	for _, r := range m.jobs {
		if c[r.Queue] == nil {
			c[r.Queue] = map[store.JobState]int64{}
		}
		c[r.Queue][r.State]++
	}
	out := []store.QueueStateCount{}
	for _, q := range slices.Sorted(func(yield func(string) bool) {
		for q := range c {
			if !yield(q) {
				return
			}
		}
	}) {
		for _, st := range store.JobStates {
			if n := c[q][st]; n > 0 {
				out = append(out, store.QueueStateCount{Queue: q, State: st, Count: n})
			}
		}
	}
	return out
}

func (m *model) nextRunAt(queue string) time.Time {
	var best time.Time
	for _, r := range m.jobs {
		if r.Queue == queue && (r.State == store.JobStateScheduled || r.State == store.JobStateRetrying) &&
			(best.IsZero() || r.RunAt.Before(best)) {
			best = r.RunAt
		}
	}
	return best
}

// TestAgainstModel runs random operations on memstore and the model and
// compares every answer and, regularly, every row.
func TestAgainstModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed, 3000)
		})
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 42))
	st := newStore(t)
	m := newModel()
	now := t0
	queues := []string{"q", "r"}
	kinds := []string{"a", "b", "c", "d"}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	dur := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * 100 * time.Millisecond }
	check := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %s:\n got %+v\nwant %+v", what, got, want)
		}
	}
	checkErr := func(what string, got, want error) {
		t.Helper()
		if (got == nil) != (want == nil) || (want != nil && !errors.Is(got, want)) {
			t.Fatalf("step %s: error %v, want %v", what, got, want)
		}
	}
	var claims []store.LeaseRef // claims handed out, some stale
	randID := func() int64 { return 1 + rng.Int64N(m.nextID) }

	for step := range steps {
		now = now.Add(dur(-2, 10)) // mostly forward, sometimes back
		name := fmt.Sprint(step)
		switch op := rng.IntN(100); {
		case op < 25:
			var jobs []*store.NewJob
			for range 1 + rng.IntN(8) {
				nj := &store.NewJob{Kind: pick(kinds), Queue: pick(queues), Priority: rng.IntN(5), MaxAttempts: rng.IntN(4)}
				if rng.IntN(3) == 0 {
					nj.RunAt = now.Add(dur(-50, 100))
				}
				if rng.IntN(3) == 0 {
					nj.UniqueKey = fmt.Sprint("u", rng.IntN(20))
				}
				if rng.IntN(2) == 0 {
					nj.Args = fmt.Appendf(nil, `{"n":%d}`, rng.IntN(100))
					nj.Tags = []string{"t"}
				}
				jobs = append(jobs, nj)
			}
			got, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now})
			checkErr(name+" enqueue", err, nil)
			check(name+" enqueue", got, m.enqueue(jobs, now))
		case op < 45:
			p := &store.JobFetchParams{Queue: pick(queues), Limit: 1 + rng.IntN(6), Now: now, Lease: dur(1, 60), Worker: "w"}
			if rng.IntN(3) == 0 {
				p.Kinds = []string{pick(kinds), pick(kinds)}
			}
			got, err := store.FetchedJobs(st.JobFetch(ctx, p))
			checkErr(name+" fetch", err, nil)
			want := m.fetch(p)
			check(name+" fetch", got, want)
			for _, r := range got {
				claims = append(claims, store.LeaseRef{ID: r.ID, ClaimToken: r.ClaimToken})
			}
		case op < 65 && len(claims) > 0:
			var outs []*store.Report
			for range 1 + rng.IntN(4) {
				i := rng.IntN(len(claims))
				c := claims[i]
				claims = slices.Delete(claims, i, i+1)
				o := &store.Report{ID: c.ID, ClaimToken: c.ClaimToken, Kind: store.ReportKind(1 + rng.IntN(5))}
				if rng.IntN(2) == 0 {
					o.Error = &store.AttemptError{Message: "e", Attempt: rng.IntN(2)}
				}
				if rng.IntN(2) == 0 {
					o.RunAt = now.Add(dur(-20, 50))
				}
				if o.Kind == store.ReportCompleted && rng.IntN(2) == 0 {
					o.Result = fmt.Appendf(nil, `{"r":%d}`, rng.IntN(9))
				}
				outs = append(outs, o)
				if len(claims) == 0 {
					break
				}
			}
			got, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: outs, Now: now})
			checkErr(name+" finish", err, nil)
			check(name+" finish", got, m.finish(&store.JobFinishParams{Reports: outs, Now: now}))
		case op < 70:
			p := &store.JobRescueParams{Now: now, Limit: 1 + rng.IntN(4)}
			got, err := st.JobRescue(ctx, p)
			checkErr(name+" rescue", err, nil)
			check(name+" rescue", got, m.rescue(p))
		case op < 75 && len(claims) > 0:
			p := &store.LeaseExtendParams{Now: now, Lease: dur(1, 60)}
			for range 1 + rng.IntN(3) {
				p.Leases = append(p.Leases, claims[rng.IntN(len(claims))])
			}
			got, err := st.LeaseExtend(ctx, p)
			checkErr(name+" extend", err, nil)
			check(name+" extend", got, m.extend(p))
		case op < 79:
			id := randID()
			got, err := st.JobCancel(ctx, &store.JobCancelParams{ID: id, Now: now})
			want, werr := m.cancel(id, now)
			checkErr(name+" cancel", err, werr)
			check(name+" cancel", got, want)
		case op < 82:
			id := randID()
			got, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: id})
			want, werr := m.delete(id)
			checkErr(name+" delete", err, werr)
			check(name+" delete", got, want)
		case op < 87:
			id := randID()
			got, err := st.JobRetry(ctx, &store.JobRetryParams{ID: id, Now: now})
			want, werr := m.retry(id, now)
			checkErr(name+" retry", err, werr)
			check(name+" retry", got, want)
		case op < 89:
			p := &store.JobPruneParams{Limit: 1 + rng.IntN(5)}
			if rng.IntN(2) == 0 {
				p.CompletedBefore = now.Add(dur(-50, 0))
			}
			if rng.IntN(2) == 0 {
				p.CancelledBefore = now.Add(dur(-50, 0))
			}
			if rng.IntN(2) == 0 {
				p.DeadBefore = now.Add(dur(-50, 0))
			}
			got, err := st.JobPrune(ctx, p)
			checkErr(name+" prune", err, nil)
			check(name+" prune", got, m.prune(p))
		case op < 94:
			p := &store.JobListParams{Limit: 1 + rng.IntN(10), Desc: rng.IntN(2) == 0}
			if rng.IntN(2) == 0 {
				p.AfterID = randID()
			}
			if rng.IntN(2) == 0 {
				p.Queue = pick(queues)
			}
			if rng.IntN(2) == 0 {
				p.State = store.JobStates[rng.IntN(len(store.JobStates))]
			}
			if rng.IntN(3) == 0 {
				p.Kind = pick(kinds)
			}
			got, err := st.JobList(ctx, p)
			checkErr(name+" list", err, nil)
			check(name+" list", got, m.list(p))
		case op < 97:
			q := pick(queues)
			got, err := nextAt(t, st, q, now)
			checkErr(name+" next", err, nil)
			check(name+" next", got, m.nextRunAt(q))
		default:
			got, err := st.JobCounts(ctx, &store.JobCountsParams{})
			checkErr(name+" counts", err, nil)
			check(name+" counts", got, m.counts())
		}
		if step%100 == 99 {
			for id := int64(1); id < m.nextID; id++ {
				got, err := st.JobGet(ctx, &store.JobGetParams{ID: id})
				want := m.jobs[id]
				if want == nil {
					checkErr(fmt.Sprint(name, " get ", id), err, store.ErrNotFound)
					continue
				}
				checkErr(fmt.Sprint(name, " get ", id), err, nil)
				check(fmt.Sprint(name, " get ", id), got, want)
			}
		}
	}
}

// TestAgainstModelChurn removes most of many jobs from the middle of their
// lanes and chunks, so lanes compact and chunks are freed, then drains and
// prunes everything, comparing with the model all along.
func TestAgainstModelChurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	st := newStore(t)
	m := newModel()
	now := t0
	const n = 5000
	var jobs []*store.NewJob
	for i := range n {
		nj := &store.NewJob{Kind: []string{"a", "b"}[i%2], Queue: "q", Priority: 1 + rng.IntN(2)}
		switch rng.IntN(3) {
		case 0:
			nj.RunAt = now.Add(time.Duration(rng.IntN(1000)-500) * time.Second)
		case 1:
			nj.RunAt = now.Add(time.Duration(rng.IntN(1000)) * time.Second)
		}
		jobs = append(jobs, nj)
	}
	got, _ := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now})
	if want := m.enqueue(jobs, now); !reflect.DeepEqual(got, want) {
		t.Fatal("enqueue differs")
	}
	for _, id := range rng.Perm(n)[:4000] {
		if id%5 == 0 {
			_, _ = st.JobDelete(ctx, &store.JobDeleteParams{ID: int64(id + 1)})
			_, _ = m.delete(int64(id + 1))
		} else {
			_, _ = st.JobCancel(ctx, &store.JobCancelParams{ID: int64(id + 1), Now: now})
			_, _ = m.cancel(int64(id+1), now)
		}
	}
	for now = now.Add(time.Hour); ; {
		p := &store.JobFetchParams{Queue: "q", Limit: 37, Now: now, Lease: time.Minute}
		got, err := store.FetchedJobs(st.JobFetch(ctx, p))
		if err != nil {
			t.Fatal(err)
		}
		if want := m.fetch(p); !reflect.DeepEqual(got, want) {
			t.Fatalf("fetch: got %v, want %v", ids(got), ids(want))
		}
		if len(got) == 0 {
			break
		}
		var outs []*store.Report
		for _, r := range got {
			outs = append(outs, &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted})
		}
		_, _ = st.JobFinish(ctx, &store.JobFinishParams{Reports: outs, Now: now})
		m.finish(&store.JobFinishParams{Reports: outs, Now: now})
	}
	cut := now.Add(time.Second)
	pruned, err := st.JobPrune(ctx, &store.JobPruneParams{CompletedBefore: cut, CancelledBefore: cut, DeadBefore: cut, Limit: n})
	if err != nil || pruned != m.prune(&store.JobPruneParams{CompletedBefore: cut, CancelledBefore: cut, DeadBefore: cut, Limit: n}) || len(m.jobs) != 0 {
		t.Fatalf("prune = %d, %v; model has %d left", pruned, err, len(m.jobs))
	}
	rows, err := st.JobList(ctx, &store.JobListParams{Limit: 10})
	if err != nil || len(rows) != 0 {
		t.Fatalf("JobList() after pruning everything = %d rows, %v", len(rows), err)
	}
	res := enqueue(t, st, now, &store.NewJob{Kind: "a", Queue: "q"})
	if res[0].ID != n+1 {
		t.Fatalf("next ID = %d, want %d", res[0].ID, n+1)
	}
	if rows, _ := st.JobList(ctx, &store.JobListParams{Limit: 10, Desc: true}); !slices.Equal(ids(rows), []int64{n + 1}) {
		t.Fatalf("JobList() = %v, want [%d]", ids(rows), n+1)
	}
}
