package clock

import (
	"context"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func fired(tm Timer) bool {
	select {
	case <-tm.C():
		return true
	default:
		return false
	}
}

func TestFakeTimerFiresWhenTimeReachesIt(t *testing.T) {
	t.Parallel()
	f := NewFake(t0)
	tm := f.NewTimer(time.Minute)
	f.Advance(59 * time.Second)
	if fired(tm) {
		t.Fatal("timer fired 1s before its deadline")
	}
	f.Advance(time.Second)
	if !fired(tm) {
		t.Fatal("timer did not fire at its deadline")
	}
	if got := f.Now(); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("Now() = %v, want %v", got, t0.Add(time.Minute))
	}
}

func TestFakeTimerStopAndReset(t *testing.T) {
	t.Parallel()
	f := NewFake(t0)
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop() of an armed timer = false, want true")
	}
	f.Advance(time.Hour)
	if fired(tm) {
		t.Fatal("stopped timer fired")
	}
	if tm.Stop() {
		t.Fatal("Stop() of a stopped timer = true, want false")
	}
	tm.Reset(2 * time.Second)
	if d, ok := f.NextDeadline(); !ok || !d.Equal(f.Now().Add(2*time.Second)) {
		t.Fatalf("NextDeadline() = %v, %v; want now+2s", d, ok)
	}
	f.Set(f.Now().Add(2 * time.Second))
	if !fired(tm) {
		t.Fatal("reset timer did not fire at its new deadline")
	}
	tm.Reset(0)
	if !fired(tm) {
		t.Fatal("Reset(0) did not fire at once")
	}
}

func TestFakeSetNeverGoesBack(t *testing.T) {
	t.Parallel()
	f := NewFake(t0)
	f.Set(t0.Add(-time.Hour))
	if !f.Now().Equal(t0) {
		t.Fatalf("Set to the past moved the clock to %v", f.Now())
	}
}

func TestFakeTimersFireInDeadlineOrder(t *testing.T) {
	t.Parallel()
	f := NewFake(t0)
	late := f.NewTimer(3 * time.Second)
	early := f.NewTimer(time.Second)
	f.Advance(2 * time.Second)
	if !fired(early) || fired(late) {
		t.Fatal("after 2s, want only the 1s timer fired")
	}
	f.Advance(time.Second)
	if !fired(late) {
		t.Fatal("3s timer did not fire at 3s")
	}
}

func TestRealTimer(t *testing.T) {
	t.Parallel()
	tm := Real{}.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("real timer did not fire")
	}
}

func TestFakeAwaitDeadlineWaitsForATimer(t *testing.T) {
	t.Parallel()
	f := NewFake(t0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	armed := make(chan Timer, 1)
	go func() { armed <- f.NewTimer(time.Minute) }()
	got, err := f.AwaitDeadline(ctx, func(d time.Time) bool { return d.Equal(t0.Add(time.Minute)) })
	if err != nil || !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("AwaitDeadline(minute) = %v, %v; want %v", got, err, t0.Add(time.Minute))
	}
	minute := <-armed
	f.NewTimer(time.Hour)
	got, err = f.AwaitDeadline(ctx, func(d time.Time) bool { return d.After(t0) })
	if err != nil || !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("AwaitDeadline(any) = %v, %v; want the earliest, %v", got, err, t0.Add(time.Minute))
	}
	got, err = f.AwaitDeadline(ctx, func(d time.Time) bool { return d.After(t0.Add(time.Minute)) })
	if err != nil || !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("AwaitDeadline(after a minute) = %v, %v; want %v", got, err, t0.Add(time.Hour))
	}
	// A timer armed again after it fired wakes the waiter.
	f.Advance(time.Minute)
	<-minute.C()
	go minute.Reset(2 * time.Minute)
	got, err = f.AwaitDeadline(ctx, func(d time.Time) bool { return d.Equal(t0.Add(3 * time.Minute)) })
	if err != nil || !got.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("AwaitDeadline(reset) = %v, %v; want %v", got, err, t0.Add(3*time.Minute))
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if _, err := f.AwaitDeadline(done, func(time.Time) bool { return false }); err != context.Canceled {
		t.Fatalf("AwaitDeadline with a cancelled ctx = %v, want context.Canceled", err)
	}
}
