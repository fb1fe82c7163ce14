// Package delayproxy forwards TCP connections to a server, holding every
// byte back for a set time in each direction: a network with a round trip
// of twice that delay, for tests and benchmarks that measure what a
// distant store costs. The kernel's own delay (tc netem) needs the
// sch_netem module, which not every machine has; the proxy needs nothing.
//
// Bandwidth is not limited and bytes are never reordered or lost, but on
// demand: Cut stops all traffic, as a cable pulled out would, until
// Restore, and LoseReply drops one answer of the server with its
// connection, as a network failing after the server acted.
package delayproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy listens on a loopback port and forwards each connection to its
// target with a delay.
type Proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // one way, in nanoseconds

	mu     sync.Mutex
	lose   [][]byte // LoseReply's patterns still armed
	lost   chan struct{}
	conns  map[net.Conn]struct{}
	cut    bool
	mended chan struct{} // closed by Restore
	closed bool
	wg     sync.WaitGroup
}

// Start listens on 127.0.0.1 (a free port) and forwards to target
// (host:port), holding bytes back oneWay in each direction.
func Start(target string, oneWay time.Duration) (*Proxy, error) {
	return StartOn("127.0.0.1:0", target, oneWay)
}

// StartOn is Start listening on addr (host:port; port 0 picks a free one),
// such as the address of a link to a test host (internal/testkit/netns).
func StartOn(addr, target string, oneWay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{}), mended: make(chan struct{})}
	close(p.mended)
	p.delay.Store(int64(oneWay))
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay changes the one-way delay of bytes read from now on.
func (p *Proxy) SetDelay(oneWay time.Duration) { p.delay.Store(int64(oneWay)) }

// Cut stops forwarding in both directions: bytes wait in the proxy, and
// new connections are accepted but not forwarded, until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.cut = true
		p.mended = make(chan struct{})
	}
}

// Restore ends a Cut: what waited is delivered.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.mended)
	}
}

// LoseReply arms the proxy to lose the next bytes from the server that
// contain pattern: they are not delivered, and the connection carrying
// them is closed, as when a network fails after the server acted on a
// request and before its answer arrived. The returned channel is closed
// once that happened.
func (p *Proxy) LoseReply(pattern []byte) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = append(p.lose, pattern)
	if p.lost == nil {
		p.lost = make(chan struct{})
	}
	return p.lost
}

// losing reports whether data from the server is to be lost, disarming
// the pattern it matched.
func (p *Proxy) losing(data []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pat := range p.lose {
		if bytes.Contains(data, pat) {
			p.lose = append(p.lose[:i], p.lose[i+1:]...)
			if len(p.lose) == 0 {
				close(p.lost)
				p.lost = nil
			}
			return true
		}
	}
	return false
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	if p.cut {
		p.cut = false
		close(p.mended)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track adds or removes c from the open connections; it reports false
// when the proxy is closed.
func (p *Proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client, true) {
		_ = client.Close()
		return
	}
	defer p.track(client, false)
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server, true) {
		_ = server.Close()
		return
	}
	defer p.track(server, false)
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client, false); done <- struct{}{} }()
	go func() { p.pipe(client, server, true); done <- struct{}{} }()
	<-done
	// One side ended: end the other.
	_ = client.Close()
	_ = server.Close()
	<-done
}

// chunk is bytes read at a time, due for writing at due.
type chunk struct {
	due  time.Time
	data []byte
}

// pipe copies src to dst, each read held back by the delay at the time
// of the read, in order. fromServer: src is the server (LoseReply).
func (p *Proxy) pipe(dst, src net.Conn, fromServer bool) {
	queue := make(chan chunk, 4096)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for c := range queue {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			p.waitMended()
			if fromServer && p.losing(c.data) {
				_ = dst.Close()
				_ = src.Close()
				for range queue {
				}
				return
			}
			if _, err := dst.Write(c.data); err != nil {
				for range queue {
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			queue <- chunk{due: time.Now().Add(time.Duration(p.delay.Load())), data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			break
		}
	}
	close(queue)
	<-writerDone
	if cw, ok := dst.(*net.TCPConn); ok {
		_ = cw.CloseWrite()
	}
}

// waitMended returns once no Cut is in force.
func (p *Proxy) waitMended() {
	p.mu.Lock()
	m := p.mended
	p.mu.Unlock()
	<-m
}
