package auth

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// ClientAddr is the address a request came from, without its port: what a
// Throttle counts refusals by. Behind a reverse proxy it is the proxy's.
func ClientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Throttle limits how many refused tokens an address may send: each
// address has a budget of Burst refusals that refills by one every Refill.
// An address whose budget is spent is answered "too many requests" without
// its token being looked at until the budget refills, so guessing a secret
// runs at one guess per Refill. Accepted tokens cost nothing.
type Throttle struct {
	// Burst is how many refusals an address may have in a row. Defaults
	// to 10.
	Burst int
	// Refill is how long an address waits for one more. Defaults to 6 s
	// (ten a minute).
	Refill time.Duration
	// Now tells the time; defaults to time.Now (tests give a fake clock).
	Now func() time.Time

	mu    sync.Mutex
	addrs map[string]*budget
}

// budget is one address's refusals left as of at.
type budget struct {
	left float64
	at   time.Time
}

// maxAddrs bounds the addresses a Throttle remembers; past it, those whose
// budget is full again are forgotten, and if none is, the oldest entries go.
const maxAddrs = 10000

func (t *Throttle) params() (int, time.Duration, time.Time) {
	burst, refill := t.Burst, t.Refill
	if burst <= 0 {
		burst = 10
	}
	if refill <= 0 {
		refill = 6 * time.Second
	}
	now := time.Now()
	if t.Now != nil {
		now = t.Now()
	}
	return burst, refill, now
}

// Wait returns how long addr must wait before its next token is looked at:
// zero when it may send one now.
func (t *Throttle) Wait(addr string) time.Duration {
	burst, refill, now := t.params()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.addrs[addr]
	if b == nil {
		return 0
	}
	left := refilled(b, burst, refill, now)
	if left >= 1 {
		return 0
	}
	return time.Duration((1 - left) * float64(refill))
}

// Refused records that addr sent a token that was not accepted.
func (t *Throttle) Refused(addr string) {
	burst, refill, now := t.params()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.addrs == nil {
		t.addrs = map[string]*budget{}
	}
	b := t.addrs[addr]
	if b == nil {
		if len(t.addrs) >= maxAddrs {
			t.forget(burst, refill, now)
		}
		b = &budget{left: float64(burst), at: now}
		t.addrs[addr] = b
	}
	b.left = refilled(b, burst, refill, now) - 1
	b.at = now
}

// refilled returns b's budget at now.
func refilled(b *budget, burst int, refill time.Duration, now time.Time) float64 {
	left := b.left + float64(now.Sub(b.at))/float64(refill)
	return min(left, float64(burst))
}

// forget drops the addresses whose budget is full again, or, if that frees
// nothing, half of them (the map's order is as good as any).
func (t *Throttle) forget(burst int, refill time.Duration, now time.Time) {
	for a, b := range t.addrs {
		if refilled(b, burst, refill, now) >= float64(burst) {
			delete(t.addrs, a)
		}
	}
	for a := range t.addrs {
		if len(t.addrs) < maxAddrs/2 {
			break
		}
		delete(t.addrs, a)
	}
}
