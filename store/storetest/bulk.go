package storetest

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sortiehq/sortie/store"
)

var bulkCases = []testCase{
	{name: "SameAsSingleCalls", run: testBulkSameAsSingle},
	{name: "Validation", run: testBulkValidation},
	{name: "ManyAcrossQueues", run: testBulkMany},
	{name: "SignalsQueue", run: testBulkSignal},
}

// bulkActions are the actions of JobActMany.
var bulkActions = []store.JobAction{store.ActionRetry, store.ActionCancel, store.ActionDelete}

// single applies action to job id with the single call, at now.
func single(t *testing.T, st store.Store, action store.JobAction, id int64, now time.Time) error {
	t.Helper()
	var err error
	switch action {
	case store.ActionRetry:
		_, err = st.JobRetry(t.Context(), &store.JobRetryParams{ID: id, Now: now})
	case store.ActionCancel:
		_, err = st.JobCancel(t.Context(), &store.JobCancelParams{ID: id, Now: now})
	case store.ActionDelete:
		_, err = st.JobDelete(t.Context(), &store.JobDeleteParams{ID: id, Now: now})
	default:
		t.Fatalf("unknown action %q", action)
	}
	return err
}

// actMany calls JobActMany and fails the test on error or on a wrong
// number of results.
func actMany(t *testing.T, st store.Store, action store.JobAction, now time.Time, ids ...int64) []store.ActResult {
	t.Helper()
	res, err := st.JobActMany(t.Context(), &store.JobActManyParams{Action: action, IDs: ids, Now: now})
	if err != nil {
		t.Fatalf("JobActMany(%s, %d IDs) error: %v", action, len(ids), err)
	}
	if len(res) != len(ids) {
		t.Fatalf("JobActMany(%s, %d IDs) returned %d results, want %d", action, len(ids), len(res), len(ids))
	}
	return res
}

// refusalOf names the refusal err is: "" for none, else the sentinel it
// wraps; an error that is no refusal fails the test.
func refusalOf(t *testing.T, call string, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	for _, s := range []error{store.ErrNotFound, store.ErrJobRunning, store.ErrUniqueConflict} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	t.Fatalf("%s error = %v, want nil, ErrNotFound, ErrJobRunning or ErrUniqueConflict", call, err)
	return ""
}

// bulkScenario fills st with jobs in every state and relation an
// operator's action treats apart, at now, and returns the IDs to act on,
// in an order where earlier actions change what later ones find. Queues
// "bulk:*" share a key group (a dependency or a unique key must stay in
// one on Redis Cluster); "other" is in another.
func bulkScenario(t *testing.T, st store.Store, now time.Time) []int64 {
	t.Helper()
	var out []int64
	add := func(ids ...int64) { out = append(out, ids...) }
	for _, s := range store.JobStates {
		add(inState(t, st, now, s, "bulk:states", "job-"+string(s), "").ID)
	}
	// A dead job whose key a pending job took since: a retry is refused.
	held := inState(t, st, now, store.JobStateDead, "bulk:unique", "held", "k-held")
	enqueueOne(t, st, now, keyedIn("bulk:unique", "k-held"))
	// Two finished jobs with one key: the first retried takes it.
	first := inState(t, st, now, store.JobStateCompleted, "bulk:unique", "first", "k-twice")
	second := inState(t, st, now, store.JobStateDead, "bulk:unique", "second", "k-twice")
	add(held.ID, first.ID, second.ID)

	// A chain p <- c <- g: p dies and cancels c and g. The grandchild comes
	// first, then p (whose retry revives c), then c.
	p := newJobIn("parent", "bulk:chain")
	p.MaxAttempts = 1
	pid := enqueueOne(t, st, now, p)
	c := enqueueState(t, st, now, dependent("bulk:chain", pid), store.JobStateWaiting)
	g := enqueueState(t, st, now, dependent("bulk:chain", c), store.JobStateWaiting)
	dies(t, st, "bulk:chain", pid, now)
	wantCancelledBy(t, st, g, c)
	// A parent whose waiting child is acted on after it.
	w := enqueueOne(t, st, now, newJobIn("parent", "bulk:wait"))
	wc := enqueueState(t, st, now, dependent("bulk:wait", w), store.JobStateWaiting)
	add(g, pid, c, w, wc)

	other := inState(t, st, now, store.JobStateDead, "other", "job", "")
	twice := inState(t, st, now, store.JobStateDead, "bulk:states", "twice", "")
	add(other.ID, twice.ID, twice.ID, 1<<40)
	return out
}

// keyedIn returns a job of queue with unique key key.
func keyedIn(queue, key string) *store.NewJob {
	j := newJobIn("keyed", queue)
	j.UniqueKey = key
	return j
}

// JobActMany does to each job what the single calls one after the other
// do: on two stores holding the same jobs, one acted on by JobRetry,
// JobCancel or JobDelete per ID and the other by one JobActMany, every
// result (acted on, or the same refusal), every job, the counts and the
// history agree. The batch holds every state, a unique key held by
// another job and one taken by an earlier job of the batch, a chain whose
// retry revives dependents, a job listed twice, jobs of two key groups and
// an unknown ID.
func testBulkSameAsSingle(t *testing.T, e *env) {
	for _, action := range bulkActions {
		t.Run(string(action), func(t *testing.T) {
			now := at(time.Hour)
			one, many := e.h.New(t), e.h.New(t)
			ids := bulkScenario(t, one, now)
			bulkScenario(t, many, now)
			// The stores may number the same jobs apart (Redis Cluster puts
			// each store's queues in a key group of its own).
			renum := renumbering(t, listIDs(t, one, store.JobListParams{}), listIDs(t, many, store.JobListParams{}))
			// Claim tokens too: a store may hand out tokens from its clock.
			tokens := tokenRenumbering(listAll(t, one, store.JobListParams{}), listAll(t, many, store.JobListParams{}))
			later := now.Add(time.Hour)
			res := actMany(t, many, action, later, renum.ids(ids)...)
			for i, id := range ids {
				call := fmt.Sprintf("%s of job %d (ID %d of %d)", action, id, i+1, len(ids))
				want := refusalOf(t, "single "+call, single(t, one, action, id, later))
				if got := refusalOf(t, "JobActMany "+call, res[i].Err); got != want {
					t.Errorf("JobActMany %s: refusal %q, want %q as the single call", call, got, want)
				}
			}
			if diff := cmp.Diff(tokens.tokens(renum.rows(listAll(t, one, store.JobListParams{}))), listAll(t, many, store.JobListParams{}), rowOpts); diff != "" {
				t.Errorf("jobs after the single calls and after JobActMany differ (-single +JobActMany):\n%s", diff)
			}
			if diff := cmp.Diff(counts(t, one, ""), counts(t, many, ""), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("JobCounts after the single calls and after JobActMany differ (-single +JobActMany):\n%s", diff)
			}
			if diff := cmp.Diff(history(t, one, store.JobHistoryParams{}), history(t, many, store.JobHistoryParams{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("JobHistory after the single calls and after JobActMany differ (-single +JobActMany):\n%s", diff)
			}
			checkNow(t, many, "JobActMany")
		})
	}
}

// renumber maps the IDs of the jobs of one store to those of the same jobs
// in another; an ID it does not know stays as it is.
type renumber map[int64]int64

// renumbering pairs two stores' IDs of the same jobs, each list in ID
// order.
func renumbering(t *testing.T, from, to []int64) renumber {
	t.Helper()
	if len(from) != len(to) {
		t.Fatalf("the same jobs made %d jobs in one store and %d in another", len(from), len(to))
	}
	m := make(renumber, len(from))
	for i, id := range from {
		m[id] = to[i]
	}
	return m
}

// tokenRenumbering pairs two stores' claim tokens of the same jobs, each
// list of rows in ID order.
func tokenRenumbering(from, to []*store.JobRow) renumber {
	m := make(renumber)
	for i := range min(len(from), len(to)) {
		if from[i].ClaimToken != 0 {
			m[from[i].ClaimToken] = to[i].ClaimToken
		}
	}
	return m
}

// tokens returns rows with their claim tokens renumbered, in place.
func (m renumber) tokens(rows []*store.JobRow) []*store.JobRow {
	for _, r := range rows {
		r.ClaimToken = m.id(r.ClaimToken)
	}
	return rows
}

func (m renumber) id(id int64) int64 {
	if to, ok := m[id]; ok {
		return to
	}
	return id
}

func (m renumber) ids(ids []int64) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = m.id(id)
	}
	return out
}

// rows returns copies of rows with the IDs they hold renumbered: their
// own, their workflow's, their dependencies', the one that cancelled them
// and those their errors name.
func (m renumber) rows(rows []*store.JobRow) []*store.JobRow {
	number := regexp.MustCompile(`\d+`)
	out := make([]*store.JobRow, len(rows))
	for i, r := range rows {
		c := *r
		c.ID, c.WorkflowID, c.CancelledBy, c.DependsOn = m.id(r.ID), m.id(r.WorkflowID), m.id(r.CancelledBy), m.ids(r.DependsOn)
		c.Errors = slices.Clone(r.Errors)
		for k := range c.Errors {
			c.Errors[k].Message = number.ReplaceAllStringFunc(c.Errors[k].Message, func(s string) string {
				id, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return s
				}
				return strconv.FormatInt(m.id(id), 10)
			})
		}
		out[i] = &c
	}
	return out
}

// JobActMany refuses an unknown action and more than MaxActMany IDs with
// ErrInvalidArgument, acting on none; no IDs is no results.
func testBulkValidation(t *testing.T, e *env) {
	now := at(time.Hour)
	dead := inState(t, e.st, now, store.JobStateDead, "q", "dead", "")
	tooMany := make([]int64, store.MaxActMany+1)
	for i := range tooMany {
		tooMany[i] = dead.ID
	}
	for _, p := range []store.JobActManyParams{
		{Action: "requeue", IDs: []int64{dead.ID}, Now: now},
		{Action: "", IDs: []int64{dead.ID}, Now: now},
		{Action: store.ActionRetry, IDs: tooMany, Now: now},
	} {
		res, err := e.st.JobActMany(t.Context(), &p)
		if wantErr(t, fmt.Sprintf("JobActMany(action %q, %d IDs)", p.Action, len(p.IDs)), err, store.ErrInvalidArgument) && res != nil {
			t.Errorf("JobActMany(action %q, %d IDs) returned %d results with its error, want none", p.Action, len(p.IDs), len(res))
		}
	}
	wantRow(t, e.st, "after refused JobActMany calls", dead)
	for _, action := range bulkActions {
		if res := actMany(t, e.st, action, now); len(res) != 0 {
			t.Errorf("JobActMany(%s, no IDs) = %v, want no results", action, res)
		}
	}
}

// MaxActMany dead jobs of queues in three key groups are retried by one
// call: each is available, counted so, and claimed from its queue.
func testBulkMany(t *testing.T, e *env) {
	now := at(time.Hour)
	queues := []string{"alpha", "beta", "gamma"}
	sizes := []int{store.MaxActMany - 2*(store.MaxActMany/3), store.MaxActMany / 3, store.MaxActMany / 3}
	var all []int64
	for i, q := range queues {
		n := sizes[i]
		jobs := make([]*store.NewJob, n)
		for k := range jobs {
			jobs[k] = newJobIn("many", q)
			jobs[k].MaxAttempts = 1
		}
		enqueue(t, e.st, now, jobs...)
		claimed := fetch(t, e.st, &store.JobFetchParams{Queue: q, Limit: n, Now: now})
		if len(claimed) != n {
			t.Fatalf("JobFetch(queue %q, limit %d) claimed %d jobs, want %d", q, n, len(claimed), n)
		}
		reports := make([]*store.Report, n)
		for k, row := range claimed {
			reports[k] = &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportFailed, Error: failure(row, now, "gave up")}
			all = append(all, row.ID)
		}
		finish(t, e.st, now, reports...)
	}
	later := now.Add(time.Hour)
	for i, r := range actMany(t, e.st, store.ActionRetry, later, all...) {
		if r.Err != nil {
			t.Fatalf("JobActMany(retry) of dead job %d: %v, want nil", all[i], r.Err)
		}
	}
	want := make(map[countKey]int64)
	for i, q := range queues {
		want[countKey{q, store.JobStateAvailable}] = int64(sizes[i])
	}
	wantCounts(t, e.st, "", want)
	for _, q := range queues {
		if got := fetch(t, e.st, &store.JobFetchParams{Queue: q, Limit: 1, Now: later}); len(got) != 1 {
			t.Errorf("JobFetch(queue %q) after JobActMany(retry) claimed %d jobs, want 1", q, len(got))
		}
	}
}

// A JobActMany that makes jobs available signals their queue's watch.
func testBulkSignal(t *testing.T, e *env) {
	now := at(time.Hour)
	w, ok := watch(t, e.st, "q")
	if !ok {
		return
	}
	a := inState(t, e.st, now, store.JobStateDead, "q", "a", "")
	b := inState(t, e.st, now, store.JobStateCancelled, "q", "b", "")
	drain(t, w)
	actMany(t, e.st, store.ActionRetry, now, a.ID, b.ID)
	waitSignal(t, w, "a JobActMany(retry)")
}
