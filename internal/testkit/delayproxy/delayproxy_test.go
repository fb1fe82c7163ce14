package delayproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echo starts a server that writes back every line it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// A round trip through the proxy takes at least twice the one-way delay,
// bytes arrive whole and in order, and a cut holds them until restored.
func TestProxy(t *testing.T) {
	const oneWay = 20 * time.Millisecond
	p, err := Start(echo(t), oneWay)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msg string) (string, time.Duration) {
		t.Helper()
		start := time.Now()
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return line, time.Since(start)
	}
	for _, msg := range []string{"one", "two", string(make([]byte, 200<<10))} {
		got, took := roundTrip(msg)
		if got != msg+"\n" {
			t.Fatalf("echo of %d bytes came back as %d bytes", len(msg), len(got))
		}
		if took < 2*oneWay {
			t.Errorf("round trip took %s, want at least %s", took, 2*oneWay)
		}
	}
	p.SetDelay(0)
	p.Cut()
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	p.Restore()
	if line, err := r.ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("after Restore read %q, %v; want the bytes written during the cut", line, err)
	}
}
