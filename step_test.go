package sortie_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
)

// Checkout is a job whose handler works in steps.
type Checkout struct {
	ID string `json:"id"`
}

func (Checkout) Kind() string { return "checkout" }

// Thumb is a child job that records its number times ten.
type Thumb struct {
	N int `json:"n"`
}

func (Thumb) Kind() string { return "thumb" }

// stepClient returns a client on st with a fake clock and the workers the
// test adds, for Drain.
func stepClient(t *testing.T, st store.Store, add func(w *sortie.Workers), logger *slog.Logger) (*sortie.Client, *clock.Fake) {
	t.Helper()
	return stepClientWith(t, st, &sortie.Config{Logger: logger}, add)
}

// stepClientWith is stepClient with cfg's other fields.
func stepClientWith(t *testing.T, st store.Store, cfg *sortie.Config, add func(w *sortie.Workers)) (*sortie.Client, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	w := sortie.NewWorkers()
	add(w)
	cfg.Workers, cfg.Clock, cfg.RetryPolicy = w, fc, fastRetry()
	return newClient(t, st, cfg), fc
}

func drain(t *testing.T, c *sortie.Client) {
	t.Helper()
	if _, err := c.Drain(context.Background()); err != nil {
		t.Fatalf("Drain() = %v", err)
	}
}

// counter counts calls by name.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) inc(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
	return c.n[name]
}

func (c *counter) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// Each step runs once per job: an attempt after a failure gets the
// recorded results back, the same values the first attempt got.
func TestStepRunsOncePerJob(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		var runs counter
		var mu sync.Mutex
		var seen []string
		c, fc := stepClient(t, st, func(w *sortie.Workers) {
			sortie.AddWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Checkout]) error {
				charge, err := sortie.Step(ctx, "charge", func(ctx context.Context) (string, error) {
					return fmt.Sprintf("ch_%d", runs.inc("charge")), nil
				})
				if err != nil {
					return err
				}
				receipt, err := sortie.Step(ctx, "receipt", func(ctx context.Context) (map[string]int, error) {
					return map[string]int{"n": runs.inc("receipt")}, nil
				})
				if err != nil {
					return err
				}
				mu.Lock()
				seen = append(seen, fmt.Sprint(charge, receipt))
				mu.Unlock()
				if runs.inc("attempt") == 1 {
					return errors.New("ledger down")
				}
				_, err = sortie.Step(ctx, "ledger", func(ctx context.Context) (bool, error) { runs.inc("ledger"); return true, nil })
				return err
			}), nil)
		}, nil)
		id := mustEnqueue(t, c, Checkout{ID: "o1"}, nil)
		drain(t, c)
		fc.Advance(time.Second) // the retry's delay
		drain(t, c)
		row := mustGet(t, c, id)
		if row.State != sortie.JobStateCompleted {
			t.Fatalf("job state = %s, want completed", row.State)
		}
		for _, name := range []string{"charge", "receipt", "ledger"} {
			if n := runs.get(name); n != 1 {
				t.Errorf("step %s ran %d times, want 1", name, n)
			}
		}
		if len(seen) != 2 || seen[0] != seen[1] {
			t.Errorf("values the attempts saw = %q, want the same twice", seen)
		}
		var got []string
		for _, s := range row.Steps {
			got = append(got, fmt.Sprintf("%s@%d", s.Name, s.Attempt))
		}
		if want := "charge@1 receipt@1 ledger@2"; strings.Join(got, " ") != want {
			t.Errorf("JobRow.Steps = %v, want %s", got, want)
		}
	})
}

// The errors of Step: outside a handler, a bad name, a name used twice,
// a result that does not encode or is too large. An error of the step's
// function records nothing, and the name may be tried again.
func TestStepErrors(t *testing.T) {
	t.Parallel()
	if _, err := sortie.Step(context.Background(), "x", func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, sortie.ErrNotInJob) {
		t.Errorf("Step outside a handler: error = %v, want ErrNotInJob", err)
	}
	if err := sortie.Sleep(context.Background(), "x", time.Hour); !errors.Is(err, sortie.ErrNotInJob) {
		t.Errorf("Sleep outside a handler: error = %v, want ErrNotInJob", err)
	}
	eachStore(t, func(t *testing.T, st store.Store) {
		errs := map[string]error{}
		var ranAgain int
		c, _ := stepClientWith(t, st, &sortie.Config{MaxResultBytes: 100}, func(w *sortie.Workers) {
			sortie.AddWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Checkout]) error {
				one := func(context.Context) (int, error) { return 1, nil }
				_, errs["empty"] = sortie.Step(ctx, "", one)
				_, errs["first"] = sortie.Step(ctx, "dup", one)
				_, errs["twice"] = sortie.Step(ctx, "dup", one)
				_, errs["encode"] = sortie.Step(ctx, "chan", func(context.Context) (chan int, error) { return make(chan int), nil })
				_, errs["large"] = sortie.Step(ctx, "large", func(context.Context) (string, error) { return strings.Repeat("x", 200), nil })
				boom := errors.New("boom")
				_, err := sortie.Step(ctx, "flaky", func(context.Context) (int, error) { return 0, boom })
				if err != boom {
					errs["flaky"] = fmt.Errorf("got %v, want boom itself", err)
				}
				_, errs["flaky-again"] = sortie.Step(ctx, "flaky", func(context.Context) (int, error) { ranAgain++; return 2, nil })
				_, errs["await-none"] = sortie.Await(ctx, "nothing")
				return nil
			}), nil)
		})
		mustEnqueue(t, c, Checkout{}, nil)
		drain(t, c)
		for name, want := range map[string]error{
			"empty": sortie.ErrInvalidArgument, "twice": sortie.ErrStepReused, "encode": sortie.ErrInvalidArgument,
			"large": sortie.ErrResultTooLarge, "await-none": sortie.ErrInvalidArgument,
		} {
			if !errors.Is(errs[name], want) {
				t.Errorf("%s: error = %v, want %v", name, errs[name], want)
			}
		}
		for _, name := range []string{"first", "flaky", "flaky-again"} {
			if errs[name] != nil {
				t.Errorf("%s: error = %v, want nil", name, errs[name])
			}
		}
		if ranAgain != 1 {
			t.Errorf("the step retried after its error ran %d times, want 1 (errors %v)", ranAgain, errs)
		}
	})
}

// A step recorded by an attempt whose claim was lost is refused with
// ErrLeaseLost, and the newer attempt's steps stand.
func TestStepFencedAfterRescue(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		c, fc := stepClient(t, st, func(w *sortie.Workers) { w.AddKind("checkout", nil) }, nil)
		id := mustEnqueue(t, c, Checkout{}, nil)
		ctx := context.Background()
		old, err := c.Take(ctx, "default", 1, &sortie.TakeOpts{Wait: -1, Remote: true})
		if err != nil || len(old) != 1 {
			t.Fatalf("Take = %v, %v", old, err)
		}
		fc.Advance(time.Hour)
		if n, err := st.JobRescue(ctx, &store.JobRescueParams{Now: fc.Now(), Limit: 10}); err != nil || n != 1 {
			t.Fatalf("JobRescue = %d, %v", n, err)
		}
		cur, err := c.Take(ctx, "default", 1, &sortie.TakeOpts{Wait: -1, Remote: true})
		if err != nil || len(cur) != 1 {
			t.Fatalf("Take again = %v, %v", cur, err)
		}
		_, err = sortie.Step(old[0].Context(), "charge", func(context.Context) (int, error) { return 1, nil })
		if !errors.Is(err, sortie.ErrLeaseLost) {
			t.Errorf("Step of the stale attempt: error = %v, want ErrLeaseLost", err)
		}
		v, err := sortie.Step(cur[0].Context(), "charge", func(context.Context) (int, error) { return 2, nil })
		if err != nil || v != 2 {
			t.Errorf("Step of the current attempt = %d, %v; want 2", v, err)
		}
		if steps := mustGet(t, c, id).Steps; len(steps) != 1 || steps[0].Attempt != 2 {
			t.Errorf("steps = %+v, want charge recorded by attempt 2", steps)
		}
	})
}

// A durable sleep ends the attempt without counting it; the job holds no
// lease while it sleeps and comes back at its wake time, its earlier
// steps replayed.
func TestSleep(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		var runs counter
		c, fc := stepClient(t, st, func(w *sortie.Workers) {
			sortie.AddWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Checkout]) error {
				if _, err := sortie.Step(ctx, "charge", func(context.Context) (int, error) { return runs.inc("charge"), nil }); err != nil {
					return err
				}
				if err := sortie.Sleep(ctx, "cool-off", 72*time.Hour); err != nil {
					return err
				}
				runs.inc("after")
				return nil
			}), nil)
		}, nil)
		ev := record(t, c)
		id := mustEnqueue(t, c, Checkout{}, nil)
		start := fc.Now()
		drain(t, c)
		row := mustGet(t, c, id)
		if row.State != sortie.JobStateScheduled || row.WaitsFor != "cool-off" || row.Attempt != 0 || !row.RunAt.Equal(start.Add(72*time.Hour)) {
			t.Fatalf("sleeping job: state %s, WaitsFor %q, attempt %d, RunAt %v (errors %v); want scheduled, cool-off, 0, +72h",
				row.State, row.WaitsFor, row.Attempt, row.RunAt, row.Errors)
		}
		if e := ev.finished(t, id, 1); e.Outcome != sortie.OutcomeSnoozed {
			t.Errorf("the sleeping attempt's outcome = %s, want snoozed", e.Outcome)
		}
		fc.Advance(71 * time.Hour)
		if n, _ := c.Drain(context.Background()); n != 0 {
			t.Errorf("Drain before the wake time ran %d attempts, want 0", n)
		}
		fc.Advance(time.Hour)
		drain(t, c)
		row = mustGet(t, c, id)
		if row.State != sortie.JobStateCompleted || row.Attempt != 1 {
			t.Errorf("after the sleep: state %s, attempt %d; want completed, 1", row.State, row.Attempt)
		}
		if runs.get("charge") != 1 || runs.get("after") != 1 {
			t.Errorf("charge ran %d times, the code after the sleep %d; want 1 and 1", runs.get("charge"), runs.get("after"))
		}
	})
}

// A snoozed attempt replays the recorded steps, and SleepUntil sleeps
// until its time: the job comes back then, not before, its steps not run
// again. A SleepUntil whose time has passed returns at once.
func TestSnoozeReplayAndSleepUntil(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		var runs counter
		var wake time.Time
		c, fc := stepClient(t, st, func(w *sortie.Workers) {
			sortie.AddWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Checkout]) error {
				if _, err := sortie.Step(ctx, "charge", func(context.Context) (int, error) { return runs.inc("charge"), nil }); err != nil {
					return err
				}
				if runs.inc("attempt") == 1 {
					return sortie.Snooze(time.Minute)
				}
				if err := sortie.SleepUntil(ctx, "until-monday", wake); err != nil {
					return err
				}
				if err := sortie.SleepUntil(ctx, "already-past", wake.Add(-time.Hour)); err != nil {
					return err
				}
				runs.inc("after")
				return nil
			}), nil)
		}, nil)
		wake = fc.Now().Add(50 * time.Hour)
		id := mustEnqueue(t, c, Checkout{}, nil)
		drain(t, c)
		if row := mustGet(t, c, id); row.State != sortie.JobStateScheduled || row.WaitsFor != "" {
			t.Fatalf("snoozed job: state %s, WaitsFor %q; want scheduled, none", row.State, row.WaitsFor)
		}
		fc.Advance(time.Minute)
		drain(t, c)
		row := mustGet(t, c, id)
		if row.State != sortie.JobStateScheduled || row.WaitsFor != "until-monday" || !row.RunAt.Equal(wake) {
			t.Fatalf("sleeping job: state %s, WaitsFor %q, RunAt %v (errors %v); want scheduled, until-monday, %v",
				row.State, row.WaitsFor, row.RunAt, row.Errors, wake)
		}
		fc.Advance(wake.Sub(fc.Now()) - time.Second)
		if n, _ := c.Drain(context.Background()); n != 0 {
			t.Errorf("Drain a second before the wake time ran %d attempts, want 0", n)
		}
		fc.Advance(time.Second)
		drain(t, c)
		if row := mustGet(t, c, id); row.State != sortie.JobStateCompleted {
			t.Errorf("after the sleep: state %s (errors %v), want completed", row.State, row.Errors)
		}
		if runs.get("charge") != 1 || runs.get("after") != 1 || runs.get("attempt") != 3 {
			t.Errorf("charge ran %d times, the code after the sleeps %d, the handler %d; want 1, 1, 3",
				runs.get("charge"), runs.get("after"), runs.get("attempt"))
		}
	})
}

// A forced stop puts a job back mid-handler, after its first step: the
// next process replays that step and runs only the rest.
func TestStepsReplayAfterForcedStop(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		var runs counter
		charged := make(chan struct{}, 1)
		handler := func(w *sortie.Workers) {
			sortie.AddWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Checkout]) error {
				if _, err := sortie.Step(ctx, "charge", func(context.Context) (int, error) { return runs.inc("charge"), nil }); err != nil {
					return err
				}
				if runs.inc("attempt") == 1 {
					charged <- struct{}{}
					<-ctx.Done() // the forced stop
					return ctx.Err()
				}
				_, err := sortie.Step(ctx, "receipt", func(context.Context) (int, error) { return runs.inc("receipt"), nil })
				return err
			}), nil)
		}
		w := sortie.NewWorkers()
		handler(w)
		first := newClient(t, st, &sortie.Config{Workers: w, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
		if err := first.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		id := mustEnqueue(t, first, Checkout{}, nil)
		<-charged
		forced, cancel := context.WithCancel(context.Background())
		cancel()
		if err := first.Stop(forced); err != nil {
			t.Fatalf("Stop(cancelled ctx) = %v, want nil: the handler returned when cancelled", err)
		}
		if row := mustGet(t, first, id); row.State != sortie.JobStateAvailable || row.Attempt != 0 {
			t.Fatalf("after the forced stop: state %s, attempt %d; want available, 0", row.State, row.Attempt)
		}
		second, _ := stepClient(t, st, handler, nil)
		drain(t, second)
		if row := mustGet(t, second, id); row.State != sortie.JobStateCompleted {
			t.Errorf("after the second process: state %s (errors %v), want completed", row.State, row.Errors)
		}
		if runs.get("charge") != 1 || runs.get("receipt") != 1 {
			t.Errorf("charge ran %d times, receipt %d; want 1 and 1", runs.get("charge"), runs.get("receipt"))
		}
	})
}

// Spawn enqueues children once and Await waits for them: the parent ends
// its attempt, the children run, the last one's end brings the parent
// back, and Await returns each child's result or error in spawn order.
func TestSpawnAwait(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		var runs counter
		var got []sortie.Child
		c, _ := stepClient(t, st, func(w *sortie.Workers) {
			sortie.AddWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Thumb]) error {
				if job.Args.N == 2 {
					return sortie.Cancel(errors.New("no such image"))
				}
				return sortie.SetResult(ctx, job.Args.N*10)
			}), nil)
			sortie.AddWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Checkout]) error {
				runs.inc("parent")
				var kids []sortie.EnqueueParams
				for n := range 3 {
					kids = append(kids, sortie.EnqueueParams{Args: Thumb{N: n}})
				}
				if _, err := sortie.Spawn(ctx, "thumbnails", kids, nil); err != nil {
					return err
				}
				children, err := sortie.Await(ctx, "thumbnails")
				if err != nil {
					return err
				}
				got = children
				return nil
			}), nil)
		}, nil)
		id := mustEnqueue(t, c, Checkout{}, nil)
		drain(t, c)
		if row := mustGet(t, c, id); row.State != sortie.JobStateCompleted {
			t.Fatalf("parent state = %s, want completed", row.State)
		}
		if runs.get("parent") != 2 {
			t.Errorf("parent ran %d attempts, want 2 (before and after the await)", runs.get("parent"))
		}
		if len(got) != 3 {
			t.Fatalf("Await returned %d children, want 3", len(got))
		}
		for i, ch := range got {
			switch i {
			case 2:
				if ch.State != sortie.JobStateCancelled || ch.Err == nil || !strings.Contains(ch.Err.Message, "no such image") {
					t.Errorf("child 2 = %+v, want cancelled with its error", ch)
				}
			default:
				if ch.State != sortie.JobStateCompleted || string(ch.Result) != fmt.Sprint(i*10) {
					t.Errorf("child %d = %+v, want completed with result %d", i, ch, i*10)
				}
			}
		}
		list, err := c.JobList(context.Background(), &sortie.JobListParams{ParentID: id, Limit: 10})
		if err != nil || len(list.Jobs) != 3 {
			t.Errorf("JobList(ParentID) = %v, %v; want 3 jobs (spawned once)", list, err)
		}
	})
}

// A parent cancelled while it awaits cancels the children spawned with
// CancelWithParent.
func TestSpawnCancelWithParent(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		c, _ := stepClient(t, st, func(w *sortie.Workers) {
			sortie.AddWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Checkout]) error {
				kids := []sortie.EnqueueParams{{Args: Thumb{}, Opts: &sortie.EnqueueOpts{Queue: "thumbs"}}}
				if _, err := sortie.Spawn(ctx, "thumbnails", kids, &sortie.SpawnOpts{CancelWithParent: true}); err != nil {
					return err
				}
				_, err := sortie.Await(ctx, "thumbnails")
				return err
			}), nil)
		}, nil)
		id := mustEnqueue(t, c, Checkout{}, nil)
		drain(t, c) // the thumbs queue is not drained: the parent waits
		if row := mustGet(t, c, id); row.State != sortie.JobStateWaiting || row.WaitsFor != "thumbnails" {
			t.Fatalf("parent: state %s, WaitsFor %q; want waiting at thumbnails", row.State, row.WaitsFor)
		}
		if _, err := c.JobCancel(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		list, err := c.JobList(context.Background(), &sortie.JobListParams{ParentID: id, Limit: 10})
		if err != nil || len(list.Jobs) != 1 || list.Jobs[0].State != sortie.JobStateCancelled {
			t.Errorf("children after the parent was cancelled = %v, %v; want one, cancelled", list, err)
		}
	})
}

// A recorded step the code no longer uses (renamed in a deploy) is
// reported when the job completes.
func TestUnusedStepReported(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		var buf syncBuffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
		var runs counter
		c, fc := stepClient(t, st, func(w *sortie.Workers) {
			sortie.AddWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Checkout]) error {
				name := "charge"
				if runs.inc("attempt") > 1 {
					name = "charge-card" // the deploy renamed the step
				}
				if _, err := sortie.Step(ctx, name, func(context.Context) (int, error) { return 1, nil }); err != nil {
					return err
				}
				if runs.get("attempt") == 1 {
					return errors.New("crash")
				}
				return nil
			}), nil)
		}, logger)
		mustEnqueue(t, c, Checkout{}, nil)
		drain(t, c)
		fc.Advance(time.Second) // the retry's delay
		drain(t, c)
		out := buf.String()
		if !strings.Contains(out, "without using steps") || !strings.Contains(out, "charge") {
			t.Errorf("log = %q, want a warning naming the unused step charge", out)
		}
	})
}

// A name recorded as one kind of step and used as another (a Step that
// became a Sleep in a deploy) is refused.
func TestStepKindChanged(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		var runs counter
		var second error
		c, fc := stepClient(t, st, func(w *sortie.Workers) {
			sortie.AddWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Checkout]) error {
				if runs.inc("attempt") == 1 {
					if _, err := sortie.Step(ctx, "wait", func(context.Context) (int, error) { return 1, nil }); err != nil {
						return err
					}
					return errors.New("crash")
				}
				second = sortie.Sleep(ctx, "wait", time.Hour)
				return nil
			}), nil)
		}, nil)
		mustEnqueue(t, c, Checkout{}, nil)
		drain(t, c)
		fc.Advance(time.Second)
		drain(t, c)
		if !errors.Is(second, sortie.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(second), "recorded as a step") {
			t.Errorf("Sleep at a name recorded as a Step: error = %v, want ErrInvalidArgument saying so", second)
		}
	})
}
