package sortie_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
)

// A remote worker records a step under its claim token, and the attempt
// after a rescue finds it recorded: RecordStep of the same name records
// nothing and returns the first result; the stale claim records nothing.
func TestRecordStepRemote(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		fc := clock.NewFake(takeStart)
		c := newClient(t, st, &sortie.Config{Clock: fc, MaxResultBytes: 64})
		id := mustEnqueue(t, c, Remote{}, nil)
		ctx := context.Background()
		old, err := c.Take(ctx, "default", 1, &sortie.TakeOpts{Remote: true, Lease: time.Second})
		if err != nil || len(old) != 1 {
			t.Fatalf("Take() = %d jobs, %v", len(old), err)
		}
		rec, err := c.RecordStep(ctx, id, old[0].ClaimToken, "charge", []byte(`{"charge":"ch_1"}`))
		if err != nil || rec.Existed || string(rec.Step.Result) != `{"charge":"ch_1"}` || rec.Step.Attempt != 1 {
			t.Fatalf("RecordStep(charge) = %+v, %v; want recorded by attempt 1", rec, err)
		}
		for _, tt := range []struct {
			name, step, result string
			token              int64
			want               error
		}{
			{"empty name", "", `1`, old[0].ClaimToken, sortie.ErrInvalidArgument},
			{"not JSON", "x", `{`, old[0].ClaimToken, sortie.ErrInvalidArgument},
			{"too large", "x", `"` + strings.Repeat("a", 64) + `"`, old[0].ClaimToken, sortie.ErrResultTooLarge},
			{"no token", "x", `1`, 0, sortie.ErrInvalidArgument},
		} {
			if _, err := c.RecordStep(ctx, id, tt.token, tt.step, []byte(tt.result)); !errors.Is(err, tt.want) {
				t.Errorf("RecordStep(%s) error = %v, want %v", tt.name, err, tt.want)
			}
		}
		if _, err := st.JobRescue(ctx, &store.JobRescueParams{Now: takeStart.Add(time.Minute), Limit: 10}); err != nil {
			t.Fatal(err)
		}
		fc.Advance(time.Minute)
		fresh, err := c.Take(ctx, "default", 1, &sortie.TakeOpts{Remote: true, Wait: -1})
		if err != nil || len(fresh) != 1 {
			t.Fatalf("Take() after the rescue = %d jobs, %v", len(fresh), err)
		}
		if _, err := c.RecordStep(ctx, id, old[0].ClaimToken, "receipt", []byte(`1`)); !errors.Is(err, sortie.ErrLeaseLost) {
			t.Errorf("RecordStep with the stale claim = %v, want ErrLeaseLost", err)
		}
		again, err := c.RecordStep(ctx, id, fresh[0].ClaimToken, "charge", []byte(`{"charge":"ch_2"}`))
		if err != nil || !again.Existed || string(again.Step.Result) != `{"charge":"ch_1"}` || again.Step.Attempt != 1 {
			t.Fatalf("RecordStep(charge) again = %+v, %v; want the first record", again, err)
		}
		list, err := c.JobSteps(ctx, id)
		if err != nil || len(list) != 1 || list[0].Name != "charge" {
			t.Fatalf("JobSteps() = %+v, %v; want charge only", list, err)
		}
		if _, err := c.JobSteps(ctx, 987654); !errors.Is(err, sortie.ErrNotFound) {
			t.Errorf("JobSteps(unknown) = %v, want ErrNotFound", err)
		}
		if _, err := c.RecordStep(ctx, 987654, 5, "x", []byte(`1`)); !errors.Is(err, sortie.ErrNotFound) {
			t.Errorf("RecordStep(unknown job) = %v, want ErrNotFound", err)
		}
	})
}
