package netns

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// skipUnlessHosts skips the test where hosts cannot be made, except under
// CI=true, where the machine is set up for them.
func skipUnlessHosts(t *testing.T) {
	t.Helper()
	if err := Check(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skipf("SKIPPED: %v", err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("SKIPPED: the test talks TCP from inside a host with bash")
	}
}

// A process in a host reaches a listener on its own gateway, not one on
// another host's gateway, and Close leaves no namespace behind.
func TestHostsReachTheirGatewayOnly(t *testing.T) {
	skipUnlessHosts(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := Create(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = s.Close()
		}
	}()
	var lns []net.Listener
	for _, h := range s.Hosts {
		ln, err := net.Listen("tcp", h.Gateway+":0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		lns = append(lns, ln)
	}
	got := make(chan string, 1)
	go func() {
		c, err := lns[0].Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		got <- strings.TrimSpace(line) + " from " + c.RemoteAddr().(*net.TCPAddr).IP.String()
	}()
	h := s.Hosts[0]
	say := "exec 3<>/dev/tcp/" + strings.ReplaceAll(lns[0].Addr().String(), ":", "/") + "; echo hello >&3"
	if out, err := h.Command(ctx, "bash", "-c", say).CombinedOutput(); err != nil {
		t.Fatalf("connect from %s to its gateway: %v: %s", h.Name, err, out)
	}
	select {
	case m := <-got:
		if want := "hello from " + h.Addr; m != want {
			t.Errorf("gateway got %q, want %q", m, want)
		}
	case <-ctx.Done():
		t.Fatal("nothing arrived at the gateway")
	}
	other := "exec 3<>/dev/tcp/" + strings.ReplaceAll(lns[1].Addr().String(), ":", "/")
	if err := h.Command(ctx, "timeout", "2", "bash", "-c", other).Run(); err == nil {
		t.Errorf("%s reached the gateway of another host, %s", h.Name, lns[1].Addr())
	}
	closed = true
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range s.Hosts {
		if strings.Contains(string(out), h.Name) {
			t.Errorf("namespace %s still there after Close", h.Name)
		}
	}
}
