package pgstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/fetchplan"
	"github.com/sortiehq/sortie/store/internal/ratelimit"
)

// limitJob is an available job of a limitCase: partition key ("" for
// none), priority, and RunAt that long before the fetch.
type limitJob struct {
	key      string
	priority int
	age      time.Duration
}

// limitStart is n starts of a partition ("" for the queue itself)
// recorded age before the fetch.
type limitStart struct {
	key string
	age time.Duration
	n   int
}

// limitCase is a queue's state before one fetch: its settings, available
// jobs, running jobs per partition and recorded starts.
type limitCase struct {
	name     string
	settings store.QueueSettings
	jobs     []limitJob
	running  map[string]int
	starts   []limitStart
	limit    int
}

// limitCases hold the rules at their edges: a start exactly a period old
// has left the window and one a microsecond younger has not; one exactly
// two periods and store.MaxStartAhead old may be forgotten and one a
// microsecond younger may not.
var limitCases = []limitCase{
	{name: "queue max running", settings: store.QueueSettings{MaxRunning: 5},
		jobs: jobsOf("", 4), running: map[string]int{"": 3}, limit: 10},
	{name: "queue rate window edges", settings: store.QueueSettings{RateLimit: 4, RatePeriod: time.Minute},
		jobs:   jobsOf("", 3),
		starts: []limitStart{{"", forgotten, 3}, {"", forgotten - time.Microsecond, 3}, {"", 2 * time.Minute, 1}, {"", time.Minute, 3}, {"", time.Minute - time.Microsecond, 1}, {"", 30 * time.Second, 2}},
		limit:  10},
	{name: "queue rate and max running", settings: store.QueueSettings{MaxRunning: 3, RateLimit: 5, RatePeriod: time.Minute},
		jobs: jobsOf("", 5), running: map[string]int{"": 1}, starts: []limitStart{{"", 10 * time.Second, 1}}, limit: 10},
	{name: "partition max running", settings: store.QueueSettings{PartitionMaxRunning: 2},
		jobs:    mixed("a", "b", "c", "", "a", "b", "c", "", "a", "b", "c"),
		running: map[string]int{"a": 2, "b": 1}, limit: 10},
	{name: "partition over its limit", settings: store.QueueSettings{PartitionMaxRunning: 2},
		jobs: mixed("a", "b", "a", "b"), running: map[string]int{"a": 3}, limit: 10},
	{name: "partition rate window edges", settings: store.QueueSettings{PartitionRateLimit: 2, PartitionRatePeriod: time.Minute},
		jobs: mixed("a", "b", "c", "a", "b", "c", "a", "b"),
		starts: []limitStart{{"a", time.Minute - time.Microsecond, 1}, {"b", time.Minute, 5}, {"c", forgotten, 1},
			{"c", forgotten - time.Microsecond, 1}, {"c", 10 * time.Second, 2}},
		limit: 10},
	{name: "queue room caps the merge", settings: store.QueueSettings{MaxRunning: 4, PartitionMaxRunning: 2},
		jobs: mixed("a", "b", "c", "a", "b", "c", ""), running: map[string]int{"a": 1}, limit: 10},
	{name: "queue and partition rates", settings: store.QueueSettings{RateLimit: 3, RatePeriod: time.Minute,
		PartitionRateLimit: 1, PartitionRatePeriod: 2 * time.Minute},
		jobs:   mixed("a", "b", "c", "a", "b", "c"),
		starts: []limitStart{{"", 10 * time.Second, 1}, {"a", 90 * time.Second, 1}, {"b", 4 * time.Minute, 1}},
		limit:  10},
	{name: "fetch limit below the rooms", settings: store.QueueSettings{PartitionMaxRunning: 3},
		jobs: mixed("a", "b", "a", "b", "a", "b", "", ""), limit: 4},
}

// forgotten is the age at which a start of a window of a minute may be
// forgotten (ratelimit.Window.ForgetBefore).
const forgotten = 2*time.Minute + store.MaxStartAhead

// jobsOf returns n jobs of partition key, priorities and ages varied.
func jobsOf(key string, n int) []limitJob {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = key
	}
	return mixed(keys...)
}

// mixed returns a job of each key in turn, their priorities and ages
// varied so that claim order differs from enqueue order.
func mixed(keys ...string) []limitJob {
	jobs := make([]limitJob, len(keys))
	for i, k := range keys {
		jobs[i] = limitJob{key: k, priority: 1 + (i*7)%3, age: time.Duration((i*5)%4) * time.Second}
	}
	return jobs
}

// The SQL of claim_limited, claim_partitioned and queue_next_at restates
// fetchplan.QueueRoom and PartitionRoom, ratelimit.Window's From,
// ForgetBefore and FreeAt, and fetchplan.MergeHeads. Over a table of queue
// states, a fetch claims exactly the jobs those rules pick, reports the
// NextAt they give, and forgets exactly the starts they let go.
func TestLimitedSQLFollowsRules(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), pgtest.URL(t), &Options{Schema: pgtest.Schema(t), Migrate: true, MaxConns: 2, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for i, c := range limitCases {
		t.Run(c.name, func(t *testing.T) {
			queue := fmt.Sprintf("q%d", i)
			heads := setUpLimitCase(t, s, queue, &c, now)
			wantIDs, room := predictClaim(&c, heads, now)
			res, err := s.JobFetch(t.Context(), &store.JobFetchParams{Queue: queue, Limit: c.limit, Now: now, Lease: time.Minute, Worker: "w"})
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, j := range res.Jobs {
				got = append(got, j.ID)
			}
			if diff := cmp.Diff(wantIDs, got); diff != "" {
				t.Errorf("JobFetch() claimed other jobs than the rules pick (-want +got):\n%s", diff)
			}
			if want := predictNextAt(&c, len(got), now); !res.NextAt.Equal(want) {
				t.Errorf("JobFetch().NextAt = %v, want %v (ratelimit.Window.FreeAt)", res.NextAt, want)
			}
			if room > 0 {
				checkForgotten(t, s, queue, &c, now)
			}
		})
	}
}

// Either claim function, called by a process that read the queue's
// settings before they changed, claims what the rules pick for the
// settings the queue has: claim_limited hands a queue with partition
// limits to claim_partitioned, and claim_partitioned hands one without
// them to claim_limited.
func TestLimitedSQLEitherFunction(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), pgtest.URL(t), &Options{Schema: pgtest.Schema(t), Migrate: true, MaxConns: 2, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for i, c := range limitCases {
		for _, fn := range []string{"claim_limited", "claim_partitioned"} {
			t.Run(c.name+"/"+fn, func(t *testing.T) {
				queue := fmt.Sprintf("q%d-%s", i, fn)
				heads := setUpLimitCase(t, s, queue, &c, now)
				want, _ := predictClaim(&c, heads, now)
				rows, err := s.pool.Query(t.Context(), s.q.get(`SELECT id FROM {s}.`+fn+`($1, $2, $3, 'w', $4, NULL)`),
					queue, c.limit, now, now.Add(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil {
					t.Fatal(err)
				}
				slices.Sort(want)
				slices.Sort(got)
				if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s() claimed other jobs than the rules pick (-want +got):\n%s", fn, diff)
				}
			})
		}
	}
}

// setUpLimitCase configures queue, enqueues c's running and available
// jobs and records its starts; it returns the available jobs as heads, in
// enqueue order, with their partition keys.
func setUpLimitCase(t *testing.T, s *Store, queue string, c *limitCase, now time.Time) map[string][]fetchplan.Head {
	t.Helper()
	ctx := t.Context()
	if _, err := s.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: queue, Settings: c.settings, Now: now}); err != nil {
		t.Fatal(err)
	}
	var running, avail []*store.NewJob
	for k, n := range c.running {
		for range n {
			running = append(running, &store.NewJob{Kind: "k", Queue: queue, PartitionKey: k, RunAt: now})
		}
	}
	for _, j := range c.jobs {
		avail = append(avail, &store.NewJob{Kind: "k", Queue: queue, PartitionKey: j.key, Priority: j.priority, RunAt: now.Add(-j.age)})
	}
	heads := map[string][]fetchplan.Head{}
	for i, batch := range [][]*store.NewJob{running, avail} {
		if len(batch) == 0 {
			continue
		}
		res, err := s.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: batch, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for k, r := range res {
			ids = append(ids, r.ID)
			if i == 1 {
				j := c.jobs[k]
				heads[j.key] = append(heads[j.key], fetchplan.Head{ID: r.ID, Priority: j.priority, RunAt: now.Add(-j.age)})
			}
		}
		if i == 0 {
			limitExec(t, s, `UPDATE {s}.jobs SET state = 'running', attempt = 1, lease_until = $2 WHERE id = ANY($1)`, ids, now.Add(time.Hour))
		}
	}
	for _, st := range c.starts {
		limitExec(t, s, `INSERT INTO {s}.rate_starts (queue, partition, at, n) VALUES ($1, $2, $3, $4)`, queue, st.key, now.Add(-st.age), st.n)
	}
	return heads
}

// limitExec runs a statement of the test's own on s's schema.
func limitExec(t *testing.T, s *Store, sql string, args ...any) {
	t.Helper()
	if _, err := s.pool.Exec(t.Context(), s.q.get(sql), args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// window returns the rate window of partition key ("" the queue's own).
func (c *limitCase) window(key string) ratelimit.Window {
	if key == "" {
		return ratelimit.Queue(c.settings)
	}
	return ratelimit.Partition(c.settings)
}

// started returns the starts of key in its window at now.
func (c *limitCase) started(key string, now time.Time) int64 {
	var n int64
	from := c.window(key).From(now)
	for _, st := range c.starts {
		if st.key == key && now.Add(-st.age).After(from) {
			n += int64(st.n)
		}
	}
	return n
}

// predictClaim returns the IDs the Go rules claim in c, in claim order,
// and the queue's room.
func predictClaim(c *limitCase, heads map[string][]fetchplan.Head, now time.Time) ([]int64, int64) {
	var running int64
	for _, n := range c.running {
		running += int64(n)
	}
	room := fetchplan.QueueRoom(c.settings, int64(c.limit), running, c.started("", now))
	var picked []fetchplan.Head
	for key, hs := range heads {
		take := room
		if key != "" && fetchplan.Partitioned(c.settings) {
			take = fetchplan.PartitionRoom(c.settings, room, int64(c.running[key]), c.started(key, now))
		}
		byID := map[int64]fetchplan.Head{}
		for _, h := range hs {
			byID[h.ID] = h
		}
		for _, id := range fetchplan.MergeHeads(hs, take) {
			picked = append(picked, byID[id])
		}
	}
	ids := fetchplan.MergeHeads(picked, room)
	if len(ids) == 0 {
		return nil, room
	}
	return ids, room
}

// predictNextAt returns the NextAt the Go rules give after a fetch of c
// that claimed claimed jobs: when it claimed fewer than its limit and the
// queue's rate window holds back the jobs left, the window's FreeAt (the
// case has no scheduled jobs).
func predictNextAt(c *limitCase, claimed int, now time.Time) time.Time {
	w := ratelimit.Queue(c.settings)
	if claimed == c.limit || claimed == len(c.jobs) || !w.On() {
		return time.Time{}
	}
	var starts []ratelimit.Start
	from := w.From(now)
	for _, st := range c.starts {
		if at := now.Add(-st.age); st.key == "" && at.After(from) {
			starts = append(starts, ratelimit.Start{At: at, N: int64(st.n)})
		}
	}
	slices.SortFunc(starts, func(a, b ratelimit.Start) int { return a.At.Compare(b.At) })
	if claimed > 0 {
		starts = append(starts, ratelimit.Start{At: now, N: int64(claimed)})
	}
	return w.FreeAt(starts)
}

// checkForgotten fails unless the fetch deleted exactly the starts of c
// at or before their window's ForgetBefore.
func checkForgotten(t *testing.T, s *Store, queue string, c *limitCase, now time.Time) {
	t.Helper()
	for _, st := range c.starts {
		at := now.Add(-st.age)
		var n int
		err := s.pool.QueryRow(t.Context(), s.q.get(`SELECT count(*) FROM {s}.rate_starts WHERE queue = $1 AND partition = $2 AND at = $3`),
			queue, st.key, at).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		forget := !at.After(c.window(st.key).ForgetBefore(now))
		if kept := n > 0; kept == forget {
			t.Errorf("start of %q at now-%v: kept %v after the fetch, want %v (ratelimit.Window.ForgetBefore)", st.key, st.age, kept, !forget)
		}
	}
}

// A partitioned claim reads the heads of the partitions and claims by
// primary key: with 5,000 jobs of a saturated partition queued ahead of a
// small one, claim_partitioned claims the small one's jobs and reads the
// saturated backlog at most once (pg_stat_xact_user_tables). The claim's
// generic plan once walked the queue's available jobs for the chosen IDs,
// reading the backlog a second time.
//
// That once is the search for head jobs without a partition key, which
// walks jobs_fetch past the keyed ones; the package doc states this cost.
func TestPartitionedClaimReadsHeads(t *testing.T) {
	t.Parallel()
	const backlog = 5000
	const maxRows = backlog + 50
	schema := pgtest.Schema(t)
	s, err := Open(context.Background(), pgtest.URL(t), &Options{Schema: schema, Migrate: true, MaxConns: 2, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	c := limitCase{settings: store.QueueSettings{PartitionMaxRunning: 2}, running: map[string]int{"big": 2},
		jobs: append(jobsOf("big", backlog), jobsOf("small", 10)...)}
	setUpLimitCase(t, s, "fair", &c, now)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	read := func() int64 {
		t.Helper()
		var n int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
			FROM pg_stat_xact_user_tables WHERE schemaname = $1 AND relname = 'jobs'`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := read()
	rows, err := tx.Query(ctx, s.q.get(`SELECT partition_key FROM {s}.claim_partitioned('fair', 10, $1, 'w', $2, NULL)`), now, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	n := read() - before
	if diff := cmp.Diff([]string{"small", "small"}, keys); diff != "" {
		t.Errorf("claim_partitioned() claimed partitions (-want +got):\n%s", diff)
	}
	t.Logf("a claim behind a backlog of %d read %d rows of jobs", backlog, n)
	if n > maxRows {
		t.Errorf("a claim behind a saturated backlog of %d read %d rows of jobs, want at most %d (the backlog once)", backlog, n, maxRows)
	}
}
