package redisstore

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
)

// The bucketed ID indexes and the lanes stay exact through jobs entering
// and leaving their states out of ID order: priorities make claims take
// later IDs first, scheduled jobs become available in RunAt order,
// cancels, retries and deletes pick jobs at random (leaving stale lane
// members behind), and batches of up to 400 overflow a bucket at once.
// Every claim takes the first available jobs in (Priority, RunAt, ID)
// order, read from the jobs themselves. After every round each state's
// index holds exactly the queue's jobs in that state, its buckets keep
// their bounds and size, its count is right, JobList pages through it
// in both directions, and the queue's heads name each lane's first member.
func TestIndexStaysExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTestStore(t)
	rng := rand.New(rand.NewPCG(7, 13))
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	var ids []int64
	for round := range 12 {
		batch := make([]*store.NewJob, 1+rng.IntN(400))
		for i := range batch {
			// Several kinds: a priority's jobs are then in several lanes,
			// which a claim merges by their heads.
			kind := []string{"k", "m", "n"}[rng.IntN(3)]
			j := &store.NewJob{Kind: kind, Queue: "ix", Args: []byte(`{}`), Priority: 1 + rng.IntN(4)}
			if rng.IntN(3) == 0 {
				j.RunAt = now.Add(time.Duration(1+rng.IntN(120)) * time.Second)
			}
			batch[i] = j
		}
		res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: batch})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			ids = append(ids, r.ID)
		}
		now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
		limit := 1 + rng.IntN(150)
		want := claimOrder(t, st, "ix", now)
		fetched, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "ix", Limit: limit, Now: now, Lease: time.Hour, Worker: "w"})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, j := range fetched.Jobs {
			got = append(got, j.ID)
		}
		if want = want[:min(limit, len(want))]; !slices.Equal(got, want) {
			t.Fatalf("round %d: claimed %d jobs %v..., want %d in claim order %v... (first difference at %d)",
				round, len(got), got[:min(5, len(got))], len(want), want[:min(5, len(want))], firstDiff(got, want))
		}
		var reports []*store.Report
		for i, j := range fetched.Jobs {
			r := &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted}
			switch i % 4 {
			case 1:
				r.Kind, r.RunAt = store.ReportFailed, now.Add(time.Duration(rng.IntN(60))*time.Second)
				r.Error = &store.AttemptError{Attempt: 1, At: now, Message: "no"}
			case 2:
				continue // left running
			}
			reports = append(reports, r)
		}
		if len(reports) > 0 {
			if _, err := st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: reports}); err != nil {
				t.Fatal(err)
			}
		}
		for range 30 {
			id := ids[rng.IntN(len(ids))]
			var err error
			switch rng.IntN(3) {
			case 0:
				_, err = st.JobCancel(ctx, &store.JobCancelParams{ID: id, Now: now})
			case 1:
				_, err = st.JobRetry(ctx, &store.JobRetryParams{ID: id, Now: now})
			case 2:
				_, err = st.JobDelete(ctx, &store.JobDeleteParams{ID: id, Now: now})
			}
			if err != nil && !store.Plain(err) {
				t.Fatal(err)
			}
		}
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) { checkIndexes(t, st, "ix") })
	}

	// Pruning deletes every finished job finalized before the cutoff,
	// whichever of its set's list and sorted set holds it, and no other.
	cut := now.Add(-90 * time.Second)
	var pruned int
	for {
		n, err := st.JobPrune(ctx, &store.JobPruneParams{Now: now, Limit: 50, CompletedBefore: cut, CancelledBefore: cut, DeadBefore: cut})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		pruned += n
	}
	var kept int
	for _, j := range rawJobs(t, st, "ix") {
		if j.finished != "" && j.finished < micros(cut) {
			t.Errorf("job %d (%s, finalized at %s) kept by pruning before %s", j.id, j.state, j.finished, micros(cut))
		}
		if j.finished != "" {
			kept++
		}
	}
	if pruned == 0 || kept == 0 {
		t.Errorf("pruning deleted %d finished jobs and kept %d: the test wants both", pruned, kept)
	}
	checkIndexes(t, st, "ix")
}

// rawJob is what the checks read of a job's hash.
type rawJob struct {
	id       int64
	state    store.JobState
	priority string
	runAt    string
	finished string
}

// rawJobs reads the hashes of queue q's jobs (on one server).
func rawJobs(t *testing.T, s *Store, q string) []rawJob {
	ctx := context.Background()
	var out []rawJob
	var cursor uint64
	// SCAN may return a key more than once (while the server's keyspace
	// grows, as other tests' keys make it do): each is read once.
	seen := make(map[string]bool)
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, s.k.prefix+":j:*", 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			rest := strings.TrimPrefix(k, s.k.prefix+":j:")
			if strings.Contains(rest, ":") || seen[k] {
				continue // a job's steps, or a key read already
			}
			seen[k] = true
			v, err := s.rdb.HMGet(ctx, k, "q", "st", "p", "ra", "fa").Result()
			if err != nil {
				t.Fatal(err)
			}
			if v[0] != q {
				continue
			}
			id, _ := strconv.ParseInt(rest, 10, 64)
			j := rawJob{id: id, state: store.JobState(v[1].(string)), priority: "2", runAt: v[3].(string)}
			if p, ok := v[2].(string); ok {
				j.priority = p
			}
			if fa, ok := v[4].(string); ok {
				j.finished = fa
			}
			out = append(out, j)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	return out
}

// claimOrder returns the IDs of queue q's jobs a claim at now takes, in
// the order it takes them: available, scheduled and retrying jobs due at
// now, by (Priority, RunAt, ID).
func claimOrder(t *testing.T, s *Store, q string, now time.Time) []int64 {
	due := micros(now)
	var ready []rawJob
	for _, j := range rawJobs(t, s, q) {
		switch j.state {
		case store.JobStateAvailable:
			ready = append(ready, j)
		case store.JobStateScheduled, store.JobStateRetrying:
			if j.runAt <= due {
				ready = append(ready, j)
			}
		}
	}
	slices.SortFunc(ready, func(a, b rawJob) int {
		return strings.Compare(fmt.Sprintf("%s%s%016d", a.priority, a.runAt, a.id), fmt.Sprintf("%s%s%016d", b.priority, b.runAt, b.id))
	})
	ids := make([]int64, len(ready))
	for i, j := range ready {
		ids[i] = j.id
	}
	return ids
}

// bucketMax is the most IDs a bucket of an ID index holds (sortie.lua's
// BUCKET).
const bucketMax = 32

// checkIndexes checks queue q's ID indexes against its jobs' states, and
// its heads against its lanes.
func checkIndexes(t *testing.T, s *Store, q string) {
	checkIndexesUpTo(t, s, q, bucketMax)
}

// checkIndexesUpTo is checkIndexes with buckets of up to max IDs.
func checkIndexesUpTo(t *testing.T, s *Store, q string, max int) {
	ctx := context.Background()
	checkHeads(t, s, q)
	truth := map[store.JobState][]int64{}
	for _, j := range rawJobs(t, s, q) {
		truth[j.state] = append(truth[j.state], j.id)
	}
	counts, err := s.JobCounts(ctx, &store.JobCountsParams{Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	counted := map[store.JobState]int64{}
	for _, c := range counts {
		counted[c.State] = c.Count
	}
	for _, st := range store.JobStates {
		want := truth[st]
		slices.Sort(want)
		if counted[st] != int64(len(want)) {
			t.Errorf("JobCounts says %d %s, the jobs say %d", counted[st], st, len(want))
		}
		if st == store.JobStateRunning {
			continue
		}
		if st.Finished() {
			checkFinished(t, s, q, st, want)
		}
		if got := readIndexUpTo(t, s, q, st, max); !slices.Equal(got, want) {
			t.Errorf("index of %s holds %d IDs, the jobs in it are %d (first difference at %d)", st, len(got), len(want), firstDiff(got, want))
		}
		for _, desc := range []bool{false, true} {
			var listed []int64
			after := int64(0)
			for {
				rows, err := s.JobList(ctx, &store.JobListParams{Queue: q, State: st, AfterID: after, Desc: desc, Limit: 37})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					listed = append(listed, r.ID)
				}
				if len(rows) < 37 {
					break
				}
				after = rows[len(rows)-1].ID
			}
			if desc {
				slices.Reverse(listed)
			}
			if !slices.Equal(listed, want) {
				t.Errorf("JobList of %s (desc %v) pages through %d jobs, want %d (first difference at %d)", st, desc, len(listed), len(want), firstDiff(listed, want))
			}
		}
	}
}

// checkHeads checks that the heads of queue q (QP h) hold, for each lane
// that has members, the first of its list's and its sorted set's, and
// nothing else.
func checkHeads(t *testing.T, s *Store, q string) {
	ctx := context.Background()
	qp := s.k.queue(q)
	want := map[string]bool{}
	for _, half := range []string{"L:", "l:"} {
		keys, err := s.rdb.Keys(ctx, qp+half+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			lid := strings.TrimPrefix(k, qp+half)
			first := s.rdb.LIndex(ctx, qp+"L:"+lid, 0).Val()
			if z := s.rdb.ZRange(ctx, qp+"l:"+lid, 0, 0).Val(); len(z) > 0 && (first == "" || z[0] < first) {
				first = z[0]
			}
			want[first+lid] = true
		}
	}
	heads := s.rdb.ZRange(ctx, qp+"h", 0, -1).Val()
	for _, h := range heads {
		if !want[h] {
			t.Errorf("heads hold %q, which is not a lane's first member", h)
		}
	}
	if len(heads) != len(want) {
		t.Errorf("heads hold %d members, the queue has %d lanes", len(heads), len(want))
	}
}

// checkFinished checks that the finished set of state st of queue q (its
// list and its sorted set, without stale members) holds the jobs ids.
func checkFinished(t *testing.T, s *Store, q string, st store.JobState, ids []int64) {
	ctx := context.Background()
	qp := s.k.queue(q)
	fa := map[int64]string{}
	for _, j := range rawJobs(t, s, q) {
		if j.state == st {
			fa[j.id] = j.finished
		}
	}
	var live []int64
	for _, m := range s.rdb.LRange(ctx, qp+"F:"+string(st), 0, -1).Val() {
		id, _ := strconv.ParseInt(m[18:], 10, 64)
		if fa[id] == m[:18] {
			live = append(live, id)
		}
	}
	for _, m := range s.rdb.ZRangeWithScores(ctx, qp+"f:"+string(st), 0, -1).Val() {
		id, _ := strconv.ParseInt(m.Member.(string), 10, 64)
		if fa[id] == fmt.Sprintf("%018.0f", m.Score) {
			live = append(live, id)
		}
	}
	// A job that finished, was retried and finished again at the same
	// time (the test's clock stands still) has the same member twice, the
	// first stale but not to be told apart: one counts.
	slices.Sort(live)
	live = slices.Compact(live)
	if !slices.Equal(live, ids) {
		t.Errorf("the finished set of %s holds %d live jobs, the jobs in that state are %d (first difference at %d)", st, len(live), len(ids), firstDiff(live, ids))
	}
}

// readIndex reads the index of state st of queue q bucket by bucket,
// checking each bucket's bounds and size.
func readIndex(t *testing.T, s *Store, q string, st store.JobState) []int64 {
	return readIndexUpTo(t, s, q, st, bucketMax)
}

// readIndexUpTo is readIndex with buckets of up to max IDs.
func readIndexUpTo(t *testing.T, s *Store, q string, st store.JobState, max int) []int64 {
	ctx := context.Background()
	key := s.k.stateIndex(q, st)
	starts, err := s.rdb.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var all []int64
	for i, b := range starts {
		members, err := s.rdb.ZRange(ctx, key+":"+b, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(members) == 0 || len(members) > max {
			t.Errorf("bucket %s of %s holds %d IDs, want 1 to %d", b, st, len(members), max)
		}
		for _, m := range members {
			if m < b || (i+1 < len(starts) && m >= starts[i+1]) {
				t.Errorf("bucket %s of %s holds %s, outside its bounds", b, st, m)
			}
			id, _ := strconv.ParseInt(m, 10, 64)
			all = append(all, id)
		}
	}
	return all
}

// Buckets of up to 100 IDs, as library versions 13 and 14 kept them, go
// on working: IDs after a full one start buckets of their own, and an ID
// that comes back into its range splits it into buckets of bucketMax, the
// counts and listings exact throughout.
func TestBucketsOfEarlierVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	enqueue(t, s, now, plainJobs("legacy", 100))
	// One bucket of the hundred IDs, as version 14 would have left them.
	key := s.k.stateIndex("legacy", store.JobStateAvailable)
	ids := readIndex(t, s, "legacy", store.JobStateAvailable)
	starts, err := s.rdb.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	first := strconv.FormatInt(ids[0], 10)
	members := make([]redis.Z, len(ids))
	for i, id := range ids {
		members[i] = redis.Z{Score: float64(id), Member: strconv.FormatInt(id, 10)}
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, b := range starts {
			p.Del(ctx, key+":"+b)
		}
		p.Del(ctx, key)
		p.ZAdd(ctx, key+":"+first, members...)
		p.ZAdd(ctx, key, redis.Z{Score: float64(ids[0]), Member: first})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkIndexesUpTo(t, s, "legacy", 100)

	enqueue(t, s, now, plainJobs("legacy", 40))
	checkIndexesUpTo(t, s, "legacy", 100)

	// The first job, claimed and released, comes back into the big bucket.
	res, err := s.JobFetch(ctx, &store.JobFetchParams{Queue: "legacy", Limit: 1, Now: now, Lease: time.Minute, Worker: "w"})
	if err != nil || len(res.Jobs) != 1 || res.Jobs[0].ID != ids[0] {
		t.Fatalf("claim = %v, %v; want job %d", res, err, ids[0])
	}
	if _, err := s.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: []*store.Report{
		{ID: ids[0], ClaimToken: res.Jobs[0].ClaimToken, Kind: store.ReportReleased}}}); err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, s, "legacy")
}

func firstDiff(a, b []int64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A job cancelled or deleted from the middle of its lane's list leaves a
// stale member behind: a claim passes over it, and deleting the queue
// once it has no job removes its lanes with the rest of its keys.
func TestStaleLaneMembers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTestStore(t)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	res := enqueue(t, st, now, plainJobs("stale", 6))
	for _, i := range []int{1, 2, 5} {
		if _, err := st.JobCancel(ctx, &store.JobCancelParams{ID: res[i].ID, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	qp := st.k.queue("stale")
	lanes, err := st.rdb.Keys(ctx, qp+"L:*").Result()
	if err != nil || len(lanes) != 1 {
		t.Fatalf("lane lists of the queue: %v, %v; want one", lanes, err)
	}
	if n := st.rdb.LLen(ctx, lanes[0]).Val(); n != 5 {
		t.Fatalf("the lane's list holds %d members after cancelling jobs 2, 3 and 6 of 6, want 5 (the last popped, two stale)", n)
	}
	fetched, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "stale", Limit: 10, Now: now, Lease: time.Hour, Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, j := range fetched.Jobs {
		got = append(got, j.ID)
	}
	if want := []int64{res[0].ID, res[3].ID, res[4].ID}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v: the jobs not cancelled, in order", got, want)
	}
	if n := st.rdb.Exists(ctx, lanes[0], qp+"h").Val(); n != 0 {
		t.Errorf("%d of the lane's list and the queue's heads left after the claim emptied the lane", n)
	}

	// Jobs of another queue deleted so that one stale member is left, the
	// queue's only lane member: laneClean+1 from the middle (stale), then
	// the first (popped, and laneClean stale ones behind it), then the last
	// (popped). Then the queue is deleted.
	res = enqueue(t, st, now, plainJobs("gone", laneClean+3))
	order := append(append(res[1:laneClean+2:laneClean+2], res[0]), res[laneClean+2])
	for _, r := range order {
		if _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: r.ID, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	qp = st.k.queue("gone")
	if lanes, err = st.rdb.Keys(ctx, qp+"L:*").Result(); err != nil || len(lanes) != 1 {
		t.Fatalf("lane lists of the queue: %v, %v; want one", lanes, err)
	}
	if n := st.rdb.LLen(ctx, lanes[0]).Val(); n != 1 {
		t.Fatalf("the lane's list holds %d members, want one, stale", n)
	}
	if err := st.QueueDelete(ctx, &store.QueueDeleteParams{Queue: "gone"}); err != nil {
		t.Fatal(err)
	}
	left, err := st.rdb.Keys(ctx, qp+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, k := range left {
		if !strings.HasSuffix(k, ":hc") && !strings.HasSuffix(k, ":hm") {
			kept = append(kept, strings.TrimPrefix(k, qp))
		}
	}
	if len(kept) != 0 {
		t.Errorf("keys of the deleted queue left besides its history: %v", kept)
	}
}

// A claim that meets a long run of stale lane members drops a bounded
// number of them (staleMax, and laneClean behind a take) and says to
// come back at once; and a cancel of a lane's first job drops the stale
// members behind it, so the lane's head (which QueueLatency reads) names
// a live job unless more than laneClean lie in a row.
func TestStaleRunsAreBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTestStore(t)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	const stale = 2500
	res := enqueue(t, st, now, plainJobs("runs", stale+3))
	for _, r := range res[1 : stale+1] {
		if _, err := st.JobCancel(ctx, &store.JobCancelParams{ID: r.ID, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	qp := st.k.queue("runs")
	lane := qp + "L:2k\x00"
	if n := st.rdb.LLen(ctx, lane).Val(); n != stale+3 {
		t.Fatalf("the lane's list holds %d members, want %d: the cancelled jobs' stale among them", n, stale+3)
	}
	if _, err := st.JobCancel(ctx, &store.JobCancelParams{ID: res[0].ID, Now: now}); err != nil {
		t.Fatal(err)
	}
	heads := st.rdb.ZRange(ctx, qp+"h", 0, -1).Val()
	if len(heads) != 1 || heads[0][19:35] != idString(res[laneClean+1].ID) {
		t.Fatalf("heads after cancelling the first job %q, want job %d's: the first job and %d stale members behind it dropped", heads, laneClean+1, laneClean)
	}
	var got []int64
	for fetches := 0; len(got) < 2; fetches++ {
		if fetches == 5 {
			t.Fatalf("5 claims took %v, want the two jobs not cancelled", got)
		}
		before := st.rdb.LLen(ctx, lane).Val()
		res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "runs", Limit: 10, Now: now, Lease: time.Hour, Worker: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if dropped := before - st.rdb.LLen(ctx, lane).Val() - int64(len(res.Jobs)); dropped > staleMax+laneClean+10 {
			t.Errorf("one claim dropped %d stale members, more than %d", dropped, staleMax+laneClean+10)
		}
		if len(res.Jobs) == 0 && (res.NextAt.IsZero() || res.NextAt.After(now)) {
			t.Errorf("a claim that found only stale members says to come back at %v, want now (%v)", res.NextAt, now)
		}
		for _, j := range res.Jobs {
			got = append(got, j.ID)
		}
	}
	if want := []int64{res[stale+1].ID, res[stale+2].ID}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
}

// A store that an earlier library version left with its one-set indexes
// (QP x:<state>) counts and lists those jobs, removes a job from them when
// it leaves their state before Open has moved them, and the next Open
// moves what is left.
func TestUnmovedIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, prefix := redistest.URL(t), redistest.Prefix(t)
	st, err := Open(ctx, url, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	res := enqueue(t, st, now, plainJobs("old", 3))
	// As version 12 left them: the IDs in x:available, no bucket, no count.
	key := st.k.stateIndex("old", store.JobStateAvailable)
	for _, b := range st.rdb.ZRange(ctx, key, 0, -1).Val() {
		st.rdb.Del(ctx, key+":"+b)
	}
	st.rdb.Del(ctx, key, st.k.counts("old"))
	for _, r := range res {
		st.rdb.ZAdd(ctx, st.k.oldStateSet("old", store.JobStateAvailable), redis.Z{Member: idString(r.ID)})
	}
	wantCounts := func(when string, want map[store.JobState]int64) {
		t.Helper()
		counts, err := st.JobCounts(ctx, &store.JobCountsParams{Queue: "old"})
		if err != nil {
			t.Fatal(err)
		}
		got := map[store.JobState]int64{}
		for _, c := range counts {
			got[c.State] = c.Count
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: counts %v, want %v", when, got, want)
		}
	}
	wantCounts("before any change", map[store.JobState]int64{store.JobStateAvailable: 3})
	fetched, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "old", Limit: 1, Now: now, Lease: time.Hour, Worker: "w"})
	if err != nil || len(fetched.Jobs) != 1 {
		t.Fatalf("claim: %v, %v", fetched, err)
	}
	wantCounts("after a claim", map[store.JobState]int64{store.JobStateAvailable: 2, store.JobStateRunning: 1})
	rows, err := st.JobList(ctx, &store.JobListParams{Queue: "old", State: store.JobStateAvailable, Limit: 10})
	if err != nil || len(rows) != 2 || rows[0].ID != res[1].ID {
		t.Fatalf("available jobs listed: %d, %v; want the last two", len(rows), err)
	}
	again, err := Open(ctx, url, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if n := st.rdb.Exists(ctx, st.k.oldStateSet("old", store.JobStateAvailable)).Val(); n != 0 {
		t.Error("Open left the earlier version's index")
	}
	wantCounts("after Open moved the index", map[store.JobState]int64{store.JobStateAvailable: 2, store.JobStateRunning: 1})
	if got := readIndex(t, st, "old", store.JobStateAvailable); !slices.Equal(got, []int64{res[1].ID, res[2].ID}) {
		t.Errorf("index after the move %v, want the last two jobs", got)
	}
}

// A lane with two heads (one not the lane's, as a tool that pops a lane
// by hand leaves it) does not make claims take one job at a time: the
// first claim drops the wrong head and claims as many as it asks for.
func TestTwoHeadsOfOneLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTestStore(t)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	enqueue(t, st, now, plainJobs("two", 20))
	h := st.k.queue("two") + "h"
	heads := st.rdb.ZRange(ctx, h, 0, -1).Val()
	if len(heads) != 1 {
		t.Fatalf("heads %q, want one", heads)
	}
	wrong := "2" + strings.Repeat("0", 18) + idString(1) + heads[0][35:]
	st.rdb.ZAdd(ctx, h, redis.Z{Member: wrong})
	res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "two", Limit: 10, Now: now, Lease: time.Hour, Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 10 {
		t.Errorf("a claim of 10 with two heads of one lane took %d", len(res.Jobs))
	}
	if heads := st.rdb.ZRange(ctx, h, 0, -1).Val(); len(heads) != 1 || heads[0] == wrong {
		t.Errorf("heads after the claim %q, want the lane's one", heads)
	}
}

// plainJobs returns n jobs of kind k, with no arguments, for queue q.
func plainJobs(q string, n int) []*store.NewJob {
	jobs := make([]*store.NewJob, n)
	for i := range jobs {
		jobs[i] = &store.NewJob{Kind: "k", Queue: q, Args: []byte(`{}`)}
	}
	return jobs
}

// enqueue enqueues jobs at now and returns their results.
func enqueue(t *testing.T, s *Store, now time.Time, jobs []*store.NewJob) []store.EnqueueResult {
	t.Helper()
	res, err := s.JobEnqueueMany(context.Background(), &store.JobEnqueueManyParams{Now: now, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// openTestStore opens a store on the test server under a prefix of its
// own, closed when the test ends.
func openTestStore(t *testing.T) *Store {
	t.Helper()
	st, err := Open(context.Background(), redistest.URL(t), &Options{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// A claim that takes part of a lane whose sorted set holds jobs before the
// list's (scheduled jobs come due behind newer ones) leaves the lane's head
// at the first of what is left in either half, whichever half the claim
// emptied or read whole: another lane's jobs are then claimed after it,
// not before.
func TestHeadsAfterPartialTakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openTestStore(t)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	// Lane k: scheduled jobs due at +1s..+3s, then (at +5s) two available
	// ones, which go to the list; promoted, the scheduled ones are before
	// the list's last and go to the sorted set.
	var jobs []*store.NewJob
	for i := 1; i <= 3; i++ {
		jobs = append(jobs, &store.NewJob{Kind: "k", Queue: "part", Args: []byte(`{}`), RunAt: now.Add(time.Duration(i) * time.Second)})
	}
	// Lane m: one job due between lane k's second and third.
	jobs = append(jobs, &store.NewJob{Kind: "m", Queue: "part", Args: []byte(`{}`), RunAt: now.Add(2500 * time.Millisecond)})
	enqueue(t, st, now, jobs)
	now = now.Add(5 * time.Second)
	enqueue(t, st, now, plainJobs("part", 2))
	// The first claim takes lane k's first two (up to lane m's head) and
	// lane m's job, the second lane k's third (from its sorted set), the
	// third the two left in the list (read whole and short, the sorted set
	// empty: the claim ends there), and the last finds nothing.
	var got []int64
	for _, limit := range []int{3, 1, 5, 1} {
		want := claimOrder(t, st, "part", now)
		res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "part", Limit: limit, Now: now, Lease: time.Hour, Worker: "w"})
		if err != nil {
			t.Fatal(err)
		}
		checkHeads(t, st, "part")
		var ids []int64
		for _, j := range res.Jobs {
			ids = append(ids, j.ID)
		}
		if want = want[:min(limit, len(want))]; !slices.Equal(ids, want) {
			t.Fatalf("claim %d of %d took %v, want %v (claimed before: %v)", len(got)+1, limit, ids, want, got)
		}
		got = append(got, ids...)
	}
	if len(got) != 6 {
		t.Errorf("claimed %d jobs, want all 6", len(got))
	}
}
