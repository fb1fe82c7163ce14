package testkit

import (
	"testing"
	"time"
)

// A Watched is what a wait gives up on at once when it fails: a child
// process whose exit ends any hope of the condition, say.
type Watched interface {
	// Failure returns why it failed, or nil while it has not.
	Failure() error
}

// WaitFor polls cond every 10 ms until it returns true. It fails t after
// timeout, naming what was awaited, cond's last error and diag's picture of
// the state (diag may be nil), or at once when one of watch fails. It is for
// what a test can only poll (a store, a journal, another process's log);
// what sends an event is waited on by its channel.
func WaitFor(t testing.TB, timeout time.Duration, what string, watch []Watched, diag func() string, cond func() (bool, error)) {
	t.Helper()
	if diag == nil {
		diag = func() string { return "" }
	}
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			lastErr = err
		}
		for _, w := range watch {
			if err := w.Failure(); err != nil {
				t.Fatalf("%v while waiting until %s\n%s", err, what, diag())
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stuck: %s still not true after %s (last error: %v)\n%s", what, timeout, lastErr, diag())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
