package sqlitestore

import (
	"os"
	"sync"
	"syscall"
)

// utimeNow, as both times given to utimensat, sets them to the current
// time; unlike explicit times, it needs only write permission on the file,
// not its ownership, so every process that can write the database can
// touch the log.
const utimeNow = 1<<30 - 1

// touch tells the other processes' wakers that a commit raised the wake
// counter: it sets the -wal file's times, which SQLite never does. A failed
// touch only leaves their workers to their poll interval.
func (k *waker) touch() {
	_ = syscall.UtimesNano(k.wal, []syscall.Timespec{{Nsec: utimeNow}, {Nsec: utimeNow}})
}

// fileEvents is the wakeSource of Linux: an inotify watch on the -wal
// file's attribute changes, which only the writers' touches make (see
// waker). It costs nothing while nothing is written; armed, one read of the
// counter per transaction that signalled watchers, in any process.
type fileEvents struct {
	path string
	fd   int
	f    *os.File // fd, read through the runtime's poller
	out  chan struct{}
	// done is closed when the reading goroutine has exited.
	done chan struct{}

	// mu guards wd: the watch descriptor while armed, -1 otherwise.
	mu sync.Mutex
	wd int
}

// newFileEvents returns the inotify source for the -wal file at path, or
// nil when inotify is not available.
func newFileEvents(path string) wakeSource {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	e := &fileEvents{
		path: path,
		fd:   fd,
		f:    os.NewFile(uintptr(fd), "inotify "+path),
		out:  make(chan struct{}, 1),
		done: make(chan struct{}),
		wd:   -1,
	}
	go e.read()
	return e
}

// read turns the events into ready signals until the file is closed (or
// fails, which leaves the workers to their poll interval). Removing the
// watch sends an event too; a spurious read of the counter costs nothing
// but the read.
func (e *fileEvents) read() {
	defer close(e.done)
	buf := make([]byte, 4096)
	for {
		if _, err := e.f.Read(buf); err != nil {
			return
		}
		select {
		case e.out <- struct{}{}:
		default:
		}
	}
}

func (e *fileEvents) arm() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.wd >= 0 {
		return nil
	}
	wd, err := syscall.InotifyAddWatch(e.fd, e.path, syscall.IN_ATTRIB)
	if err != nil {
		return err
	}
	e.wd = wd
	return nil
}

func (e *fileEvents) disarm() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.wd >= 0 {
		_, _ = syscall.InotifyRmWatch(e.fd, uint32(e.wd))
		e.wd = -1
	}
}

func (e *fileEvents) ready() <-chan struct{} { return e.out }

func (e *fileEvents) close() error {
	err := e.f.Close()
	<-e.done
	return err
}
