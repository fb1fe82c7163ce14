package storetest

import (
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

var fencingCases = []testCase{
	{name: "StaleTokenAfterRescue", run: testFencingStaleToken},
	{name: "StaleTokenAfterRelease", run: testFencingAfterRelease},
	{name: "NotRunningOrUnknown", run: testFencingNotRunning},
}

// outcomeKinds is every OutcomeKind.
var outcomeKinds = []store.ReportKind{
	store.ReportCompleted, store.ReportFailed, store.ReportCancelled, store.ReportSnoozed, store.ReportReleased,
}

// outcomeFor builds an outcome of kind k for row's claim at now, with the
// Error and RunAt that kind uses.
func outcomeFor(row *store.JobRow, k store.ReportKind, now time.Time) *store.Report {
	o := &store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: k}
	switch k {
	case store.ReportFailed:
		o.Error = failure(row, now, "stale failure")
		o.RunAt = now.Add(time.Minute)
	case store.ReportCancelled:
		o.Error = failure(row, now, "stale cancel")
	case store.ReportSnoozed:
		o.RunAt = now.Add(time.Minute)
	}
	return o
}

// stateAfter is the state an outcome of kind k built by outcomeFor leaves a
// job with attempts to spare in.
func stateAfter(k store.ReportKind) store.JobState {
	return map[store.ReportKind]store.JobState{
		store.ReportCompleted: store.JobStateCompleted,
		store.ReportFailed:    store.JobStateRetrying,
		store.ReportCancelled: store.JobStateCancelled,
		store.ReportSnoozed:   store.JobStateScheduled,
		store.ReportReleased:  store.JobStateAvailable,
	}[k]
}

// A worker whose job was rescued and claimed again holds a stale token:
// none of its outcomes and none of its heartbeats touch the job, while the
// new claim's token works.
func testFencingStaleToken(t *testing.T, e *env) {
	for _, k := range outcomeKinds {
		now := at(time.Hour)
		id := enqueueOne(t, e.st, now, newJob("fenced-"+k.String()))
		a := fetchID(t, e.st, now, id)
		later := now.Add(time.Hour)
		wantRescued(t, e.st, later, 10, 1)
		b := fetchID(t, e.st, later, id)
		if b.ClaimToken == a.ClaimToken {
			t.Fatalf("%v: second claim of job %d has the first claim's token %d, want a new one", k, id, a.ClaimToken)
		}
		before := get(t, e.st, id)

		res := finish(t, e.st, later, outcomeFor(a, k, later))
		if res[0].Applied {
			t.Errorf("%v with the stale token of job %d: Applied = true, want false", k, id)
		}
		if diff := diffRow(before, get(t, e.st, id)); diff != "" {
			t.Errorf("%v with a stale token changed job %d (-before +after):\n%s", k, id, diff)
		}
		if held := extend(t, e.st, later.Add(time.Second), time.Hour, ref(a)); held[0] {
			t.Errorf("LeaseExtend of job %d with the stale token = true, want false", id)
		}
		if diff := diffRow(before, get(t, e.st, id)); diff != "" {
			t.Errorf("LeaseExtend with a stale token changed job %d (-before +after):\n%s", id, diff)
		}

		beat := later.Add(2 * time.Second)
		if held := extend(t, e.st, beat, lease, ref(b)); !held[0] {
			t.Errorf("LeaseExtend of job %d with the current token = false, want true", id)
		}
		if got := get(t, e.st, id); !got.LeaseUntil.Equal(beat.Add(lease)) {
			t.Errorf("job %d: LeaseUntil = %v after extending with the current token, want %v", id, got.LeaseUntil, beat.Add(lease))
		}
		finishOne(t, e.st, beat, outcomeFor(b, k, beat), stateAfter(k))
	}
}

// The token changes with every claim, even when the attempt number does
// not (a released or snoozed attempt is not counted).
func testFencingAfterRelease(t *testing.T, e *env) {
	for _, k := range []store.ReportKind{store.ReportReleased, store.ReportSnoozed} {
		now := at(time.Hour)
		id := enqueueOne(t, e.st, now, newJob("fenced-"+k.String()))
		a := fetchID(t, e.st, now, id)
		o := outcomeFor(a, k, now)
		o.RunAt = now
		finishOne(t, e.st, now, o, store.JobStateAvailable)
		b := fetchID(t, e.st, now, id)
		if b.Attempt != a.Attempt || b.ClaimToken == a.ClaimToken {
			t.Fatalf("after %v, claim again: Attempt %d, ClaimToken %d; want Attempt %d and a token other than %d", k, b.Attempt, b.ClaimToken, a.Attempt, a.ClaimToken)
		}
		before := get(t, e.st, id)
		for _, stale := range outcomeKinds {
			if res := finish(t, e.st, now, outcomeFor(a, stale, now)); res[0].Applied {
				t.Errorf("after %v and a new claim, %v with the old token: Applied = true, want false", k, stale)
			}
		}
		if held := extend(t, e.st, now, time.Hour, ref(a)); held[0] {
			t.Errorf("after %v and a new claim, LeaseExtend with the old token = true, want false", k)
		}
		if diff := diffRow(before, get(t, e.st, id)); diff != "" {
			t.Errorf("stale calls changed job %d (-before +after):\n%s", id, diff)
		}
		complete(t, e.st, now, b)
	}
}

// An outcome is applied only to a running job: one for an unknown job, a
// job never claimed, or a job already finished or waiting to retry is
// refused without an error and changes nothing.
func testFencingNotRunning(t *testing.T, e *env) {
	now := at(time.Hour)
	ids := enqueueN(t, e.st, now, 3, "idle")
	done := fetchID(t, e.st, now, ids[0])
	complete(t, e.st, now, done)
	failed := fetchID(t, e.st, now, ids[1])
	finishOne(t, e.st, now, outcomeFor(failed, store.ReportFailed, now), store.JobStateRetrying)
	never := get(t, e.st, ids[2])

	for _, k := range outcomeKinds {
		cases := []struct {
			what string
			row  *store.JobRow
		}{
			{"unknown job", &store.JobRow{ID: 1 << 60, ClaimToken: 1, Attempt: 1}},
			{"completed job", done},
			{"retrying job", failed},
			{"job never claimed (token 0)", never},
			{"job never claimed (token 1)", &store.JobRow{ID: never.ID, ClaimToken: 1, Attempt: 1}},
		}
		for _, c := range cases {
			var before *store.JobRow
			if c.row.ID != 1<<60 {
				before = get(t, e.st, c.row.ID)
			}
			res, err := e.st.JobFinish(t.Context(), &store.JobFinishParams{Reports: []*store.Report{outcomeFor(c.row, k, now)}, Now: now})
			if err != nil {
				t.Fatalf("JobFinish(%v of %s) error: %v, want none", k, c.what, err)
			}
			if len(res) != 1 || res[0].Applied {
				t.Errorf("JobFinish(%v of %s) = %+v, want one result with Applied false", k, c.what, res)
			}
			if before != nil {
				if diff := diffRow(before, get(t, e.st, c.row.ID)); diff != "" {
					t.Errorf("refused %v changed the %s (-before +after):\n%s", k, c.what, diff)
				}
			}
		}
	}
}
