package notify

import (
	"testing"
)

func signalled(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestHubSignalsWatchersOfTheQueue(t *testing.T) {
	t.Parallel()
	var h Hub
	a1, a2, b := h.Watch("a"), h.Watch("a"), h.Watch("b")
	defer a2.Close()
	defer b.Close()
	h.Notify("a")
	h.Notify("a") // coalesces with the first
	if !signalled(a1.C) || !signalled(a2.C) {
		t.Fatal("a watcher of queue a got no signal")
	}
	if signalled(a1.C) {
		t.Fatal("two notifies left two signals, want them coalesced into one")
	}
	if signalled(b.C) {
		t.Fatal("watcher of queue b was signalled by queue a")
	}
	a1.Close()
	a1.Close() // idempotent
	h.NotifyAll(map[string]struct{}{"a": {}, "b": {}})
	if signalled(a1.C) {
		t.Fatal("closed watcher still signalled")
	}
	if !signalled(a2.C) || !signalled(b.C) {
		t.Fatal("NotifyAll missed a queue")
	}
}
