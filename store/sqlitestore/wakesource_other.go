//go:build !linux

package sqlitestore

// newFileEvents returns nil: file events are used on Linux only, so the
// waker polls (see wakePoll).
func newFileEvents(string) wakeSource { return nil }

// touch does nothing: without file events, no waker listens for it.
func (k *waker) touch() {}
