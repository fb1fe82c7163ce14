package testkit

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fatalTB records the first Fatalf and ends its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// waitFatal runs WaitFor on a fatalTB and returns its fatal message, or ""
// when WaitFor returned.
func waitFatal(t *testing.T, timeout time.Duration, watch []Watched, cond func() (bool, error)) string {
	t.Helper()
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		WaitFor(f, timeout, "the thing", watch, func() string { return "the state" }, cond)
	}()
	<-done
	return f.msg
}

type failed struct{ err error }

func (f failed) Failure() error { return f.err }

func TestWaitFor(t *testing.T) {
	t.Parallel()
	t.Run("returns once cond holds", func(t *testing.T) {
		t.Parallel()
		n := 0
		if msg := waitFatal(t, time.Minute, nil, func() (bool, error) { n++; return n == 3, nil }); msg != "" {
			t.Errorf("WaitFor failed with %q, want it to return", msg)
		}
		if n != 3 {
			t.Errorf("cond called %d times, want 3", n)
		}
	})
	t.Run("names what is stuck and the last error", func(t *testing.T) {
		t.Parallel()
		msg := waitFatal(t, 30*time.Millisecond, nil, func() (bool, error) { return false, errors.New("no reply") })
		for _, want := range []string{"stuck: the thing", "no reply", "the state"} {
			if !strings.Contains(msg, want) {
				t.Errorf("WaitFor failed with %q, want it to say %q", msg, want)
			}
		}
	})
	t.Run("gives up at once on a watched failure", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		msg := waitFatal(t, time.Minute, []Watched{failed{}, failed{errors.New("worker 2 exited")}}, func() (bool, error) { return false, nil })
		if !strings.Contains(msg, "worker 2 exited while waiting until the thing") {
			t.Errorf("WaitFor failed with %q, want it to name the watched failure", msg)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("WaitFor took %s to give up, want at once", took)
		}
	})
}

func TestUnquoteShell(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in, want string
		err            bool
	}{
		{"plain", "postgres://127.0.0.1:5432/x", "postgres://127.0.0.1:5432/x", false},
		{"backslashes", `127.0.0.1:7000\,127.0.0.1:7001\?a`, "127.0.0.1:7000,127.0.0.1:7001?a", false},
		{"single quotes refused", "'a b'", "", true},
		{"ANSI-C quotes refused", "$'a\\nb'", "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := unquoteShell(tt.in)
			if (err != nil) != tt.err || got != tt.want {
				t.Errorf("unquoteShell(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}
