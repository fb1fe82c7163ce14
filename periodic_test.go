package sortie_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store"
)

// Tick is the args of the periodic jobs in these tests.
type Tick struct {
	Slot time.Time `json:"slot"`
}

func (Tick) Kind() string { return "tick" }

func tickArgs(slot time.Time) sortie.JobArgs { return Tick{Slot: slot} }

// periodicT0 is where the tests' clocks start: between two minutes.
var periodicT0 = time.Date(2024, 3, 9, 12, 0, 10, 0, time.UTC)

func minute(n int) time.Time { return time.Date(2024, 3, 9, 12, n, 0, 0, time.UTC) }

func periodicKey(name string, slot time.Time) string {
	return "periodic:" + name + ":" + slot.UTC().Format(time.RFC3339)
}

// periodicConfig is a client config whose only timer before tomorrow is the
// periodic scheduler's, so NextDeadline tells what it waits for.
func periodicConfig(fc *clock.Fake, jobs ...*sortie.PeriodicJob) *sortie.Config {
	return &sortie.Config{Clock: fc, Periodic: jobs, Lease: 24 * time.Hour, RescueInterval: 24 * time.Hour}
}

// waitArmed waits until fc's earliest timer is at want: the scheduler has
// done everything due before and waits for the slot want.
func waitArmed(t *testing.T, fc *clock.Fake, want time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := fc.AwaitDeadline(ctx, want.Equal); err != nil {
		got, ok := fc.NextDeadline()
		t.Fatalf("fake clock's next deadline = %v (armed %v), want the scheduler waiting for %s", got, ok, want)
	}
}

// tickKeys returns the unique keys of every tick job in the store, sorted.
func tickKeys(t *testing.T, c *sortie.Client) []string {
	t.Helper()
	res, err := c.JobList(context.Background(), &sortie.JobListParams{Kind: "tick", Limit: 1000})
	if err != nil {
		t.Fatalf("JobList() = %v", err)
	}
	var keys []string
	for _, j := range res.Jobs {
		var args Tick
		if err := json.Unmarshal(j.Args, &args); err != nil {
			t.Fatalf("job %d args %s: %v", j.ID, j.Args, err)
		}
		if want := periodicKey("tick", args.Slot); j.UniqueKey != want {
			t.Fatalf("job %d has UniqueKey %q and args for slot %s, want key %q", j.ID, j.UniqueKey, args.Slot, want)
		}
		keys = append(keys, j.UniqueKey)
	}
	slices.Sort(keys)
	return keys
}

func keysOf(name string, slots ...time.Time) []string {
	keys := []string{}
	for _, s := range slots {
		keys = append(keys, periodicKey(name, s))
	}
	slices.Sort(keys)
	return keys
}

func lastSlot(t *testing.T, st store.Store, name string) time.Time {
	t.Helper()
	rows, err := st.PeriodicList(context.Background(), &store.PeriodicListParams{})
	if err != nil {
		t.Fatalf("PeriodicList() = %v", err)
	}
	for _, r := range rows {
		if r.Name == name {
			return r.Last
		}
	}
	return time.Time{}
}

func enqueuedKey(key string) func(*sortie.Event) bool {
	return func(ev *sortie.Event) bool { return ev.Kind == sortie.EventJobEnqueued && ev.Job.UniqueKey == key }
}

func TestPeriodicIntervalEnqueuesEachSlotOnce(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		fc := clock.NewFake(periodicT0)
		c := startClient(t, st, periodicConfig(fc, &sortie.PeriodicJob{Name: "tick", Interval: time.Minute, Args: tickArgs}))
		ev := record(t, c)
		// Never advanced: the first slot is the next one (12:01), not 12:00.
		for _, slot := range []time.Time{minute(1), minute(2), minute(3)} {
			waitArmed(t, fc, slot)
			fc.Set(slot)
			ev.waitFor(t, 10*time.Second, "enqueue of slot "+slot.String(), enqueuedKey(periodicKey("tick", slot)))
		}
		waitArmed(t, fc, minute(4))
		if got, want := tickKeys(t, c), keysOf("tick", minute(1), minute(2), minute(3)); !slices.Equal(got, want) {
			t.Fatalf("jobs in store %q, want %q", got, want)
		}
		if got := lastSlot(t, st, "tick"); !got.Equal(minute(3)) {
			t.Fatalf("schedule's last slot = %s, want %s", got, minute(3))
		}
		schedules, err := c.PeriodicList(context.Background())
		if err != nil || len(schedules) != 1 || schedules[0].Name != "tick" || !schedules[0].Last.Equal(minute(3)) {
			t.Fatalf("PeriodicList = %+v, %v; want tick with last slot %s", schedules, err, minute(3))
		}
	})
}

func TestPeriodicTwoClientsEnqueueEachSlotOnce(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		// Each client has its own clock, so the test can tell each one's
		// scheduler is waiting and move them separately.
		fc1, fc2 := clock.NewFake(periodicT0), clock.NewFake(periodicT0)
		pj := func() *sortie.PeriodicJob {
			return &sortie.PeriodicJob{Name: "tick", Interval: time.Minute, Args: tickArgs}
		}
		c1 := startClient(t, st, periodicConfig(fc1, pj()))
		c2 := startClient(t, st, periodicConfig(fc2, pj()))

		// Both clients reach 12:01 at once.
		waitArmed(t, fc1, minute(1))
		waitArmed(t, fc2, minute(1))
		fc1.Set(minute(1))
		fc2.Set(minute(1))
		waitArmed(t, fc1, minute(2))
		waitArmed(t, fc2, minute(2))
		if got, want := tickKeys(t, c1), keysOf("tick", minute(1)); !slices.Equal(got, want) {
			t.Fatalf("after 12:01 the store holds %q, want %q", got, want)
		}

		// c1 reaches 12:02 first and its job is worked and deleted, so no
		// pending job holds the unique key when c2 gets there: only the
		// schedule's persisted last slot stops c2 from enqueueing it again.
		ev2 := record(t, c2)
		fc1.Set(minute(2))
		waitArmed(t, fc1, minute(3))
		res, err := c1.JobList(context.Background(), &sortie.JobListParams{Kind: "tick"})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range res.Jobs {
			if _, err := c1.JobDelete(context.Background(), j.ID); err != nil {
				t.Fatalf("JobDelete(%d) = %v", j.ID, err)
			}
		}
		fc2.Set(minute(2))
		waitArmed(t, fc2, minute(3))
		if got := tickKeys(t, c1); len(got) != 0 {
			t.Fatalf("c2 enqueued %q for a slot c1 already enqueued", got)
		}
		ev2.mu.Lock()
		n := len(ev2.all)
		ev2.mu.Unlock()
		if n != 0 {
			t.Fatalf("c2 published %d events, want none", n)
		}
		if got := lastSlot(t, st, "tick"); !got.Equal(minute(2)) {
			t.Fatalf("schedule's last slot = %s, want %s", got, minute(2))
		}
	})
}

func TestPeriodicMisfireAfterRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		misfire sortie.Misfire
		max     int
		want    []time.Time
	}{
		{"run once", sortie.MisfireRunOnce, 0, []time.Time{minute(4)}},
		{"skip", sortie.MisfireSkip, 0, nil},
		{"catch up", sortie.MisfireCatchUp, 2, []time.Time{minute(3), minute(4)}},
		{"catch up all", sortie.MisfireCatchUp, 0, []time.Time{minute(2), minute(3), minute(4)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eachStore(t, func(t *testing.T, st store.Store) {
				fc := clock.NewFake(periodicT0)
				pj := &sortie.PeriodicJob{Name: "tick", Interval: time.Minute, Args: tickArgs, Misfire: tt.misfire, CatchUpMax: tt.max}
				c1 := startClient(t, st, periodicConfig(fc, pj))
				ev := record(t, c1)
				waitArmed(t, fc, minute(1))
				fc.Set(minute(1))
				ev.waitFor(t, 10*time.Second, "enqueue of 12:01", enqueuedKey(periodicKey("tick", minute(1))))
				waitArmed(t, fc, minute(2))
				if err := c1.Stop(context.Background()); err != nil {
					t.Fatalf("Stop() = %v", err)
				}
				if _, ok := fc.NextDeadline(); ok {
					t.Fatal("a timer is still armed after Stop")
				}

				// Nothing runs through 12:02, 12:03 and 12:04.
				fc.Set(minute(4).Add(30 * time.Second))
				c2 := startClient(t, st, periodicConfig(fc, pj))
				waitArmed(t, fc, minute(5))
				want := keysOf("tick", append([]time.Time{minute(1)}, tt.want...)...)
				if got := tickKeys(t, c2); !slices.Equal(got, want) {
					t.Fatalf("jobs after restart %q, want %q", got, want)
				}
				if got := lastSlot(t, st, "tick"); !got.Equal(minute(4)) {
					t.Fatalf("schedule's last slot = %s, want %s", got, minute(4))
				}
			})
		})
	}
}

func TestPeriodicCron(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		cron  string
		loc   *time.Location
		start time.Time
		slots []time.Time
	}{
		{"5 fields", "*/15 * * * *", nil, periodicT0, []time.Time{minute(15), minute(30)}},
		{"6 fields", "30 * * * * *", nil, periodicT0, []time.Time{minute(0).Add(30 * time.Second), minute(1).Add(30 * time.Second)}},
		{"descriptor", "@hourly", nil, periodicT0, []time.Time{minute(60), minute(120)}},
		// 9:00 in New York is 14:00 UTC on Saturday 9 March 2024, and 13:00
		// UTC on Sunday, daylight saving time having started.
		{"CRON_TZ", "CRON_TZ=America/New_York 0 9 * * *", nil, periodicT0, []time.Time{
			time.Date(2024, 3, 9, 14, 0, 0, 0, time.UTC), time.Date(2024, 3, 10, 13, 0, 0, 0, time.UTC),
		}},
		{"Location", "0 9 * * *", ny, periodicT0, []time.Time{
			time.Date(2024, 3, 9, 14, 0, 0, 0, time.UTC), time.Date(2024, 3, 10, 13, 0, 0, 0, time.UTC),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eachStore(t, func(t *testing.T, st store.Store) {
				fc := clock.NewFake(tt.start)
				cfg := periodicConfig(fc, &sortie.PeriodicJob{Name: "tick", Cron: tt.cron, Location: tt.loc, Args: tickArgs})
				// Daily slots are further away than the heartbeat.
				cfg.Lease, cfg.RescueInterval = 1000*time.Hour, 1000*time.Hour
				c := startClient(t, st, cfg)
				ev := record(t, c)
				for _, slot := range tt.slots {
					waitArmed(t, fc, slot)
					fc.Set(slot)
					e := ev.waitFor(t, 10*time.Second, "enqueue of slot "+slot.String(), enqueuedKey(periodicKey("tick", slot)))
					var args Tick
					if err := json.Unmarshal(e.Job.Args, &args); err != nil {
						t.Fatal(err)
					}
					if !args.Slot.Equal(slot) {
						t.Fatalf("Args got slot %s, want %s", args.Slot, slot)
					}
				}
				if got, want := tickKeys(t, c), keysOf("tick", tt.slots...); !slices.Equal(got, want) {
					t.Fatalf("jobs in store %q, want %q", got, want)
				}
			})
		})
	}
}

func TestPeriodicThroughEnqueueMiddleware(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		fc := clock.NewFake(periodicT0)
		cfg := periodicConfig(fc, &sortie.PeriodicJob{Name: "tick", Interval: time.Minute, Args: tickArgs})
		cfg.EnqueueMiddleware = []sortie.EnqueueMiddleware{func(next sortie.EnqueueFunc) sortie.EnqueueFunc {
			return func(ctx context.Context, jobs []*sortie.NewJob) ([]sortie.EnqueueResult, error) {
				for _, j := range jobs {
					j.Tags = append(j.Tags, "via-middleware")
				}
				return next(ctx, jobs)
			}
		}}
		c := startClient(t, st, cfg)
		ev := record(t, c)
		waitArmed(t, fc, minute(1))
		fc.Set(minute(1))
		e := ev.waitFor(t, 10*time.Second, "enqueue of 12:01", enqueuedKey(periodicKey("tick", minute(1))))
		row := mustGet(t, c, e.Job.ID)
		if !slices.Equal(row.Tags, []string{"via-middleware"}) {
			t.Fatalf("periodic job's tags = %q, want the middleware's tag", row.Tags)
		}
	})
}

func TestPeriodicStoreFailureDelaysButKeepsSlot(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, inner store.Store) {
		st := storefault.New(inner)
		fc := clock.NewFake(periodicT0)
		c := startClient(t, st, periodicConfig(fc, &sortie.PeriodicJob{Name: "tick", Interval: time.Minute, Args: tickArgs, Misfire: sortie.MisfireSkip}))
		ev := record(t, c)
		waitArmed(t, fc, minute(1))
		st.Fail("PeriodicAdvance", nil)
		fc.Set(minute(1))
		// The scheduler backs off on the client's clock: each retry waits
		// for the clock to reach the backoff's end.
		for n := 1; ; n++ {
			retry := awaitBackoff(t, fc)
			if got := st.Calls("PeriodicAdvance"); got != n {
				t.Fatalf("PeriodicAdvance called %d times before backoff %d ended, want %d", got, n, n)
			}
			if n == 3 {
				st.Heal()
			}
			fc.Set(retry)
			if n == 3 {
				break
			}
		}
		// The slot that came while the client ran is enqueued even with
		// MisfireSkip: an unreachable store delays it, never drops it.
		ev.waitFor(t, 10*time.Second, "enqueue of 12:01", enqueuedKey(periodicKey("tick", minute(1))))
		waitArmed(t, fc, minute(2))
	})
}

func TestPeriodicValidation(t *testing.T) {
	t.Parallel()
	ok := func() *sortie.PeriodicJob {
		return &sortie.PeriodicJob{Name: "nightly", Cron: "0 3 * * *", Args: tickArgs}
	}
	with := func(f func(*sortie.PeriodicJob)) *sortie.PeriodicJob {
		pj := ok()
		f(pj)
		return pj
	}
	tests := []struct {
		name string
		jobs []*sortie.PeriodicJob
		want string
	}{
		{"nil", []*sortie.PeriodicJob{nil}, "Config.Periodic[0] is nil"},
		{"no name", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Name = "" })}, "Config.Periodic[0].Name: is empty"},
		{"bad name", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Name = "night ly" })}, `Config.Periodic[0] ("night ly").Name: "night ly" may only contain`},
		{"duplicate", []*sortie.PeriodicJob{ok(), ok()}, `Config.Periodic[1] ("nightly").Name is also the name of Config.Periodic[0]`},
		{"neither", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Cron = "" })}, `Config.Periodic[0] ("nightly"): set Cron or Interval`},
		{"both", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Interval = time.Hour })}, `Config.Periodic[0] ("nightly"): set Cron or Interval, not both`},
		{"short interval", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Cron, p.Interval = "", 500*time.Millisecond })}, `Config.Periodic[0] ("nightly").Interval must be at least 1s, got 500ms`},
		{"sub-millisecond interval", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Cron, p.Interval = "", time.Second+time.Microsecond })}, `.Interval must be a whole number of milliseconds`},
		{"interval with location", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Cron, p.Interval, p.Location = "", time.Hour, time.UTC })}, `("nightly").Location: applies to Cron only`},
		{"bad cron", []*sortie.PeriodicJob{ok(), with(func(p *sortie.PeriodicJob) { p.Name, p.Cron = "other", "0 3 * *" })}, `Config.Periodic[1] ("other").Cron: cron spec "0 3 * *": has 4 fields`},
		{"bad zone", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Cron = "CRON_TZ=Nowhere/Land 0 3 * * *" })}, `("nightly").Cron: cron spec "CRON_TZ=Nowhere/Land 0 3 * * *": unknown time zone "Nowhere/Land"`},
		{"no args", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Args = nil })}, `("nightly").Args is nil`},
		{"negative catch-up", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.CatchUpMax = -1 })}, `("nightly").CatchUpMax must not be negative, got -1`},
		{"unknown misfire", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Misfire = 7 })}, `("nightly").Misfire is 7`},
		{"unique key", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Opts = &sortie.EnqueueOpts{UniqueKey: "k"} })}, `("nightly").Opts.UniqueKey must be empty`},
		{"run at", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Opts = &sortie.EnqueueOpts{RunAt: periodicT0} })}, `("nightly").Opts.RunAt must be zero`},
		{"priority", []*sortie.PeriodicJob{with(func(p *sortie.PeriodicJob) { p.Opts = &sortie.EnqueueOpts{Priority: 9} })}, `("nightly").Opts.Priority must be 1 to 4, got 9`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := sortie.NewClient(memstoreFor(t), &sortie.Config{Periodic: tt.jobs, Logger: quietLogger()})
			if !errors.Is(err, sortie.ErrInvalidArgument) {
				t.Fatalf("NewClient() = %v, want ErrInvalidArgument", err)
			}
			if !strings.HasPrefix(err.Error(), "sortie: ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewClient() = %q, want it to contain %q", err, tt.want)
			}
		})
	}

	t.Run("valid", func(t *testing.T) {
		t.Parallel()
		jobs := []*sortie.PeriodicJob{
			ok(),
			{Name: "every-minute", Interval: time.Minute, Args: tickArgs, Misfire: sortie.MisfireCatchUp},
			{Name: "ny", Cron: "TZ=America/New_York 30 0 9 * * MON-FRI", Args: tickArgs, Opts: &sortie.EnqueueOpts{Queue: "reports", RunIn: time.Minute}},
		}
		if _, err := sortie.NewClient(memstoreFor(t), &sortie.Config{Periodic: jobs, Logger: quietLogger()}); err != nil {
			t.Fatalf("NewClient() = %v", err)
		}
	})
}

// memstoreFor returns a fresh store of the first factory (memstore).
func memstoreFor(t *testing.T) store.Store { return storeFactories[0].new(t) }

func TestPeriodicLateWakeUp(t *testing.T) {
	t.Parallel()
	// The client runs, waiting for 12:01, and next sees the time at 12:03:30
	// (a suspended machine, or a store down for minutes): 12:01 came while it
	// ran and is enqueued; 12:02 and 12:03 were missed and go by the policy.
	tests := []struct {
		name    string
		misfire sortie.Misfire
		want    []time.Time
	}{
		{"run once", sortie.MisfireRunOnce, []time.Time{minute(1), minute(3)}},
		{"skip", sortie.MisfireSkip, []time.Time{minute(1)}},
		{"catch up", sortie.MisfireCatchUp, []time.Time{minute(1), minute(2), minute(3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eachStore(t, func(t *testing.T, st store.Store) {
				fc := clock.NewFake(periodicT0)
				c := startClient(t, st, periodicConfig(fc, &sortie.PeriodicJob{Name: "tick", Interval: time.Minute, Args: tickArgs, Misfire: tt.misfire}))
				waitArmed(t, fc, minute(1))
				fc.Set(minute(3).Add(30 * time.Second))
				waitArmed(t, fc, minute(4))
				if got, want := tickKeys(t, c), keysOf("tick", tt.want...); !slices.Equal(got, want) {
					t.Fatalf("jobs %q, want %q", got, want)
				}
			})
		})
	}
}

func TestPeriodicEnqueuedEventCarriesTheJob(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		fc := clock.NewFake(periodicT0)
		dep := mustEnqueue(t, newClient(t, st, &sortie.Config{Clock: fc}), Msg{}, nil)
		cfg := periodicConfig(fc, &sortie.PeriodicJob{
			Name: "tenant", Interval: time.Minute,
			Args: func(time.Time) sortie.JobArgs { return Tenant{Tenant: "acme"} },
			Opts: &sortie.EnqueueOpts{DependsOn: []int64{dep}, IgnoreDepFailure: true},
		})
		c := startClient(t, st, cfg)
		ev := record(t, c)
		waitArmed(t, fc, minute(1))
		fc.Set(minute(1))
		e := ev.waitFor(t, 10*time.Second, "enqueue of 12:01", enqueuedKey(periodicKey("tenant", minute(1))))
		row := mustGet(t, c, e.Job.ID)
		if e.Job.PartitionKey != row.PartitionKey || !slices.Equal(e.Job.DependsOn, row.DependsOn) || e.Job.IgnoreDepFailure != row.IgnoreDepFailure {
			t.Fatalf("enqueued event's job has PartitionKey %q, DependsOn %v, IgnoreDepFailure %v; the stored job has %q, %v, %v",
				e.Job.PartitionKey, e.Job.DependsOn, e.Job.IgnoreDepFailure, row.PartitionKey, row.DependsOn, row.IgnoreDepFailure)
		}
		if row.PartitionKey != "acme" || !slices.Equal(row.DependsOn, []int64{dep}) || !row.IgnoreDepFailure {
			t.Fatalf("stored job has PartitionKey %q, DependsOn %v, IgnoreDepFailure %v; want acme, [%d], true", row.PartitionKey, row.DependsOn, row.IgnoreDepFailure, dep)
		}
	})
}
