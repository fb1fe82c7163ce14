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

// Producers enqueue, fetchers claim and finish with every kind of outcome,
// a worker loses jobs that a rescuer takes back, all at once; in the end
// every job is finished exactly as its plan says, no claim was handed out
// twice, and every outcome and heartbeat of a live claim was applied.
func testSoak(t *testing.T, e *env) {
	const (
		jobs      = 400
		producers = 2
		fetchers  = 4
	)
	// The shared clock moves one microsecond per store call, so RunAts
	// become due while the soak runs; leases of an hour never expire.
	var clock atomic.Int64
	tick := func() time.Time { return at(time.Hour).Add(time.Duration(clock.Add(1)) * time.Microsecond) }
	deadline := time.Now().Add(60 * time.Second)

	var (
		finished atomic.Int64 // jobs that reached a finished state
		once     sync.Map     // job ID → true once snoozed or released
		heldMu   sync.Mutex
		held     = make(map[int64]string) // claims in progress → claimer
	)
	claim := func(who string, rows []*store.JobRow) bool {
		heldMu.Lock()
		defer heldMu.Unlock()
		for _, r := range rows {
			if other, ok := held[r.ID]; ok {
				t.Errorf("%s claimed job %d while %s held a valid lease on it", who, r.ID, other)
				return false
			}
			held[r.ID] = who
		}
		return true
	}
	unclaim := func(rows []*store.JobRow) {
		heldMu.Lock()
		defer heldMu.Unlock()
		for _, r := range rows {
			delete(held, r.ID)
		}
	}
	stop := func(who string) bool {
		if finished.Load() >= jobs || t.Failed() {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: gave up with %d of %d jobs finished", who, finished.Load(), jobs)
			return true
		}
		return false
	}

	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 1))
			for i := 0; i < jobs/producers; {
				batch := make([]*store.NewJob, min(1+rng.IntN(20), jobs/producers-i))
				for k := range batch {
					plan := soakPlans[rng.IntN(len(soakPlans))]
					j := newJob(plan)
					j.Args = fmt.Appendf(nil, `{"producer":%d,"i":%d}`, p, i+k)
					if plan == planFailDead || plan == planRetryComplete {
						j.MaxAttempts = 2
					}
					if rng.IntN(4) == 0 {
						j.RunAt = at(time.Hour).Add(time.Duration(clock.Load()+int64(rng.IntN(50))) * time.Microsecond)
					}
					batch[k] = j
				}
				if _, err := e.st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Jobs: batch, Now: tick()}); err != nil {
					t.Errorf("producer %d: JobEnqueueMany error: %v", p, err)
					return
				}
				i += len(batch)
			}
		}()
	}

	normalKinds := []string{planComplete, planRetryComplete, planFailDead, planCancel, planSnoozeComplete, planReleaseComplete}
	for f := range fetchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("fetcher %d", f)
			rng := rand.New(rand.NewPCG(uint64(f), 2))
			for !stop(who) {
				limit := 1 + rng.IntN(10)
				rows, err := store.FetchedJobs(e.st.JobFetch(t.Context(), &store.JobFetchParams{
					Queue: defaultQueue, Kinds: normalKinds, Limit: limit, Now: tick(), Lease: time.Hour, Worker: who,
				}))
				if err != nil {
					t.Errorf("%s: JobFetch error: %v", who, err)
					return
				}
				if len(rows) > limit {
					t.Errorf("%s: JobFetch(limit %d) returned %d jobs", who, limit, len(rows))
					return
				}
				if len(rows) == 0 {
					runtime.Gosched()
					continue
				}
				if !claim(who, rows) {
					return
				}
				if rng.IntN(3) == 0 {
					refs := make([]store.LeaseRef, len(rows))
					for i, r := range rows {
						refs[i] = ref(r)
					}
					held, err := e.st.LeaseExtend(t.Context(), &store.LeaseExtendParams{Leases: refs, Now: tick(), Lease: time.Hour})
					if err != nil {
						t.Errorf("%s: LeaseExtend error: %v", who, err)
						return
					}
					for i, h := range held {
						if !h.Held || h.CancelRequested {
							t.Errorf("%s: LeaseExtend of live claim on job %d = %+v, want {Held: true}", who, refs[i].ID, h)
						}
					}
				}
				now := tick()
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
						if _, again := once.LoadOrStore(r.ID, true); !again {
							o.Kind, o.RunAt = store.ReportSnoozed, now.Add(5*time.Microsecond)
						}
					case planReleaseComplete:
						if _, again := once.LoadOrStore(r.ID, true); !again {
							o.Kind = store.ReportReleased
						}
					}
					outs[i] = o
				}
				unclaim(rows)
				res, err := e.st.JobFinish(t.Context(), &store.JobFinishParams{Reports: outs, Now: now})
				if err != nil {
					t.Errorf("%s: JobFinish error: %v", who, err)
					return
				}
				for i, r := range res {
					if !r.Applied {
						t.Errorf("%s: %v of job %d (live claim) not applied", who, outs[i].Kind, outs[i].ID)
						continue
					}
					if r.State.Finished() {
						finished.Add(1)
					}
				}
			}
		}()
	}

	// One goroutine both loses jobs and rescues them, so a rescue never
	// races a claim this goroutine means to finish.
	wg.Add(1)
	go func() {
		defer wg.Done()
		const who = "lossy worker"
		for !stop(who) {
			rows, err := store.FetchedJobs(e.st.JobFetch(t.Context(), &store.JobFetchParams{
				Queue: defaultQueue, Kinds: []string{planLostComplete}, Limit: 5, Now: tick(), Lease: time.Microsecond, Worker: who,
			}))
			if err != nil {
				t.Errorf("%s: JobFetch error: %v", who, err)
				return
			}
			if !claim(who, rows) {
				return
			}
			unclaim(rows)
			var outs []*store.Report
			for _, r := range rows {
				if r.Attempt >= 2 {
					outs = append(outs, &store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: store.ReportCompleted})
				}
				// Attempt 1 is abandoned: the process "died".
			}
			if len(outs) > 0 {
				res, err := e.st.JobFinish(t.Context(), &store.JobFinishParams{Reports: outs, Now: tick()})
				if err != nil {
					t.Errorf("%s: JobFinish error: %v", who, err)
					return
				}
				for i, r := range res {
					if !r.Applied || r.State != store.JobStateCompleted {
						t.Errorf("%s: completion of job %d = %+v, want applied and completed", who, outs[i].ID, r)
						continue
					}
					finished.Add(1)
				}
			}
			if _, err := e.st.JobRescue(t.Context(), &store.JobRescueParams{Now: tick(), Limit: 1 + len(rows)}); err != nil {
				t.Errorf("%s: JobRescue error: %v", who, err)
				return
			}
			if len(rows) == 0 {
				runtime.Gosched()
			}
		}
	}()
	wg.Wait()
	if t.Failed() {
		return
	}

	all := listAll(t, e.st, store.JobListParams{})
	if len(all) != jobs {
		t.Fatalf("store holds %d jobs after the soak, want %d", len(all), jobs)
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
