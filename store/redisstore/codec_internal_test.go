package redisstore

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/store"
)

// encodeRow writes what decodeRow reads back: every field of a job, in
// every state, as JobList returns it.
func TestEncodeRowDecodesBack(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 123000, time.UTC)
	base := func(st store.JobState) *store.JobRow {
		return &store.JobRow{ID: 42, Kind: "k", Queue: "q:1", Args: []byte(`{"a":[1,2]}`), State: st, Priority: store.PriorityDefault,
			MaxAttempts: store.MaxAttemptsDefault, RunAt: at, CreatedAt: at}
	}
	running := base(store.JobStateRunning)
	running.Attempt, running.ClaimToken, running.LeaseUntil, running.AttemptedAt, running.AttemptedBy = 3, 9, at.Add(time.Minute), at, "w"
	running.Progress, running.CancelRequested, running.PartitionKey, running.UniqueKey = 12.5, true, "tenant", "u"
	firstRun := base(store.JobStateRunning)
	firstRun.ClaimToken, firstRun.LeaseUntil = 1, at // attempt 0: stored as -1
	completed := base(store.JobStateCompleted)
	completed.Attempt, completed.FinalizedAt, completed.Result, completed.Priority = 1, at, []byte{}, store.PriorityLowest
	completed.Tags, completed.Meta, completed.Timeout = []string{"x", "y"}, []byte(`{"m":"é"}`), time.Second
	cancelled := base(store.JobStateCancelled)
	cancelled.DependsOn, cancelled.CancelledBy, cancelled.WorkflowID, cancelled.FinalizedAt, cancelled.IgnoreDepFailure = []int64{7, 9}, 9, 7, at, true
	cancelled.Errors = []store.AttemptError{{Attempt: 1, At: at, Message: "a\nb <&>", Stack: "s"}, {Message: "no time"}}
	cancelled.CreatedAt, cancelled.MaxAttempts = at.Add(-time.Hour), 1
	for _, want := range []*store.JobRow{running, firstRun, completed, cancelled, base(store.JobStateWaiting)} {
		f, err := encodeRow(want)
		if err != nil {
			t.Fatalf("encodeRow(%s job) error: %v", want.State, err)
		}
		kv := make([]string, len(f))
		for i, v := range f {
			kv[i] = v.(string)
		}
		got, err := decodeRow(want.ID, kv)
		if err != nil {
			t.Fatalf("decodeRow(encodeRow(%s job)) error: %v", want.State, err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s job through encodeRow and decodeRow (-want +got):\n%s", want.State, d)
		}
	}
}
