package sortietest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/sortietest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type Welcome struct {
	Email string `json:"email"`
}

func (Welcome) Kind() string { return "welcome" }

func TestFakeClockDrivesScheduledJobsAndRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var sent []string
	fails := 1
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Welcome]) error {
		if fails > 0 {
			fails--
			return errors.New("smtp down")
		}
		sent = append(sent, job.Args.Email)
		return nil
	}), nil)
	tc := sortietest.NewClient(t, &sortie.Config{Workers: workers})

	if _, err := tc.Enqueue(ctx, Welcome{Email: "a@example.com"}, &sortie.EnqueueOpts{RunIn: time.Hour}); err != nil {
		t.Fatal(err)
	}
	job := sortietest.RequireEnqueued(t, tc.Client, func(j *sortie.Job[Welcome]) bool { return j.Args.Email == "a@example.com" })
	if job.State != sortie.JobStateScheduled {
		t.Fatalf("state %s, want scheduled", job.State)
	}
	if n, err := tc.Drain(ctx); n != 0 || err != nil {
		t.Fatalf("Drain before RunAt ran %d jobs (%v), want 0", n, err)
	}
	tc.Clock.Advance(time.Hour)
	if n, err := tc.Drain(ctx); n != 1 || err != nil {
		t.Fatalf("Drain at RunAt ran %d jobs (%v), want 1 (which fails)", n, err)
	}
	retry := sortietest.RequireEnqueuedN[Welcome](t, tc.Client, 1)[0]
	if retry.State != sortie.JobStateRetrying || len(retry.Errors) != 1 {
		t.Fatalf("after a failure: state %s with %d errors, want retrying with 1", retry.State, len(retry.Errors))
	}
	tc.Clock.Set(retry.RunAt)
	if n, err := tc.Drain(ctx); n != 1 || err != nil {
		t.Fatalf("Drain at the retry's RunAt ran %d jobs (%v), want 1", n, err)
	}
	if len(sent) != 1 || sent[0] != "a@example.com" {
		t.Fatalf("sent %v, want the one welcome email", sent)
	}
	sortietest.RequireNotEnqueued[Welcome](t, tc.Client, nil)
}

func TestWorkRunsAWorkerInline(t *testing.T) {
	t.Parallel()
	w := sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Welcome]) error {
		if job.Args.Email == "" {
			return sortie.Cancel(errors.New("no address"))
		}
		return nil
	})
	if err := sortietest.Work(context.Background(), w, Welcome{Email: "b@example.com"}); err != nil {
		t.Fatalf("Work() = %v, want nil", err)
	}
	if err := sortietest.Work(context.Background(), w, Welcome{}); !sortie.IsCancel(err) {
		t.Fatalf("Work() = %v, want a Cancel outcome", err)
	}
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = true
	r.msg = format
	panic(r)
}

func TestRequireEnqueuedFailsWhenMissing(t *testing.T) {
	t.Parallel()
	tc := sortietest.NewClient(t, nil)
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil && p != r {
				panic(p)
			}
		}()
		sortietest.RequireEnqueued[Welcome](r, tc.Client, nil)
	}()
	if !r.failed {
		t.Fatal("RequireEnqueued passed with no job enqueued")
	}
}
