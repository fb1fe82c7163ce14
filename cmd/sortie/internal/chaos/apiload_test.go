package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/store"
)

// The API scenario's queues: apiQueue for most jobs, apiHangQueue for the
// jobs whose first claim is abandoned.
const (
	apiQueue     = "api"
	apiHangQueue = "api-hang"
)

// The fates of the API scenario's jobs, in their args: what the remote
// worker that fetches one reports.
const (
	fateOK      = "ok"      // complete
	fateFail    = "fail"    // fail every attempt: dead after max_attempts
	fateDiscard = "discard" // fail with discard: cancelled
	fateHang    = "hang"    // the first claim is never reported: rescued
	fateLater   = "later"   // enqueued for an hour later, then cancelled by an operator
)

// fateOf returns the fate of the n-th job an enqueuer sends.
func fateOf(n int) string {
	switch {
	case n%50 == 7:
		return fateHang
	case n%25 == 3:
		return fateLater
	case n%10 == 1:
		return fateFail
	case n%20 == 5:
		return fateDiscard
	}
	return fateOK
}

// apiJob is a job as the API returns it, with what the scenario reads.
type apiJob struct {
	ID         int64  `json:"id"`
	State      string `json:"state"`
	Attempt    int    `json:"attempt"`
	ClaimToken int64  `json:"claim_token"`
	Args       struct {
		Fate string `json:"fate"`
	} `json:"args"`
}

// apiTally is what the clients of the API scenario saw: every answer that
// moved a job counts here, so the store's counts can be checked against it.
type apiTally struct {
	// enqueued counts the jobs the API acknowledged creating.
	enqueued atomic.Int64
	// completed, dead and cancelled count the reports and operator
	// cancels answered with that state.
	completed, dead, cancelled atomic.Int64
	// abandoned counts the claims never reported in time, refused the
	// late reports of them answered 409.
	abandoned, refused atomic.Int64
	// bad counts the bad requests sent.
	bad atomic.Int64
	mu  sync.Mutex
	// problems are answers no request of the scenario should get.
	problems []string
}

func (ta *apiTally) problem(format string, args ...any) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if len(ta.problems) < 20 {
		ta.problems = append(ta.problems, fmt.Sprintf(format, args...))
	}
}

// TestAPILoad runs `sortie serve` on each store under many HTTP clients
// enqueuing (one job a request and batches), remote workers fetching and
// reporting (completing, failing until dead, discarding, abandoning claims
// that are then rescued), an operator cancelling scheduled jobs, and bad
// requests mixed in. No request is answered 5xx, every bad request gets a
// 4xx, every late report of a rescued claim is refused, and the counts add
// up exactly: enqueued = completed + dead + cancelled + still pending, with
// each final state's count equal to the answers that reported it.
func TestAPILoad(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			heavy(t)
			testAPILoad(t, b)
		})
	}
}

func testAPILoad(t *testing.T, b *backend) {
	c := newCounts(t, "API load", b.name)
	tg := b.make(t)
	base, stopAPI := startAPI(t, tg)
	a := newAPIClient(base)
	defer a.close()
	ta := &apiTally{}
	later := make(chan int64, 10000)

	// The load: enqueuers, workers, an operator and a sender of bad
	// requests, until loadOver; the workers then drain the queues until
	// drainOver. Requests in flight then finish: a request cut short could
	// change a job with nobody counting it.
	ctx := t.Context()
	loadOver, endLoad := context.WithTimeout(ctx, pick(6*time.Second, time.Minute))
	defer endLoad()
	drainOver, endDrain := context.WithCancel(ctx)
	defer endDrain()
	var load, workers sync.WaitGroup
	// On a fast store the enqueuers stop at maxJobs, so that the workers
	// drain the queues soon after.
	maxJobs := int64(pick(4000, 200000))
	for i := range pick(8, 32) {
		load.Go(func() { enqueuer(ctx, loadOver, a, ta, i, maxJobs, later) })
	}
	load.Go(func() { operator(ctx, loadOver, a, ta, later) })
	load.Go(func() { badSender(ctx, loadOver, a, ta) })
	for i := range pick(4, 8) {
		workers.Go(func() { remoteWorker(ctx, drainOver, a, ta, fmt.Sprintf("w%d", i)) })
	}
	workers.Go(func() { hangWorker(ctx, drainOver, a, ta) })
	load.Wait()
	c.requests = int(a.requests.Load())
	t.Logf("load over: %d jobs enqueued, %d requests, %d of them bad", ta.enqueued.Load(), a.requests.Load(), ta.bad.Load())
	// Drained: nothing left to run but the scheduled jobs, and every
	// abandoned claim rescued, run again and its late report refused.
	testkit.WaitFor(t, pick(time.Minute, 5*time.Minute), "the workers drained the queues", nil, func() string {
		return fmt.Sprintf("problems: %v", ta.problems)
	}, func() (bool, error) {
		return drained(t.Context(), tg.st)
	})
	endDrain()
	workers.Wait()
	c.requests, c.status5xx, c.unanswered = int(a.requests.Load()), int(a.status5xx.Load()), int(a.failed.Load())
	stopAPI()

	counts := map[store.JobState]int{}
	for _, q := range []string{apiQueue, apiHangQueue} {
		qc, err := stateCounts(t.Context(), tg.st, q)
		if err != nil {
			t.Fatal(err)
		}
		for s, n := range qc {
			counts[s] += n
		}
	}
	c.enqueued = int(ta.enqueued.Load())
	c.completed, c.dead, c.cancelled = counts[store.JobStateCompleted], counts[store.JobStateDead], counts[store.JobStateCancelled]
	c.pending = counts[store.JobStateScheduled] + counts[store.JobStateAvailable] + counts[store.JobStateRunning] +
		counts[store.JobStateRetrying] + counts[store.JobStateWaiting]
	c.refused = int(ta.refused.Load())
	c.lost = c.enqueued - c.completed - c.dead - c.cancelled - c.pending
	checkAPITally(t, c, ta, a)
}

// checkAPITally fails t unless the store's counts in c agree with what the
// clients were told.
func checkAPITally(t *testing.T, c *counts, ta *apiTally, a *apiClient) {
	t.Helper()
	if c.lost != 0 {
		t.Errorf("the API acknowledged %d jobs, the store holds %d completed + %d dead + %d cancelled + %d pending = %d",
			c.enqueued, c.completed, c.dead, c.cancelled, c.pending, c.enqueued-c.lost)
	}
	for _, x := range []struct {
		state       string
		store, told int
	}{
		{"completed", c.completed, int(ta.completed.Load())},
		{"dead", c.dead, int(ta.dead.Load())},
		{"cancelled", c.cancelled, int(ta.cancelled.Load())},
	} {
		if x.store != x.told {
			t.Errorf("the store holds %d %s jobs, the API answered %d reports and cancels with %s", x.store, x.state, x.told, x.state)
		}
	}
	if c.status5xx > 0 {
		t.Errorf("%d requests answered 5xx, want none; the last: %v", c.status5xx, a.last5xx.Load())
	}
	if n := a.failed.Load(); n > 0 {
		t.Errorf("%d requests got no answer, want none: %s", n, strings.Join(a.unanswered, "; "))
	}
	if ta.bad.Load() == 0 || ta.abandoned.Load() == 0 {
		t.Errorf("%d bad requests sent and %d claims abandoned, want some of each", ta.bad.Load(), ta.abandoned.Load())
	}
	if n := ta.abandoned.Load(); int64(c.refused) != n {
		t.Errorf("%d late reports of the %d abandoned claims were refused, want all", c.refused, n)
	}
	for _, p := range ta.problems {
		t.Error(p)
	}
}

// drained reports whether the API scenario's queues have no job left to run
// but the scheduled ones.
func drained(ctx context.Context, st store.Store) (bool, error) {
	for _, q := range []string{apiQueue, apiHangQueue} {
		counts, err := stateCounts(ctx, st, q)
		if err != nil {
			return false, err
		}
		if counts[store.JobStateAvailable]+counts[store.JobStateRunning]+counts[store.JobStateRetrying] > 0 {
			return false, nil
		}
	}
	return true, nil
}

// enqueuer enqueues jobs until until ends or max were enqueued, every
// fifth request a batch of ten; i numbers it among the enqueuers.
func enqueuer(ctx, until context.Context, a *apiClient, ta *apiTally, i int, max int64, later chan<- int64) {
	for n := 0; until.Err() == nil && ta.enqueued.Load() < max; n++ {
		var jobs []map[string]any
		size := 1
		if n%5 == 4 {
			size = 10
		}
		for k := range size {
			jobs = append(jobs, apiJobRequest(fateOf(n*10+k+i)))
		}
		var results []struct {
			ID        int64 `json:"id"`
			Duplicate bool  `json:"duplicate"`
		}
		var status int
		var data []byte
		if size == 1 {
			var one struct {
				ID        int64 `json:"id"`
				Duplicate bool  `json:"duplicate"`
			}
			status, data = a.call(ctx, "POST", "/jobs", jobs[0], &one)
			results = append(results, one)
		} else {
			var batch struct {
				Results []struct {
					ID        int64 `json:"id"`
					Duplicate bool  `json:"duplicate"`
				} `json:"results"`
			}
			status, data = a.call(ctx, "POST", "/jobs/batch", map[string]any{"jobs": jobs}, &batch)
			results = batch.Results
		}
		if status != 201 {
			ta.problem("enqueue of %d jobs: %d %s, want 201", size, status, data)
			continue
		}
		for k, r := range results {
			if r.Duplicate {
				ta.problem("enqueue: job %d reported a duplicate, and none has a unique key", r.ID)
				continue
			}
			ta.enqueued.Add(1)
			if jobs[k]["run_in"] != nil {
				select {
				case later <- r.ID:
				default:
				}
			}
		}
	}
}

// apiJobRequest is the enqueue request of a job of fate.
func apiJobRequest(fate string) map[string]any {
	req := map[string]any{"kind": "chaos.api", "queue": apiQueue, "args": map[string]string{"fate": fate}}
	switch fate {
	case fateHang:
		req["queue"] = apiHangQueue
	case fateFail:
		req["max_attempts"] = 2
	case fateLater:
		req["run_in"] = "1h"
	}
	return req
}

// operator cancels the scheduled jobs in later until until ends.
func operator(ctx, until context.Context, a *apiClient, ta *apiTally, later <-chan int64) {
	for {
		var id int64
		select {
		case <-until.Done():
			return
		case id = <-later:
		}
		var job apiJob
		status, data := a.call(ctx, "POST", "/jobs/"+strconv.FormatInt(id, 10)+"/cancel", nil, &job)
		if status == 200 && job.State == "cancelled" {
			ta.cancelled.Add(1)
		} else {
			ta.problem("cancel scheduled job %d: %d %s, want 200 and cancelled", id, status, data)
		}
	}
}

// badSender sends the bad requests, over and over, until ctx ends.
func badSender(ctx, until context.Context, a *apiClient, ta *apiTally) {
	bad := badRequests()
	reported := make([]bool, len(bad))
	for n := 0; until.Err() == nil; n++ {
		br := bad[n%len(bad)]
		status, data := a.do(ctx, br.method, br.path, br.body)
		ta.bad.Add(1)
		if (status < 400 || status > 499) && !reported[n%len(bad)] {
			reported[n%len(bad)] = true
			if len(data) > 200 {
				data = data[:200]
			}
			ta.problem("bad request (%s): %s %s answered %d %s, want a 4xx", br.what, br.method, br.path, status, data)
		}
	}
}

// remoteWorker fetches jobs of apiQueue and reports each one's end by its
// fate, until ctx ends.
func remoteWorker(ctx, until context.Context, a *apiClient, ta *apiTally, name string) {
	for until.Err() == nil {
		var page struct {
			Jobs []apiJob `json:"jobs"`
		}
		status, data := a.call(ctx, "POST", "/fetch", map[string]any{"queue": apiQueue, "limit": 10, "lease": "30s", "wait": "200ms", "worker": name}, &page)
		if status != 200 {
			ta.problem("fetch: %d %s, want 200", status, data)
			continue
		}
		for _, job := range page.Jobs {
			report(ctx, a, ta, job)
		}
	}
}

// report reports how job ended, by its fate, and counts the answer.
func report(ctx context.Context, a *apiClient, ta *apiTally, job apiJob) {
	path := "/jobs/" + strconv.FormatInt(job.ID, 10)
	var body map[string]any
	switch job.Args.Fate {
	case fateFail:
		path += "/fail"
		body = map[string]any{"claim_token": job.ClaimToken, "error": "chaos: it fails", "retry_in": "10ms"}
	case fateDiscard:
		path += "/fail"
		body = map[string]any{"claim_token": job.ClaimToken, "error": "chaos: discarded", "discard": true}
	default:
		path += "/complete"
		body = map[string]any{"claim_token": job.ClaimToken, "result": map[string]int{"attempt": job.Attempt}}
	}
	var out apiJob
	status, data := a.call(ctx, "POST", path, body, &out)
	if status != 200 {
		ta.problem("report of job %d (%s, attempt %d): %d %s, want 200", job.ID, job.Args.Fate, job.Attempt, status, data)
		return
	}
	switch out.State {
	case "completed":
		ta.completed.Add(1)
	case "dead":
		ta.dead.Add(1)
	case "cancelled":
		ta.cancelled.Add(1)
	}
}

// hangWorker fetches jobs of apiHangQueue with a short lease until until
// ends: it abandons each first claim, reports the later ones, and once an
// abandoned claim was rescued and claimed again, sends its late report,
// which must be refused.
func hangWorker(ctx, until context.Context, a *apiClient, ta *apiTally) {
	var abandoned []apiJob
	for until.Err() == nil {
		var page struct {
			Jobs []apiJob `json:"jobs"`
		}
		status, data := a.call(ctx, "POST", "/fetch", map[string]any{"queue": apiHangQueue, "limit": 5, "lease": "1s", "wait": "200ms", "worker": "hang"}, &page)
		if status != 200 {
			ta.problem("fetch: %d %s, want 200", status, data)
			continue
		}
		for _, job := range page.Jobs {
			if job.Attempt == 1 {
				abandoned = append(abandoned, job)
				ta.abandoned.Add(1)
				continue
			}
			report(ctx, a, ta, job)
		}
		abandoned = lateReports(ctx, a, ta, abandoned)
	}
	for _, job := range lateReports(ctx, a, ta, abandoned) {
		ta.problem("job %d: its abandoned claim %d was never claimed again", job.ID, job.ClaimToken)
	}
}

// lateReports sends the late report of each abandoned claim whose job was
// claimed again since, and returns the others.
func lateReports(ctx context.Context, a *apiClient, ta *apiTally, abandoned []apiJob) []apiJob {
	var left []apiJob
	for _, job := range abandoned {
		path := "/jobs/" + strconv.FormatInt(job.ID, 10)
		var now apiJob
		if status, data := a.call(ctx, "GET", path, nil, &now); status != 200 {
			ta.problem("get job %d: %d %s, want 200", job.ID, status, data)
			left = append(left, job)
			continue
		}
		if now.Attempt == job.Attempt {
			left = append(left, job) // not rescued and claimed again yet
			continue
		}
		if status, data := a.do(ctx, "POST", path+"/complete", map[string]any{"claim_token": job.ClaimToken}); status == 409 {
			ta.refused.Add(1)
		} else {
			ta.problem("late report of job %d's rescued claim %d: %d %s, want 409", job.ID, job.ClaimToken, status, data)
		}
	}
	return left
}
