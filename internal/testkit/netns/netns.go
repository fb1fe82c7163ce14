// Package netns makes test hosts on one machine: network namespaces, each
// linked to the caller's namespace by a veth pair of its own with a private
// /24, so that a process started in one reaches servers of the caller's
// namespace only over its own link, as a worker host reaches a database
// host. Traffic stays inside the namespaces and links made here; Close
// removes them. Linux only, as root (CAP_NET_ADMIN), with iproute2's ip.
package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Host is one namespace.
type Host struct {
	// Name is the namespace's name (ip netns).
	Name string
	// Addr is the host's address on its link; Gateway is the address of
	// the link's other end, in the caller's namespace, where a server (or
	// a proxy to one) listens for this host.
	Addr, Gateway string
	link          string // the link's end in the caller's namespace
}

// Command returns the command line name args run inside h.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// Prefix returns the command line that runs a command inside h: put it
// before the command's own.
func (h *Host) Prefix() []string { return []string{"ip", "netns", "exec", h.Name} }

// Check says why hosts cannot be made here, or nil.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("netns: iproute2's ip command is not installed")
	}
	return nil
}

// Set is the hosts of one Create.
type Set struct {
	Hosts []*Host
}

// made numbers the hosts this process made, so that the hosts of several
// sets, alive at once, differ in names and links; chosen is the X of the
// process's links 10.X.k.0/24, chosen at its first Create (under the lock
// of lockNets, so that processes choose apart).
var (
	made     atomic.Int32
	chooseMu sync.Mutex // guards chosen, within the process
	chosen   int
)

// Create makes n hosts, named after this process so that concurrent
// callers do not meet, with links 10.X.k.0/24 (X from the process ID, k
// the host's number in this process, from 1): the caller's end .1, the
// host's .2. A process makes at most 250 hosts. On an error it removes
// what it made.
func Create(ctx context.Context, n int) (*Set, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if n < 1 || n > 200 {
		return nil, fmt.Errorf("netns: want 1 to 200 hosts, got %d", n)
	}
	pid := os.Getpid()
	chooseMu.Lock()
	defer chooseMu.Unlock()
	unlock, err := lockNets()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if chosen == 0 {
		if chosen, err = freeNet(ctx, 100+pid%100); err != nil {
			return nil, err
		}
	}
	net := chosen
	s := &Set{}
	for range n {
		k := made.Add(1)
		if k > 250 {
			return nil, errors.Join(errors.New("netns: more than 250 hosts made by one process"), s.Close())
		}
		h := &Host{
			Name:    fmt.Sprintf("sortie-%d-%d", pid, k),
			Addr:    fmt.Sprintf("10.%d.%d.2", net, k),
			Gateway: fmt.Sprintf("10.%d.%d.1", net, k),
			// Interface names have at most 15 bytes.
			link: fmt.Sprintf("st%d.%d", pid%100000, k),
		}
		s.Hosts = append(s.Hosts, h)
		if err := h.make(ctx); err != nil {
			return nil, errors.Join(err, s.Close())
		}
	}
	return s, nil
}

// lockNets takes a lock that callers in other processes share while they
// choose their 10.X.0.0/16 and make their links (see freeNet).
func lockNets() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sortie-netns.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("netns: lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// freeNet returns the first X from want on (within 100 to 199) such that
// no address of this namespace is in 10.X.0.0/16.
func freeNet(ctx context.Context, want int) (int, error) {
	out, err := exec.CommandContext(ctx, "ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("netns: ip addr show: %w", err)
	}
	for i := range 100 {
		x := 100 + (want-100+i)%100
		if !strings.Contains(string(out), fmt.Sprintf(" 10.%d.", x)) {
			return x, nil
		}
	}
	return 0, errors.New("netns: no free 10.X.0.0/16 for the hosts' links")
}

// make creates h's namespace and link.
func (h *Host) make(ctx context.Context) error {
	peer := h.link + "p"
	steps := [][]string{
		{"netns", "add", h.Name},
		{"link", "add", h.link, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", h.Name},
		{"addr", "add", h.Gateway + "/24", "dev", h.link},
		{"link", "set", h.link, "up"},
		{"-n", h.Name, "addr", "add", h.Addr + "/24", "dev", peer},
		{"-n", h.Name, "link", "set", peer, "up"},
		{"-n", h.Name, "link", "set", "lo", "up"},
	}
	for _, args := range steps {
		if err := ip(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// Close removes the hosts' namespaces and links (those that exist).
func (s *Set) Close() error {
	var errs []error
	for _, h := range s.Hosts {
		// Deleting the namespace deletes the link's end inside it, and
		// with it the pair; the explicit delete covers a half-made host.
		_ = ip(context.Background(), "link", "del", h.link)
		if err := ip(context.Background(), "netns", "del", h.Name); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ip runs iproute2's ip with args.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
