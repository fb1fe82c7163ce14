package sortie_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/delayproxy"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store/redisstore"
)

// An outcome whose reply the network lost, after Redis applied it, is
// sent again under the same claim token: the store answers with the
// recorded result, so the client reports it applied: one finished event,
// no "discarded" line, the job completed once. A proxy between the
// client and Redis drops the completion's reply and its connection.
func TestOutcomeWhoseReplyWasLostIsReportedApplied(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(redistest.StoreURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := delayproxy.Start(u.Host, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	ctx := context.Background()
	st, err := redisstore.Open(ctx, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	logs := &syncBuffer{}
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), nil)
	c := startClient(t, st, &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ev := record(t, c)
	// The completion's reply: sortie_finish answers the state it left.
	lost := proxy.LoseReply([]byte("$9\r\ncompleted\r\n"))
	id := mustEnqueue(t, c, Msg{Text: "once"}, nil)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the completion's reply never went through the proxy")
	}
	if fin := ev.finished(t, id, 1); fin.Outcome != sortie.OutcomeCompleted {
		t.Fatalf("finished event outcome %q, want completed", fin.Outcome)
	}
	ev.mu.Lock()
	n := 0
	for _, e := range ev.all {
		if e.Kind == sortie.EventJobFinished && e.Job.ID == id {
			n++
		}
	}
	ev.mu.Unlock()
	if n != 1 {
		t.Errorf("%d finished events for job %d, want 1", n, id)
	}
	if strings.Contains(logs.String(), "discarded") {
		t.Errorf("a lost reply was logged as a discarded outcome:\n%s", logs.String())
	}
	row, err := c.JobGet(ctx, id)
	if err != nil || row.State != sortie.JobStateCompleted || row.Attempt != 1 {
		t.Fatalf("job after the lost reply: %+v, %v; want completed at attempt 1", row, err)
	}
}
