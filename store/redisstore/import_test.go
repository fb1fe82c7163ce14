package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// openAt opens a store with prefix on the server (or cluster) of url.
func openAt(t testing.TB, url, prefix string) *redisstore.Store {
	t.Helper()
	st, err := redisstore.Open(context.Background(), url, &redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatalf("Open(prefix %s) error: %v", prefix, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func newJobIn(q, kind string) *store.NewJob {
	return &store.NewJob{Kind: kind, Queue: q, Args: []byte(`{"kind":"` + kind + `"}`), Priority: store.PriorityDefault, MaxAttempts: 25}
}

func enqueueJobs(t testing.TB, st store.Store, now time.Time, jobs ...*store.NewJob) []int64 {
	t.Helper()
	res, err := st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Now: now, Jobs: jobs})
	if err != nil {
		t.Fatalf("JobEnqueueMany error: %v", err)
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// claimKind claims the next job of kind in queue q and fails the test
// unless there is one.
func claimKind(t testing.TB, st store.Store, q, kind string, now time.Time, lease time.Duration) *store.JobRow {
	t.Helper()
	r, err := st.JobFetch(t.Context(), &store.JobFetchParams{Queue: q, Kinds: []string{kind}, Limit: 1, Now: now, Lease: lease, Worker: "w"})
	if err != nil || len(r.Jobs) != 1 {
		t.Fatalf("JobFetch(%s, kind %s) = %v, %v; want one job", q, kind, r, err)
	}
	return r.Jobs[0]
}

func finishJob(t testing.TB, st store.Store, now time.Time, r *store.Report) {
	t.Helper()
	out, err := st.JobFinish(t.Context(), &store.JobFinishParams{Now: now, Reports: []*store.Report{r}})
	if err != nil || !out[0].Applied {
		t.Fatalf("JobFinish(job %d, kind %v) = %v, %v; want applied", r.ID, r.Kind, out, err)
	}
}

func listJobs(t testing.TB, st store.Store) []*store.JobRow {
	t.Helper()
	rows, err := st.JobList(t.Context(), &store.JobListParams{Limit: 1000})
	if err != nil {
		t.Fatalf("JobList error: %v", err)
	}
	return rows
}

// Jobs exported from one Redis store and imported into another are the
// same jobs, and leave the same keys as the transitions that made them
// did in the first: job hashes (but for fields at their usual value),
// lanes and their heads, the due, running and finished sets, the ID
// indexes, unique keys, partitions' running counts, dependents and the
// jobs a retry revives. Not written: history, rate windows, the ID and
// token counters (which only move on).
func TestImportLeavesWhatTransitionsLeave(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	pa, pb := redistest.Prefix(t), redistest.Prefix(t)
	a, b := openAt(t, url, pa), openAt(t, url, pb)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	run := newJobIn("work", "run")
	run.UniqueKey, run.PartitionKey, run.Priority = "u-run", "t1", store.PriorityHighest
	run.Tags, run.Meta, run.Timeout = []string{"a", "b"}, []byte(`{"m":1}`), time.Minute
	retry := newJobIn("work", "retry")
	retry.MaxAttempts = 3
	dead := newJobIn("work", "dead")
	dead.MaxAttempts = 1
	ids := enqueueJobs(t, a, now, run, newJobIn("work", "done"), retry, dead, newJobIn("work", "lost"))
	cascade := newJobIn("work", "cascade")
	cascade.DependsOn = []int64{ids[3]}
	cascade2 := newJobIn("work", "cascade2")
	cascade2.DependsOnIndex = []int{0}
	enqueueJobs(t, a, now, cascade, cascade2)
	sched := newJobIn("mail", "sched")
	sched.RunAt, sched.UniqueKey = now.Add(time.Hour), "u-sched"
	avail := newJobIn("mail", "avail")
	avail.PartitionKey, avail.Priority = "t2", store.PriorityLowest
	wait := newJobIn("mail", "wait")
	wait.DependsOnIndex = []int{1}
	second := newJobIn("mail", "second")
	second.DependsOnIndex = []int{4}
	mail := enqueueJobs(t, a, now, sched, avail, wait, newJobIn("mail", "admin"), newJobIn("mail", "first"), second)

	claimKind(t, a, "work", "run", now, time.Hour)
	done := claimKind(t, a, "work", "done", now, time.Hour)
	if _, err := a.LeaseExtend(t.Context(), &store.LeaseExtendParams{Now: now, Lease: time.Hour,
		Leases: []store.LeaseRef{{ID: done.ID, ClaimToken: done.ClaimToken}}, Progress: map[store.LeaseRef]float64{{ID: done.ID, ClaimToken: done.ClaimToken}: 50}}); err != nil {
		t.Fatal(err)
	}
	finishJob(t, a, now, &store.Report{ID: done.ID, ClaimToken: done.ClaimToken, Kind: store.ReportCompleted, Result: []byte(`{"ok":1}`)})
	for _, kind := range []string{"retry", "dead"} {
		r := claimKind(t, a, "work", kind, now, time.Hour)
		finishJob(t, a, now, &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportFailed, RunAt: now.Add(time.Minute),
			Error: &store.AttemptError{Attempt: r.Attempt, At: now, Message: "boom <&> \"quoted\"", Stack: "goroutine 1\n\tmain.go:1"}})
	}
	claimKind(t, a, "work", "lost", now, time.Second)
	if _, err := a.JobRescue(t.Context(), &store.JobRescueParams{Now: now.Add(2 * time.Second), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.JobCancel(t.Context(), &store.JobCancelParams{ID: mail[3], Now: now}); err != nil {
		t.Fatal(err)
	}
	first := claimKind(t, a, "mail", "first", now, time.Hour)
	finishJob(t, a, now, &store.Report{ID: first.ID, ClaimToken: first.ClaimToken, Kind: store.ReportCompleted})

	exported := listJobs(t, a)
	res, err := b.JobImport(t.Context(), &store.JobImportParams{Jobs: exported, Now: now.Add(2 * time.Second)})
	if err != nil {
		t.Fatalf("JobImport error: %v", err)
	}
	for i, r := range res {
		if r.Status != store.ImportAdded {
			t.Errorf("JobImport of job %d: %v, want added", exported[i].ID, r.Status)
		}
	}
	if d := cmp.Diff(exported, listJobs(t, b)); d != "" {
		t.Errorf("jobs imported (-exported +imported):\n%s", d)
	}
	c := rawClient(t, url)
	if d := cmp.Diff(keySpace(t, c, pa), keySpace(t, c, pb)); d != "" {
		t.Errorf("keys left by the transitions (-) and by the import (+):\n%s", d)
	}
}

func rawClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opts, _, err := redisstore.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// notImported are the keys an import does not write: history, rate
// windows, queue settings, ID and token counters.
var notImported = regexp.MustCompile(`:(hc|hm|rate|cfg|tok)$|:pr:|^:seq$`)

// laneKey matches a lane's list (L:) or sorted set (l:): the queue's
// prefix, then the lane's ID.
var laneKey = regexp.MustCompile(`^(.*:q\d+:[^:]*:)[lL]:(.*)$`)

// finishedKey matches a finished set's list (F:) or sorted set (f:).
var finishedKey = regexp.MustCompile(`^(.*:q\d+:[^:]*:)[fF]:(completed|cancelled|dead)$`)

// keySpace returns what the keys of prefix hold, by name without the
// prefix, as comparable strings: a job hash without its empty fields and
// those at their usual value, its errors decoded; other hashes without
// zero counts. A lane is its list and its sorted set as one, ordered,
// without stale members (see sortie.lua), and the queue's heads are the
// lanes they name.
func keySpace(t *testing.T, c *redis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := t.Context()
	out := make(map[string]string)
	lanes := make(map[string][]string)
	finished := make(map[string][]string)
	jobs := make(map[string]map[string]string)
	iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		name := strings.TrimPrefix(key, prefix)
		if notImported.MatchString(name) {
			continue
		}
		typ, err := c.Type(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if m := finishedKey.FindStringSubmatch(name); m != nil {
			set := "finished " + m[1] + m[2]
			if typ == "list" {
				finished[set] = append(finished[set], c.LRange(ctx, key, 0, -1).Val()...)
			} else {
				for _, z := range c.ZRangeWithScores(ctx, key, 0, -1).Val() {
					finished[set] = append(finished[set], fmt.Sprintf("%018.0f%s", z.Score, z.Member))
				}
			}
			continue
		}
		if m := laneKey.FindStringSubmatch(name); m != nil {
			lane := "lane " + m[1] + m[2]
			if typ == "list" {
				lanes[lane] = append(lanes[lane], c.LRange(ctx, key, 0, -1).Val()...)
			} else {
				lanes[lane] = append(lanes[lane], c.ZRange(ctx, key, 0, -1).Val()...)
			}
			continue
		}
		if strings.HasSuffix(name, ":h") {
			var ids []string
			for _, h := range c.ZRange(ctx, key, 0, -1).Val() {
				ids = append(ids, h[35:])
			}
			slices.Sort(ids)
			out["heads "+name] = strings.Join(ids, ",")
			continue
		}
		if typ == "hash" && jobHash.MatchString(name) {
			jobs[name[strings.LastIndex(name, ":")+1:]] = c.HGetAll(ctx, key).Val()
		}
		var v any
		switch typ {
		case "string":
			v = c.Get(ctx, key).Val()
		case "set":
			m := c.SMembers(ctx, key).Val()
			slices.Sort(m)
			v = m
		case "zset":
			v = c.ZRangeWithScores(ctx, key, 0, -1).Val()
		case "hash":
			v = normalHash(t, name, c.HGetAll(ctx, key).Val())
		default:
			t.Fatalf("key %s is a %s", key, typ)
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out[typ+" "+name] = string(b)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	for set, ms := range finished {
		st := set[strings.LastIndex(set, ":")+1:]
		var live []string
		for _, m := range ms {
			if j := jobs[m[18:]]; j["st"] == st && j["fa"] == m[:18] {
				live = append(live, m)
			}
		}
		slices.Sort(live)
		if len(live) > 0 {
			out[set] = strings.Join(live, ",")
		}
	}
	for lane, ms := range lanes {
		var live []string
		for _, m := range ms {
			if j := jobs[m[19:]]; j["st"] == "available" && j["ra"] == m[1:19] {
				live = append(live, m)
			}
		}
		slices.Sort(live)
		live = slices.Compact(live)
		if len(live) > 0 {
			out[lane] = strings.Join(live, ",")
		}
	}
	return out
}

var jobHash = regexp.MustCompile(`:j:\d+$`)

func normalHash(t *testing.T, name string, h map[string]string) map[string]string {
	for f, v := range h {
		if v == "" || v == "0" && !jobHash.MatchString(name) {
			delete(h, f)
		}
	}
	if !jobHash.MatchString(name) {
		return h
	}
	if h["st"] != "waiting" {
		delete(h, "wn")
	}
	// The last outcome's token and state, for a report sent again after
	// its reply was lost: the import has no report to answer.
	delete(h, "ft")
	if h["ca"] == h["ra"] {
		delete(h, "ca")
	}
	if e, ok := h["e"]; ok {
		var lines []any
		for _, l := range strings.Split(e, "\n") {
			var v any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("%s: error line %q: %v", name, l, err)
			}
			lines = append(lines, v)
		}
		b, _ := json.Marshal(lines)
		h["e"] = string(b)
	}
	return h
}

// On a cluster, with every queue's key group its own (the default), jobs
// imported with IDs that give other groups are found and run as jobs the
// store numbered: read, listed, claimed, finished, extended, retried (and
// their dependents revived), waited for, depended on, deleted and pruned.
// A job linked to a job of another group is refused, and then nothing is
// written.
func TestClusterImportAcrossGroups(t *testing.T) {
	t.Parallel()
	st := openCluster(t)
	ctx := t.Context()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	row := func(id int64, q string, s store.JobState) *store.JobRow {
		r := &store.JobRow{ID: id, Kind: "k", Queue: q, Args: []byte(`{}`), State: s, Priority: store.PriorityDefault,
			MaxAttempts: 3, RunAt: now.Add(-time.Hour), CreatedAt: now.Add(-time.Hour)}
		if s.Finished() {
			r.FinalizedAt = now.Add(-time.Minute)
		}
		return r
	}
	dead := row(1, "mail:high", store.JobStateDead)
	dead.Attempt, dead.ClaimToken = 3, 5
	cancelled := row(2, "mail:low", store.JobStateCancelled)
	cancelled.DependsOn, cancelled.CancelledBy = []int64{1}, 1
	avail := row(3, "billing", store.JobStateAvailable)
	avail.UniqueKey = "u"
	running := row(4, "billing", store.JobStateRunning)
	running.Attempt, running.ClaimToken, running.LeaseUntil = 1, 50, now.Add(time.Minute)
	old := row(5, "billing", store.JobStateCompleted)
	across := row(6, "mail:high", store.JobStateWaiting)
	across.DependsOn = []int64{3}

	rows := []*store.JobRow{dead, cancelled, avail, running, old, across}
	if _, err := st.JobImport(ctx, &store.JobImportParams{Jobs: rows, Now: now}); !errors.Is(err, redisstore.ErrCrossGroup) {
		t.Fatalf("import with a dependency across groups: error %v, want ErrCrossGroup", err)
	}
	if got := listJobs(t, st); len(got) != 0 {
		t.Fatalf("after a refused import the store lists %d jobs, want none", len(got))
	}
	rows = rows[:5]
	res, err := st.JobImport(ctx, &store.JobImportParams{Jobs: rows, Now: now})
	if err != nil {
		t.Fatalf("JobImport error: %v", err)
	}
	if d := cmp.Diff(rows, listJobs(t, st)); d != "" || len(res) != 5 {
		t.Fatalf("imported jobs (-exported +listed):\n%s", d)
	}
	for _, r := range rows {
		if got, err := st.JobGet(ctx, &store.JobGetParams{ID: r.ID}); err != nil || got.State != r.State {
			t.Errorf("JobGet(%d) = %v, %v; want the imported job", r.ID, got, err)
		}
	}

	l, err := st.LeaseExtend(ctx, &store.LeaseExtendParams{Now: now, Lease: time.Minute, Leases: []store.LeaseRef{{ID: 4, ClaimToken: 50}, {ID: 4, ClaimToken: 49}}})
	if err != nil || !l[0].Held || l[1].Held {
		t.Errorf("LeaseExtend(job 4, its token and another) = %v, %v; want held, then lost", l, err)
	}
	claimed := claimKind(t, st, "billing", "k", now, time.Minute)
	if claimed.ID != 3 || claimed.ClaimToken <= 50 {
		t.Errorf("claimed job %d with token %d, want job 3 with a token after the imported 50", claimed.ID, claimed.ClaimToken)
	}
	dup := newJobIn("billing", "k")
	dup.UniqueKey = "u"
	if r, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{dup}}); err != nil || r[0].ID != 3 || !r[0].Duplicate {
		t.Errorf("enqueue with job 3's unique key = %v, %v; want a duplicate of 3", r, err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := st.JobWait(ctx, &store.JobWaitParams{ID: 3})
		waited <- err
	}()
	finishJob(t, st, now, &store.Report{ID: 3, ClaimToken: claimed.ClaimToken, Kind: store.ReportCompleted})
	if err := <-waited; err != nil {
		t.Errorf("JobWait(3) error: %v", err)
	}
	next := newJobIn("billing", "next")
	next.DependsOn = []int64{3}
	if r, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{next}}); err != nil || r[0].State != store.JobStateAvailable {
		t.Errorf("enqueue depending on imported job 3 of the same group = %v, %v; want available", r, err)
	}
	other := newJobIn("mail:high", "other")
	other.DependsOn = []int64{3}
	if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{other}}); !errors.Is(err, redisstore.ErrCrossGroup) {
		t.Errorf("enqueue depending on imported job 3 of another group: error %v, want ErrCrossGroup", err)
	}

	if r, err := st.JobRetry(ctx, &store.JobRetryParams{ID: 1, Now: now}); err != nil || r.State != store.JobStateAvailable {
		t.Fatalf("JobRetry(1) = %v, %v; want available", r, err)
	}
	if r, err := st.JobGet(ctx, &store.JobGetParams{ID: 2}); err != nil || r.State != store.JobStateWaiting || r.CancelledBy != 0 {
		t.Errorf("job 2 after the retry of job 1 = %+v, %v; want waiting, CancelledBy 0", r, err)
	}
	if _, err := st.JobDelete(ctx, &store.JobDeleteParams{ID: 3, Now: now}); err != nil {
		t.Fatalf("JobDelete(3) error: %v", err)
	}
	if n, err := st.JobPrune(ctx, &store.JobPruneParams{Now: now, Limit: 10, CompletedBefore: now}); err != nil || n != 1 {
		t.Errorf("JobPrune = %d, %v; want job 5 pruned", n, err)
	}
	for _, id := range []int64{3, 5} {
		if _, err := st.JobGet(ctx, &store.JobGetParams{ID: id}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("JobGet(%d) after its deletion: error %v, want ErrNotFound", id, err)
		}
	}
	// Nothing is left of the jobs deleted: where they were is forgotten.
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.ClusterAddrs(t)})
	defer c.Close()
	left, err := c.HKeys(ctx, st.Prefix()+":fid").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0000000000000001", "0000000000000002", "0000000000000004"}; !slices.Equal(sortedCopy(left), want) {
		t.Errorf("P:fid holds %v, want the jobs left, %v", left, want)
	}
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// An import split into several calls checks every job before the first
// call. A unique key taken after the check, before the call that holds
// its job, refuses that call: with nothing written yet, JobImport reports
// it as the check would have; with calls already written, it says how
// many jobs are, and the same import run again reports those present and
// the conflict.
func TestImportConflictAfterCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		jobs  int
		taken int // the call before which the key is taken
	}{
		{name: "first call", jobs: 10, taken: 0},
		{name: "later call", jobs: redisstore.ImportCallMax + 10, taken: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := openAt(t, redistest.URL(t), redistest.Prefix(t))
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			rows := make([]*store.JobRow, tt.jobs)
			for i := range rows {
				rows[i] = &store.JobRow{ID: int64(i + 1), Kind: "k", Queue: "q", Args: []byte(`{}`), State: store.JobStateAvailable,
					Priority: store.PriorityDefault, MaxAttempts: 3, RunAt: now, CreatedAt: now}
			}
			last := rows[len(rows)-1]
			last.UniqueKey = "late"
			var holder int64
			redisstore.SetImportHook(st, func(call int) {
				if call == tt.taken && holder == 0 {
					j := newJobIn("q", "k")
					j.UniqueKey = "late"
					holder = enqueueJobs(t, st, now, j)[0]
				}
			})
			res, err := st.JobImport(t.Context(), &store.JobImportParams{Jobs: rows, Now: now})
			if tt.taken == 0 {
				if err != nil {
					t.Fatalf("JobImport error: %v", err)
				}
				if got := res[len(res)-1]; got.Status != store.ImportUniqueTaken || got.Other != holder {
					t.Errorf("JobImport's last job: %+v, want unique-taken by job %d", got, holder)
				}
				if got := listJobs(t, st); len(got) != 1 {
					t.Errorf("after the refused import the store lists %d jobs, want the key's holder only", len(got))
				}
				return
			}
			want := fmt.Sprintf("%d of %d jobs written", redisstore.ImportCallMax, tt.jobs)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("JobImport error %v, want one saying %q", err, want)
			}
			res, err = st.JobImport(t.Context(), &store.JobImportParams{Jobs: rows, Now: now})
			if err != nil {
				t.Fatalf("JobImport again: error %v", err)
			}
			var present, added int
			for _, r := range res {
				switch r.Status {
				case store.ImportPresent:
					present++
				case store.ImportAdded:
					added++
				}
			}
			if got := res[len(res)-1]; present != redisstore.ImportCallMax || got.Status != store.ImportUniqueTaken || got.Other != holder {
				t.Errorf("JobImport again: %d present, %d added, the last job %+v; want %d present and the last unique-taken by job %d",
					present, added, got, redisstore.ImportCallMax, holder)
			}
		})
	}
}

// BenchmarkImport imports 100,000 available jobs of 10 queues in
// JobImport calls of 5,000 (as the client sends them) into an empty store
// and reports the rate. It runs once, whatever b.N:
//
//	go test -run '^$' -bench Import -benchtime 1x ./store/redisstore/
func BenchmarkImport(b *testing.B) {
	const jobs, batch = 100_000, 5_000
	st := openAt(b, redistest.URL(b), redistest.Prefix(b))
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rows := make([]*store.JobRow, jobs)
	for i := range rows {
		rows[i] = &store.JobRow{ID: int64(i + 1), Kind: "sortie_bench", Queue: fmt.Sprintf("q%d", i%10), Args: fmt.Appendf(nil, `{"s":%d}`, i),
			State: store.JobStateAvailable, Priority: store.PriorityDefault, MaxAttempts: 25, RunAt: now, CreatedAt: now}
	}
	b.ResetTimer()
	for lo := 0; lo < jobs; lo += batch {
		if _, err := st.JobImport(context.Background(), &store.JobImportParams{Jobs: rows[lo : lo+batch], Now: now}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
}

// On a cluster JobActMany finds imported jobs whose IDs give other key
// groups (P:fid) and acts on them in their own group: a retry revives the
// job an imported one's death cancelled, a delete forgets where the
// deleted jobs were.
func TestClusterActManyImported(t *testing.T) {
	t.Parallel()
	st := openCluster(t)
	ctx := t.Context()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	row := func(id int64, q string, s store.JobState) *store.JobRow {
		return &store.JobRow{ID: id, Kind: "k", Queue: q, Args: []byte(`{}`), State: s, Priority: store.PriorityDefault,
			MaxAttempts: 3, Attempt: 3, RunAt: now.Add(-time.Hour), CreatedAt: now.Add(-time.Hour), FinalizedAt: now.Add(-time.Minute)}
	}
	dead := row(1, "mail:high", store.JobStateDead)
	cancelled := row(2, "mail:low", store.JobStateCancelled)
	cancelled.DependsOn, cancelled.CancelledBy = []int64{1}, 1
	done := row(3, "billing", store.JobStateCompleted)
	if _, err := st.JobImport(ctx, &store.JobImportParams{Jobs: []*store.JobRow{dead, cancelled, done}, Now: now}); err != nil {
		t.Fatalf("JobImport error: %v", err)
	}
	act := func(action store.JobAction, ids ...int64) []store.ActResult {
		t.Helper()
		res, err := st.JobActMany(ctx, &store.JobActManyParams{Action: action, IDs: ids, Now: now})
		if err != nil || len(res) != len(ids) {
			t.Fatalf("JobActMany(%s, %v) = %v, %v; want %d results", action, ids, res, err, len(ids))
		}
		return res
	}
	for i, r := range act(store.ActionRetry, 3, 1) {
		if r.Err != nil {
			t.Errorf("JobActMany(retry) of imported job %d: %v, want nil", []int64{3, 1}[i], r.Err)
		}
	}
	for id, want := range map[int64]store.JobState{1: store.JobStateAvailable, 2: store.JobStateWaiting, 3: store.JobStateAvailable} {
		if got, err := st.JobGet(ctx, &store.JobGetParams{ID: id}); err != nil || got.State != want {
			t.Errorf("job %d after JobActMany(retry) = %v, %v; want %s", id, got, err, want)
		}
	}
	res := act(store.ActionDelete, 3, 1<<40, 2, 1)
	if res[0].Err != nil || !errors.Is(res[1].Err, store.ErrNotFound) || res[2].Err != nil || res[3].Err != nil {
		t.Errorf("JobActMany(delete, 3, unknown, 2, 1) = %v, want nil, ErrNotFound, nil, nil", res)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.ClusterAddrs(t)})
	defer c.Close()
	if left, err := c.HKeys(ctx, st.Prefix()+":fid").Result(); err != nil || len(left) != 0 {
		t.Errorf("P:fid after deleting every imported job = %v, %v; want empty", left, err)
	}
	if got := listJobs(t, st); len(got) != 0 {
		t.Errorf("the store lists %d jobs after deleting every one, want none", len(got))
	}
}
