// Package clock gives the runtime its time, so tests can move it forward
// instead of sleeping.
package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer, like time.Timer.
type Timer interface {
	// C returns the channel the timer fires on.
	C() <-chan time.Time
	// Stop stops the timer; it reports whether it stopped it before it fired.
	Stop() bool
	// Reset makes the timer fire after d; the timer must be stopped or fired.
	Reset(d time.Duration)
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Stop() bool            { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }

// Fake is a clock that moves only when told. Its timers fire when Advance or
// Set moves time to or past their deadline. Safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// changed is closed and replaced whenever the armed timers change
	// (one is armed, stopped or fires), so tests can wait until a goroutine
	// waits on the clock.
	changed chan struct{}
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer firing when the fake time reaches Now()+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the fake time forward by d and fires due timers.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.fireLocked()
	f.mu.Unlock()
}

// Set moves the fake time to t (never backwards) and fires due timers.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	if t.After(f.now) {
		f.now = t
	}
	f.fireLocked()
	f.mu.Unlock()
}

// NextDeadline returns the earliest armed timer's deadline, if any.
func (f *Fake) NextDeadline() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.timers) == 0 {
		return time.Time{}, false
	}
	return f.timers[0].when, true
}

// AwaitDeadline waits until an armed timer's deadline satisfies match, and
// returns the earliest such deadline; it returns ctx's error if ctx ends
// first. A test calls it to wait until the code under test waits on the
// clock, instead of polling NextDeadline.
func (f *Fake) AwaitDeadline(ctx context.Context, match func(time.Time) bool) (time.Time, error) {
	for {
		f.mu.Lock()
		changed := f.changed
		deadlines := make([]time.Time, len(f.timers))
		for i, t := range f.timers {
			deadlines[i] = t.when
		}
		f.mu.Unlock()
		for _, d := range deadlines {
			if match(d) {
				return d, nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// changedLocked wakes the goroutines waiting in AwaitDeadline.
func (f *Fake) changedLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *Fake) fireLocked() {
	i := 0
	for ; i < len(f.timers) && !f.timers[i].when.After(f.now); i++ {
		t := f.timers[i]
		t.armed = false
		select {
		case t.c <- f.now:
		default:
		}
	}
	f.timers = append(f.timers[:0], f.timers[i:]...)
	if i > 0 {
		f.changedLocked()
	}
}

func (f *Fake) addLocked(t *fakeTimer) {
	f.timers = append(f.timers, t)
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].when.Before(f.timers[j].when) })
	f.changedLocked()
}

func (f *Fake) removeLocked(t *fakeTimer) bool {
	for i, x := range f.timers {
		if x == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			f.changedLocked()
			return true
		}
	}
	return false
}

type fakeTimer struct {
	f     *Fake
	c     chan time.Time
	when  time.Time
	armed bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.armed = false
	return t.f.removeLocked(t)
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.f.removeLocked(t)
	t.when = t.f.now.Add(d)
	t.armed = true
	if !t.when.After(t.f.now) {
		t.armed = false
		select {
		case t.c <- t.f.now:
		default:
		}
		return
	}
	t.f.addLocked(t)
}
