package cli

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// silentServer listens on loopback, accepts connections and never answers
// (a half-dead server, a wrong port behind something that accepts). It
// returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// A PostgreSQL server that accepts and never answers makes a command fail
// after the default connect timeout (10 s), naming the server, instead of
// hanging; connect_timeout in the URL overrides it.
func TestPostgresConnectTimeout(t *testing.T) {
	t.Parallel()
	addr := silentServer(t)
	for _, tt := range []struct {
		name, url string
		within    time.Duration
	}{
		{"default", "postgres://postgres@" + addr + "/sortie?sslmode=disable", 15 * time.Second},
		{"connect_timeout=1", "postgres://postgres@" + addr + "/sortie?sslmode=disable&connect_timeout=1", 5 * time.Second},
	} {
		for _, args := range [][]string{{"queues", "--store", tt.url}, {"serve", "--store", tt.url, "--addr", "127.0.0.1:0"}} {
			t.Run(tt.name+"/"+args[0], func(t *testing.T) {
				t.Parallel()
				type result struct {
					code   int
					stderr string
				}
				done := make(chan result, 1)
				begin := time.Now()
				go func() {
					code, _, stderr := run(t, args...)
					done <- result{code, stderr}
				}()
				select {
				case r := <-done:
					want := "cannot reach the PostgreSQL server at " + addr + ": timed out connecting"
					if r.code != exitError || !strings.Contains(r.stderr, want) {
						t.Errorf("sortie %s against a silent server: exit status %d after %s, stderr %q; want 1 and %q", args[0], r.code, time.Since(begin), r.stderr, want)
					}
				case <-time.After(tt.within):
					t.Fatalf("sortie %s against a silent server still runs after %s", args[0], tt.within)
				}
			})
		}
	}
}
