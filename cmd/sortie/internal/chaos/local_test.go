package chaos

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/store"
)

// A local is a client of the test process working one queue of Sleep jobs,
// for the scenarios that run in one process.
type local struct {
	client *sortie.Client
	logs   *logBuffer
	// completed counts the completions the store recorded.
	completed atomic.Int64
	// progress is signalled after each recorded completion.
	progress chan struct{}
}

// startLocal starts a client on st working queue with workers handlers of
// Sleep jobs running handle, and a lease of lease; its log goes to
// l.logs. The test's cleanup stops it if the test did not.
func startLocal(t *testing.T, st store.Store, queue string, workers int, lease time.Duration,
	handle func(ctx context.Context, job *sortie.Job[Sleep]) error) *local {
	t.Helper()
	l := &local{logs: &logBuffer{}, progress: make(chan struct{}, 1)}
	ws := sortie.NewWorkers()
	sortie.AddWorker(ws, sortie.WorkFunc(handle), nil)
	h := slog.NewTextHandler(l.logs, &slog.HandlerOptions{Level: slog.LevelInfo})
	client, err := sortie.NewClient(st, &sortie.Config{
		Queues:            map[string]sortie.QueueConfig{queue: {MaxWorkers: workers}},
		Workers:           ws,
		Logger:            slog.New(skipHandler{h}),
		Lease:             lease,
		HeartbeatInterval: lease / 10,
		RescueInterval:    childRescue,
		PollInterval:      childPoll,
	})
	if err != nil {
		t.Fatal(err)
	}
	unsubscribe := client.Subscribe(func(e *sortie.Event) {
		if e.Kind == sortie.EventJobFinished && e.Outcome == sortie.OutcomeCompleted {
			l.completed.Add(1)
			select {
			case l.progress <- struct{}{}:
			default:
			}
		}
	})
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.client = client
	t.Cleanup(func() {
		unsubscribe()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A second Stop returns at once.
		within(t, 15*time.Second, "Stop with a 10s deadline", func() { _ = client.Stop(ctx) })
	})
	return l
}

// waitCompleted waits until the store recorded n completions of l's jobs.
// It fails t once none came for stall.
func (l *local) waitCompleted(t *testing.T, n int64, stall time.Duration) {
	t.Helper()
	idle := time.NewTimer(stall)
	defer idle.Stop()
	for l.completed.Load() < n {
		select {
		case <-l.progress:
			idle.Reset(stall)
		case <-idle.C:
			t.Fatalf("%d jobs completed, want %d: none for %s; the client's log:\n%s", l.completed.Load(), n, stall, l.logs.tail(30))
		}
	}
}

// enqueueLocal enqueues n Sleep jobs of args into queue through st, and
// returns their IDs.
func enqueueLocal(ctx context.Context, st store.Store, queue string, n int, args Sleep) ([]int64, error) {
	c, err := sortie.NewClient(st, &sortie.Config{Logger: quietLogger})
	if err != nil {
		return nil, err
	}
	batch := make([]sortie.EnqueueParams, n)
	for i := range batch {
		batch[i] = sortie.EnqueueParams{Args: args, Opts: &sortie.EnqueueOpts{Queue: queue}}
	}
	res, err := c.EnqueueMany(ctx, batch)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids, nil
}

// logBuffer collects a client's log lines; it is safe for concurrent use.
type logBuffer struct{ testkit.LogBuffer }

// count returns how many lines have the message msg.
func (l *logBuffer) count(msg string) int {
	return strings.Count(l.String(), "msg="+quoteLogValue(msg))
}

func (l *logBuffer) tail(n int) string {
	lines := strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// within runs fn and waits for it for at most d: past d, it fails t saying
// what did not return, and leaves fn running, so that a scenario that finds
// a hang fails instead of hanging the suite.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%s did not return within %s; the goroutines of sortie:\n%s", what, d, sortieStacks(string(buf)))
	}
}

// has reports whether a line of the log satisfies match.
func (l *logBuffer) has(match func(line string) bool) bool {
	for line := range strings.SplitSeq(l.String(), "\n") {
		if match(line) {
			return true
		}
	}
	return false
}

// sortieStacks returns the goroutines of a stack dump that run sortie's
// code outside this package, to say where something hangs.
func sortieStacks(dump string) string {
	var out []string
	for g := range strings.SplitSeq(dump, "\n\n") {
		if strings.Contains(g, "github.com/sortiehq/sortie.") || strings.Contains(g, "github.com/sortiehq/sortie/store/") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
