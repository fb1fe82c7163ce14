"""Running a worker on a thread while the main thread waits for signals.

A Python signal handler runs on the main thread between two bytecodes,
possibly while that thread holds a lock the handler would need, so it
should do next to nothing. Here the handler does nothing at all: Python's
own C handler writes the signal's number to a wakeup socket, the main
thread reads it and acts in ordinary code. The worker thread writes a zero
byte when it is done.
"""

import signal
import socket
import threading

# The signals that stop a worker.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_DONE = 0  # no signal has number 0


def _ignore(signum, frame):
    """Installed so that the signal wakes the socket instead of ending us."""


def run_with_signals(target, on_signal):
    """Runs target() on a new thread until it returns, and calls
    on_signal(signum, count) on the calling thread, the main one, for each
    SIGTERM or SIGINT received meanwhile (count: 1 for the first).

    The signal handlers and wakeup fd in place before are restored at the
    end. An exception of target is raised again here.
    """
    rsock, wsock = socket.socketpair()
    wsock.setblocking(False)
    errors = []

    def body():
        try:
            target()
        except BaseException as e:  # handed to the main thread
            errors.append(e)
        finally:
            wsock.send(bytes([_DONE]))

    previous_fd = signal.set_wakeup_fd(wsock.fileno(), warn_on_full_buffer=False)
    previous = {s: signal.signal(s, _ignore) for s in STOP_SIGNALS}
    try:
        thread = threading.Thread(target=body, name="sortie-worker", daemon=True)
        thread.start()
        _wait(rsock, on_signal)
        thread.join()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(previous_fd)
        rsock.close()
        wsock.close()
    if errors:
        raise errors[0]


def _wait(rsock, on_signal):
    """Reads the wakeup socket until the done byte, passing on signals."""
    count = 0
    while True:
        for b in rsock.recv(64):
            if b == _DONE:
                return
            if b in STOP_SIGNALS:
                count += 1
                on_signal(signal.Signals(b), count)
