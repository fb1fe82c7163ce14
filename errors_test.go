package sortie_test

import (
	"context"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// The common failures' texts, exactly: each layer says what its caller
// cannot know, once.
func TestErrorTexts(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		c := newClient(t, st, &sortie.Config{})
		ctx := context.Background()
		if _, err := c.QueueConfigure(ctx, "small", store.QueueSettings{MaxDepth: 1}); err != nil {
			t.Fatal(err)
		}
		mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{Queue: "small"})
		errText := func(_ any, err error) string {
			if err == nil {
				return "<nil>"
			}
			return err.Error()
		}
		for _, tt := range []struct {
			name, got, want string
		}{
			{"get", errText(c.JobGet(ctx, 42)), "job 42: sortie: job not found"},
			{"retry", errText(c.JobRetry(ctx, 42)), "job 42: sortie: job not found"},
			{"cancel", errText(c.JobCancel(ctx, 42)), "job 42: sortie: job not found"},
			{"delete", errText(c.JobDelete(ctx, 42)), "job 42: sortie: job not found"},
			{"priority", errText(c.Enqueue(ctx, Msg{}, &sortie.EnqueueOpts{Priority: 9})),
				`sortie: EnqueueOpts.Priority of kind "msg" must be between 1 and 4, got 9`},
			{"max attempts", errText(c.Enqueue(ctx, Msg{}, &sortie.EnqueueOpts{MaxAttempts: -1})),
				`sortie: EnqueueOpts.MaxAttempts of kind "msg" must be between 1 and 1000000, got -1`},
			{"run at", errText(c.Enqueue(ctx, Msg{}, &sortie.EnqueueOpts{RunAt: time.Now(), RunIn: time.Hour})),
				`sortie: EnqueueOpts of kind "msg": set RunAt or RunIn, not both`},
			{"queue setting", errText(c.QueueConfigure(ctx, "q", store.QueueSettings{MaxRunning: -1})),
				`sortie: settings of queue "q": MaxRunning must not be negative, got -1`},
			{"take", errText(c.Take(ctx, "q", 0, nil)), "sortie: Take: n must be 1 to 1000, got 0"},
		} {
			if tt.got != tt.want {
				t.Errorf("%s:\n got %s\nwant %s", tt.name, tt.got, tt.want)
			}
		}
		_, err := sortie.NewClient(st, &sortie.Config{Queues: map[string]sortie.QueueConfig{"mail": {}}})
		if got, want := errText(nil, err), `sortie: Config.Queues["mail"].MaxWorkers must be at least 1, got 0`; got != want {
			t.Errorf("config:\n got %s\nwant %s", got, want)
		}
		_, err = c.Enqueue(ctx, Msg{}, &sortie.EnqueueOpts{Queue: "small"})
		if got, want := errText(nil, err), `sortie: queue "small" is full: it holds at most 1 queued jobs, has 1 and was given 1 more`; got != want {
			t.Errorf("enqueue into a full queue:\n got %s\nwant %s", got, want)
		}
	})
}
