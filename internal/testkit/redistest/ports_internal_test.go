package redistest

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startedDir finds the directory in what testredis.sh start printed.
var startedDir = regexp.MustCompile(`SORTIE_TESTREDIS_DIR=(\S+)`)

// TestStartKeepsPickedPorts holds one start between its pick of a port and
// its launch (SORTIE_TESTREDIS_PICKED), and meanwhile starts a second
// server and takes it down for a restart: on a loaded machine a start may
// be held up just so. The first start must launch on the port it picked,
// the second must not have picked it, and the second must come back up on
// its own port.
func TestStartKeepsPickedPorts(t *testing.T) {
	URL(t) // skips or fails where the Redis tests do
	picked := filepath.Join(t.TempDir(), "picked")
	if err := syscall.Mkfifo(picked, 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		out string
		err error
	}
	held := make(chan result, 1)
	go func() {
		out, err := script.Run(t, 3*time.Minute, []string{"SORTIE_TESTREDIS_PICKED=" + picked}, "start")
		held <- result{out, err}
	}()
	// The held start ends, and its server is stopped, however the test
	// ends: let go of it, wait for it, stop what it started.
	var r result
	ended := false
	end := func() result {
		if !ended {
			_ = os.Remove(picked)
			r, ended = <-held, true
		}
		return r
	}
	t.Cleanup(func() {
		if dir := startedDir.FindStringSubmatch(end().out); dir != nil {
			if _, err := script.Run(t, time.Minute, nil, "stop", dir[1]); err != nil {
				t.Errorf("testredis.sh stop %s: %v", dir[1], err)
			}
		}
	})
	ports := make(chan string, 1)
	go func() {
		// Read and write, so the open does not wait for the writer; the
		// read waits for its line, up to the deadline.
		f, err := os.OpenFile(picked, os.O_RDWR, 0)
		if err != nil {
			ports <- ""
			return
		}
		defer f.Close()
		_ = f.SetReadDeadline(time.Now().Add(3 * time.Minute))
		line, _ := bufio.NewReader(f).ReadString('\n')
		if fields := strings.Fields(line); len(fields) > 0 {
			ports <- fields[0]
			return
		}
		ports <- ""
	}()
	var port string
	select {
	case port = <-ports:
	case r = <-held:
		ended = true
		t.Fatalf("testredis.sh start ended before it picked a port: %v\n%s", r.err, r.out)
	}
	if port == "" {
		t.Fatal("could not read the held start's port")
	}

	other := StartServer(t, nil)
	if strings.Contains(other.URL, ":"+port+"/") {
		t.Fatalf("a second start took port %s, which the held start had picked", port)
	}
	other.Down(t, Term)
	if end(); r.err != nil {
		t.Fatalf("the held start: %v", r.err)
	}
	if !strings.Contains(r.out, "127.0.0.1:"+port+"/") {
		t.Fatalf("the held start printed %q, want the port it picked, %s", r.out, port)
	}
	other.Up(t) // fails the test when its port was taken while it was down
}
