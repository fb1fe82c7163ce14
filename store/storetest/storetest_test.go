package storetest

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sortiehq/sortie/store"
)

// refHarness makes reference stores with the given deliberate bug ("" for
// none). Reopen and Share hand back a new handle on the same data, as a
// file store opening its file again would; with the bug "share-not-shared"
// Share hands back a store on a new, empty database instead.
func refHarness(bug string) *Harness {
	return &Harness{
		New: func(t testing.TB) store.Store { return newRefStore(bug) },
		Reopen: func(t testing.TB, st store.Store) store.Store {
			return st.(*refStore).db.handle()
		},
		Share: func(t testing.TB, st store.Store) store.Store {
			if bug == "share-not-shared" {
				return newRefStore("")
			}
			return st.(*refStore).db.handle()
		},
	}
}

// TestSuiteSelf runs the suite against the reference store, which must pass.
func TestSuiteSelf(t *testing.T) {
	t.Parallel()
	Run(t, refHarness(""))
}

// TestSuiteSelfUnwatchable runs the watch cases against a store whose
// QueueWatch is unsupported, the durability cases without Reopen and the
// shared cases without Share: all must pass (the latter two by skipping).
func TestSuiteSelfUnwatchable(t *testing.T) {
	t.Parallel()
	Run(t, &Harness{New: func(t testing.TB) store.Store { return unwatchable{newRefStore("")} }})
}

// mutantEnv names the reference store's bug in the child process of
// TestSuiteCatchesMutants.
const mutantEnv = "SORTIE_STORETEST_MUTANT"

// TestSuiteMutant runs the suite against the reference store with the bug
// named by $SORTIE_STORETEST_MUTANT. It is the child process of
// TestSuiteCatchesMutants and does nothing on its own.
func TestSuiteMutant(t *testing.T) {
	bug := os.Getenv(mutantEnv)
	if bug == "" {
		t.Skip(mutantEnv + " not set: run by TestSuiteCatchesMutants")
	}
	Run(t, refHarness(bug))
}

// TestSuiteCatchesMutants checks that the suite fails stores with typical
// bugs, in the case meant to catch each one.
func TestSuiteCatchesMutants(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the test binary once per mutant")
	}
	for _, tt := range []struct {
		bug      string
		run      string // -test.run pattern below TestSuiteMutant
		wantFail string // a subtest that must fail
	}{
		{"no-fencing", "Fencing", "Fencing/StaleTokenAfterRescue"},
		{"token-is-attempt", "Fencing", "Fencing/StaleTokenAfterRelease"},
		{"claim-not-atomic", "Claim", "Claim/ExclusiveUnderConcurrency"},
		{"order-ignores-priority", "Fetch", "Fetch/Order"},
		{"rescue-never-dead", "Lease", "Lease/AttemptsCountAtFetch"},
		{"unique-ignores-running", "Unique", "Unique/DuplicateWhilePending"},
		{"counts-ignore-queue", "Counts", "Counts/PerQueueAndState"},
		{"prune-inclusive", "Prune", "Prune/CutoffsPerState"},
		{"cancel-keeps-finalized-zero", "Cancel", "Cancel/Pending"},
		{"history-counts-snooze", "History", "History/Outcomes"},
		{"history-misses-cancel", "History", "History/Cancellations"},
		{"history-prune-inclusive", "History", "History/Prune"},
		{"latency-claim-head", "Latency", "Latency/OldestDue"},
		{"rescue-inclusive", "Lease", "Lease/RescueAfterExpiry"},
		{"no-signal-on-rescue", "Watch", "Watch/SignalOnRetryAndRescue"},
		{"snooze-counts-attempt", "Outcome", "Outcome/SnoozedLater"},
		{"kinds-ignored", "Fetch", "Fetch/Kinds"},
		{"list-desc-cursor", "List", "List/Pagination"},
		{"retry-no-extra-attempt", "Retry", "Retry/Dead"},
		{"retry-ignores-unique", "Retry", "Retry/UniqueConflict"},
		{"extend-ignores-token", "Lease", "Lease/ExtendResultsInOrder"},
		{"next-run-at-any-state", "NextRunAt", "NextRunAt/EarliestScheduledOrRetrying"},
		{"finish-keeps-lease", "Outcome", "Outcome/Completed"},
		{"notify-before-commit", "Watch", "Watch/SignalAfterCommit"},
		{"enqueue-partial", "Enqueue", "Enqueue/FailedBatchInsertsNothing"},
		{"ranges-unchecked", "Enqueue", "Enqueue/FieldRanges"},
		{"cancel-running-refused", "Cancel", "Cancel/RunningRequested"},
		{"act-many-reversed", "Bulk", "Bulk/SameAsSingleCalls"},
		{"act-many-refusal-fails", "Bulk", "Bulk/SameAsSingleCalls"},
		{"act-many-unbounded", "Bulk", "Bulk/Validation"},
		{"extend-hides-cancel", "Cancel", "Cancel/RunningRequested"},
		{"pause-ignored", "Queue", "Queue/PauseResume"},
		{"resume-no-signal", "Queue", "Queue/PauseResume"},
		{"configure-unvalidated", "Queue", "Queue/ConfigureValidation"},
		{"delete-nonempty-queue", "Queue", "Queue/DeleteRefusesJobs"},
		{"attempted-at-now", "Fetch", "Fetch/AttemptedAtNotBeforeDue"},
		{"delete-keeps-rate-window", "Queue", "Queue/DeleteForgetsRateWindow"},
		{"max-running-ignored", "Limits", "Limits/MaxRunningConcurrent"},
		{"rate-limit-ignored", "Limits", "Limits/RateLimitInterval"},
		{"rate-window-closed", "Limits", "Limits/RateLimitWindow"},
		{"rate-ignores-later-starts", "Limits", "Limits/RateLimitOlderClock"},
		{"next-run-at-ignores-rate", "Limits", "Limits/NextRunAtRateLimit"},
		{"unstarted-keeps-start", "Limits", "Limits/RateLimitUnstartedRelease"},
		{"release-gives-back-start", "Limits", "Limits/RateLimitUnstartedRelease"},
		{"partition-limit-ignored", "Limits", "Limits/PartitionNoOverlapConcurrent"},
		{"partition-blocks-queue", "Limits", "Limits/Fairness"},
		{"depth-counts-duplicates", "Depth", "Depth/Reject"},
		{"drop-newest", "Depth", "Depth/DropOldest"},
		{"cascade-missing", "Deps", "Deps/FailureCancelsDependents"},
		{"cascade-one-level", "Deps", "Deps/FailureCancelsDependents"},
		{"waiting-not-pending", "Deps", "Deps/WaitingIsPendingAndQueued"},
		{"retry-ignores-deps", "Deps", "Deps/RetryChainInOrder"},
		{"retry-revives-none", "Deps", "Deps/RetryRevivesDependents"},
		{"revive-by-last-error", "Deps", "Deps/RetryRevivesOnlyItsOwn"},
		{"prune-leaves-waiting", "Deps", "Deps/PruneCancelsWaiting"},
		{"result-not-recorded", "Results", "Results/ResultRoundTrip"},
		{"progress-no-fencing", "Results", "Results/ProgressFencing"},
		{"progress-clears", "Results", "Results/ProgressFencing"},
		{"periodic-no-cas", "Periodic", "Periodic/StaleFromRefused"},
		{"step-no-fencing", "Steps", "Steps/RecordFenced"},
		{"step-overwrites", "Steps", "Steps/RecordedOnce"},
		{"sleep-counts-attempt", "Steps", "Steps/Sleep"},
		{"spawn-twice", "Steps", "Steps/SpawnOnce"},
		{"await-never-released", "Steps", "Steps/AwaitReleasedByLastChild"},
		{"await-counts-finished", "Steps", "Steps/AwaitChildrenEndAnyWay"},
		{"children-not-cancelled", "Steps", "Steps/CancelParentMidAwait"},
		{"prune-children-early", "Steps", "Steps/PruneKeepsChildrenOfParent"},
		{"claim-per-handle", "Shared", "Shared/ExclusiveClaim"},
		{"fencing-per-handle", "Shared", "Shared/FencingAfterRescue"},
		{"pause-per-handle", "Shared", "Shared/PauseResume"},
		{"settings-per-handle", "Shared", "Shared/MaxRunning"},
		{"rate-starts-per-handle", "Shared", "Shared/RateLimit"},
		{"cancel-per-handle", "Shared", "Shared/CancelRunning"},
		{"unique-per-handle", "Shared", "Shared/UniqueKey"},
	} {
		t.Run(tt.bug, func(t *testing.T) {
			t.Parallel()
			out, err := runMutant(t, tt.bug, tt.run)
			if err == nil {
				t.Fatalf("suite passed a store with bug %q, want a failure in %s; output:\n%s", tt.bug, tt.wantFail, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestSuiteMutant/"+tt.wantFail+" ") {
				t.Errorf("store with bug %q: %s did not fail; output:\n%s", tt.bug, tt.wantFail, out)
			}
		})
	}
}

// runMutant runs the groups matching run (a -test.run pattern below
// TestSuiteMutant) against the reference store with bug, in a child process,
// and returns its output and error.
func runMutant(t *testing.T, bug, run string) ([]byte, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSuiteMutant$/^"+run+"$", "-test.v")
	cmd.Env = append(os.Environ(), mutantEnv+"="+bug)
	return cmd.CombinedOutput()
}

// TestSuiteCatchesUnsharedHandles checks that every shared case fails when
// Harness.Share opens another, empty database instead of a second handle
// on the same one: each case must depend on what the handles share.
func TestSuiteCatchesUnsharedHandles(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the test binary")
	}
	out, err := runMutant(t, "share-not-shared", "Shared")
	if err == nil {
		t.Fatalf("suite passed a harness whose Share opens another database, want every shared case to fail; output:\n%s", out)
	}
	for _, c := range sharedCases {
		if !strings.Contains(string(out), "--- FAIL: TestSuiteMutant/Shared/"+c.name+" ") {
			t.Errorf("Shared/%s passed with handles on two different databases, want a failure; output:\n%s", c.name, out)
		}
	}
}

// BenchmarkSuiteSelf runs Bench against the reference store (slow by design:
// it scans every job on each fetch).
func BenchmarkSuiteSelf(b *testing.B) {
	Bench(b, refHarness(""))
}
