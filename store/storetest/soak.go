package storetest

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

var soakCases = []testCase{
	{name: "ProducersFetchersRescuer", run: testSoak},
}

// Soak plans: each job's kind says how its attempts end, so the final state
// of every job is known in advance.
const (
	planComplete        = "complete"         // completed at attempt 1
	planRetryComplete   = "retry-complete"   // fails once, completed at attempt 2
	planFailDead        = "fail-dead"        // fails both of its 2 attempts: dead
	planCancel          = "cancel"           // cancelled at attempt 1
	planSnoozeComplete  = "snooze-complete"  // snoozed once, completed at attempt 1
	planReleaseComplete = "release-complete" // released once, completed at attempt 1
	planLostComplete    = "lost-complete"    // worker lost at attempt 1, rescued, completed at attempt 2
)

var soakPlans = []string{planComplete, planRetryComplete, planFailDead, planCancel, planSnoozeComplete, planReleaseComplete, planLostComplete}

// Sizes of the soak.
const (
	soakJobs      = 400
	soakProducers = 2
	soakFetchers  = 4
)

// soak is the shared state of one soak run.
type soak struct {
	t *testing.T
	e *env
	// clock moves one microsecond per store call, so RunAts become due
	// while the soak runs; leases of an hour never expire.
	clock    atomic.Int64
	deadline time.Time
	finished atomic.Int64 // jobs that reached a finished state
	once     sync.Map     // job ID → true once snoozed or released

	heldMu sync.Mutex
	held   map[int64]string // claims in progress → claimer
}

// Producers enqueue, fetchers claim and finish with every kind of outcome,
// a worker loses jobs that a rescuer takes back, all at once; in the end
// every job is finished exactly as its plan says, no claim was handed out
// twice, and every outcome and heartbeat of a live claim was applied.
func testSoak(t *testing.T, e *env) {
	s := &soak{t: t, e: e, deadline: time.Now().Add(60 * time.Second), held: map[int64]string{}}
	var wg sync.WaitGroup
	for p := range soakProducers {
		wg.Go(func() { s.produce(p) })
	}
	for f := range soakFetchers {
		wg.Go(func() { s.fetchLoop(f) })
	}
	// One goroutine both loses jobs and rescues them, so a rescue never
	// races a claim this goroutine means to finish.
	wg.Go(s.lossyLoop)
	wg.Wait()
	if !t.Failed() {
		s.checkFinal()
	}
}

func (s *soak) tick() time.Time {
	return at(time.Hour).Add(time.Duration(s.clock.Add(1)) * time.Microsecond)
}

// claim records rows as held by who, failing the test if one is held.
func (s *soak) claim(who string, rows []*store.JobRow) bool {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	for _, r := range rows {
		if other, ok := s.held[r.ID]; ok {
			s.t.Errorf("%s claimed job %d while %s held a valid lease on it", who, r.ID, other)
			return false
		}
		s.held[r.ID] = who
	}
	return true
}

func (s *soak) unclaim(rows []*store.JobRow) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	for _, r := range rows {
		delete(s.held, r.ID)
	}
}

// stop reports whether who should stop: every job finished, the test
// failed, or the soak ran past its deadline.
func (s *soak) stop(who string) bool {
	if s.finished.Load() >= soakJobs || s.t.Failed() {
		return true
	}
	if time.Now().After(s.deadline) {
		s.t.Errorf("%s: gave up with %d of %d jobs finished", who, s.finished.Load(), soakJobs)
		return true
	}
	return false
}

// produce enqueues producer p's share of the jobs in random batches.
func (s *soak) produce(p int) {
	rng := rand.New(rand.NewPCG(uint64(p), 1))
	for i := 0; i < soakJobs/soakProducers; {
		batch := make([]*store.NewJob, min(1+rng.IntN(20), soakJobs/soakProducers-i))
		for k := range batch {
			plan := soakPlans[rng.IntN(len(soakPlans))]
			j := newJob(plan)
			j.Args = fmt.Appendf(nil, `{"producer":%d,"i":%d}`, p, i+k)
			if plan == planFailDead || plan == planRetryComplete {
				j.MaxAttempts = 2
			}
			if rng.IntN(4) == 0 {
				j.RunAt = at(time.Hour).Add(time.Duration(s.clock.Load()+int64(rng.IntN(50))) * time.Microsecond)
			}
			batch[k] = j
		}
		if _, err := s.e.st.JobEnqueueMany(s.t.Context(), &store.JobEnqueueManyParams{Jobs: batch, Now: s.tick()}); err != nil {
			s.t.Errorf("producer %d: JobEnqueueMany error: %v", p, err)
			return
		}
		i += len(batch)
	}
}

// soakNormalKinds are the plans fetchers work (all but the lost one).
var soakNormalKinds = []string{planComplete, planRetryComplete, planFailDead, planCancel, planSnoozeComplete, planReleaseComplete}

// fetchLoop claims jobs, sometimes heartbeats them, and finishes them as
// their plans say.
func (s *soak) fetchLoop(f int) {
	who := fmt.Sprintf("fetcher %d", f)
	rng := rand.New(rand.NewPCG(uint64(f), 2))
	for !s.stop(who) {
		limit := 1 + rng.IntN(10)
		rows, err := store.FetchedJobs(s.e.st.JobFetch(s.t.Context(), &store.JobFetchParams{
			Queue: defaultQueue, Kinds: soakNormalKinds, Limit: limit, Now: s.tick(), Lease: time.Hour, Worker: who,
		}))
		if err != nil {
			s.t.Errorf("%s: JobFetch error: %v", who, err)
			return
		}
		if len(rows) > limit {
			s.t.Errorf("%s: JobFetch(limit %d) returned %d jobs", who, limit, len(rows))
			return
		}
		if len(rows) == 0 {
			runtime.Gosched()
			continue
		}
		if !s.claim(who, rows) {
			return
		}
		if rng.IntN(3) == 0 && !s.heartbeat(who, rows) {
			return
		}
		now := s.tick()
		outs := s.reports(rows, now)
		s.unclaim(rows)
		if !s.finish(who, outs, now) {
			return
		}
	}
}

// heartbeat extends the leases of rows, which must all be held.
func (s *soak) heartbeat(who string, rows []*store.JobRow) bool {
	refs := make([]store.LeaseRef, len(rows))
	for i, r := range rows {
		refs[i] = ref(r)
	}
	held, err := s.e.st.LeaseExtend(s.t.Context(), &store.LeaseExtendParams{Leases: refs, Now: s.tick(), Lease: time.Hour})
	if err != nil {
		s.t.Errorf("%s: LeaseExtend error: %v", who, err)
		return false
	}
	for i, h := range held {
		if !h.Held || h.CancelRequested {
			s.t.Errorf("%s: LeaseExtend of live claim on job %d = %+v, want {Held: true}", who, refs[i].ID, h)
		}
	}
	return true
}

// reports returns the outcome of each row's attempt as its plan says.
func (s *soak) reports(rows []*store.JobRow, now time.Time) []*store.Report {
	outs := make([]*store.Report, len(rows))
	for i, r := range rows {
		o := &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted}
		switch r.Kind {
		case planRetryComplete:
			if r.Attempt == 1 {
				o.Kind, o.Error, o.RunAt = store.ReportFailed, failure(r, now, "soak failure"), now.Add(3*time.Microsecond)
			}
		case planFailDead:
			o.Kind, o.Error, o.RunAt = store.ReportFailed, failure(r, now, "soak failure"), now.Add(3*time.Microsecond)
		case planCancel:
			o.Kind, o.Error = store.ReportCancelled, failure(r, now, "soak cancel")
		case planSnoozeComplete:
			if _, again := s.once.LoadOrStore(r.ID, true); !again {
				o.Kind, o.RunAt = store.ReportSnoozed, now.Add(5*time.Microsecond)
			}
		case planReleaseComplete:
			if _, again := s.once.LoadOrStore(r.ID, true); !again {
				o.Kind = store.ReportReleased
			}
		}
		outs[i] = o
	}
	return outs
}

// finish applies outs, which must all apply, and counts the finished jobs.
func (s *soak) finish(who string, outs []*store.Report, now time.Time) bool {
	res, err := s.e.st.JobFinish(s.t.Context(), &store.JobFinishParams{Reports: outs, Now: now})
	if err != nil {
		s.t.Errorf("%s: JobFinish error: %v", who, err)
		return false
	}
	for i, r := range res {
		if !r.Applied {
			s.t.Errorf("%s: %v of job %d (live claim) not applied", who, outs[i].Kind, outs[i].ID)
			continue
		}
		if r.State.Finished() {
			s.finished.Add(1)
		}
	}
	return true
}

// lossyLoop claims the lost plan's jobs with a lease of a microsecond,
// abandons their first attempt, completes their second, and rescues.
func (s *soak) lossyLoop() {
	const who = "lossy worker"
	for !s.stop(who) {
		rows, err := store.FetchedJobs(s.e.st.JobFetch(s.t.Context(), &store.JobFetchParams{
			Queue: defaultQueue, Kinds: []string{planLostComplete}, Limit: 5, Now: s.tick(), Lease: time.Microsecond, Worker: who,
		}))
		if err != nil {
			s.t.Errorf("%s: JobFetch error: %v", who, err)
			return
		}
		if !s.claim(who, rows) {
			return
		}
		s.unclaim(rows)
		var outs []*store.Report
		for _, r := range rows {
			if r.Attempt >= 2 {
				outs = append(outs, &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted})
			}
			// Attempt 1 is abandoned: the process "died".
		}
		if len(outs) > 0 && !s.finishLost(who, outs) {
			return
		}
		if _, err := s.e.st.JobRescue(s.t.Context(), &store.JobRescueParams{Now: s.tick(), Limit: 1 + len(rows)}); err != nil {
			s.t.Errorf("%s: JobRescue error: %v", who, err)
			return
		}
		if len(rows) == 0 {
			runtime.Gosched()
		}
	}
}

// finishLost completes the second attempts of lost jobs.
func (s *soak) finishLost(who string, outs []*store.Report) bool {
	res, err := s.e.st.JobFinish(s.t.Context(), &store.JobFinishParams{Reports: outs, Now: s.tick()})
	if err != nil {
		s.t.Errorf("%s: JobFinish error: %v", who, err)
		return false
	}
	for i, r := range res {
		if !r.Applied || r.State != store.JobStateCompleted {
			s.t.Errorf("%s: completion of job %d = %+v, want applied and completed", who, outs[i].ID, r)
			continue
		}
		s.finished.Add(1)
	}
	return true
}

// checkFinal checks that every job ended as its plan says.
func (s *soak) checkFinal() {
	t := s.t
	all := listAll(t, s.e.st, store.JobListParams{})
	if len(all) != soakJobs {
		t.Fatalf("store holds %d jobs after the soak, want %d", len(all), soakJobs)
	}
	for _, r := range all {
		got := soakResult{State: r.State, Attempt: r.Attempt, Errors: len(r.Errors), Finalized: !r.FinalizedAt.IsZero()}
		want := soakWant[r.Kind]
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("job %d (plan %s) mismatch (-want +got):\n%s", r.ID, r.Kind, diff)
		}
		if r.Kind == planLostComplete && len(r.Errors) == 1 && r.Errors[0].Message != store.LeaseLostMessage {
			t.Errorf("job %d (plan %s): error %q, want %q", r.ID, r.Kind, r.Errors[0].Message, store.LeaseLostMessage)
		}
	}
}

// soakResult is what the soak checks of a job at the end.
type soakResult struct {
	State     store.JobState
	Attempt   int
	Errors    int
	Finalized bool
}

// soakWant is the end of each plan.
var soakWant = map[string]soakResult{
	planComplete:        {store.JobStateCompleted, 1, 0, true},
	planRetryComplete:   {store.JobStateCompleted, 2, 1, true},
	planFailDead:        {store.JobStateDead, 2, 2, true},
	planCancel:          {store.JobStateCancelled, 1, 1, true},
	planSnoozeComplete:  {store.JobStateCompleted, 1, 0, true},
	planReleaseComplete: {store.JobStateCompleted, 1, 0, true},
	planLostComplete:    {store.JobStateCompleted, 2, 1, true},
}
