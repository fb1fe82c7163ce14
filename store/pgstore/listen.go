package pgstore

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/sortiehq/sortie/store"
)

// Listener timings.
const (
	// listenPing is how long the listener waits for a notification before
	// checking that its connection still answers.
	listenPing = 30 * time.Second
	// listenFallback is how often watchers are signalled while the listener
	// is down, so workers keep fetching (polling) until it is back.
	listenFallback = time.Second
	// listenRetryMax caps the pause between reconnection attempts.
	listenRetryMax = 5 * time.Second
)

// listenerAppName names the listener's connection in pg_stat_activity.
const listenerAppName = "sortie-listener"

// listener holds one connection that LISTENs on the schema's channel and
// fans notifications out to the watches of each queue. It starts with the
// first watch. When its connection is lost it logs once, signals every
// watch each listenFallback (so workers poll), reconnects with backoff,
// signals every watch again (notifications may have been missed) and logs
// that it is back.
type listener struct {
	cfg     *pgx.ConnConfig
	channel string
	log     *slog.Logger

	mu      sync.Mutex
	watches map[string]map[chan struct{}]bool
	started bool
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	up      bool // connected and listening (for tests and logs)
}

func newListener(cfg *pgx.ConnConfig, channel string, log *slog.Logger) *listener {
	c := cfg.Copy()
	if c.RuntimeParams == nil {
		c.RuntimeParams = map[string]string{}
	}
	c.RuntimeParams["application_name"] = listenerAppName
	// A quiet wait that times out must leave the connection usable (the
	// default handler would also send a cancel request, which could hit
	// the ping that follows).
	c.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &listener{cfg: c, channel: channel, log: log, watches: map[string]map[chan struct{}]bool{},
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// watch registers a watch of queue, starting the listener if needed.
func (l *listener) watch(queue string) *store.Watch {
	c := make(chan struct{}, 1)
	l.mu.Lock()
	if l.watches[queue] == nil {
		l.watches[queue] = map[chan struct{}]bool{}
	}
	l.watches[queue][c] = true
	if !l.started {
		l.started = true
		go l.run()
	}
	l.mu.Unlock()
	return store.NewWatch(c, func() {
		l.mu.Lock()
		delete(l.watches[queue], c)
		if len(l.watches[queue]) == 0 {
			delete(l.watches, queue)
		}
		l.mu.Unlock()
	})
}

// signal wakes the watches of queue, or of every queue when all.
func (l *listener) signal(queue string, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for q, cs := range l.watches {
		if !all && q != queue {
			continue
		}
		for c := range cs {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

func (l *listener) close() {
	l.cancel()
	l.mu.Lock()
	started := l.started
	l.mu.Unlock()
	if started {
		<-l.done
	}
}

func (l *listener) setUp(up bool) {
	l.mu.Lock()
	l.up = up
	l.mu.Unlock()
}

func (l *listener) run() {
	defer close(l.done)
	retry := 100 * time.Millisecond
	lost := false
	for l.ctx.Err() == nil {
		err := l.listen(func() {
			retry = 100 * time.Millisecond
			if lost {
				l.log.Info("pgstore: listener reconnected; wake-ups by NOTIFY again", "channel", l.channel)
				lost = false
			}
			l.signal("", true)
		})
		l.setUp(false)
		if l.ctx.Err() != nil {
			return
		}
		if !lost {
			l.log.Warn("pgstore: listener connection lost; workers poll until it is back", "channel", l.channel, "err", err)
			lost = true
		}
		// Keep workers polling while down, and retry with backoff.
		deadline := time.Now().Add(retry)
		for time.Now().Before(deadline) {
			l.signal("", true)
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(min(listenFallback, time.Until(deadline))):
			}
		}
		retry = min(2*retry, listenRetryMax)
	}
}

// listen connects, LISTENs and delivers notifications until the
// connection fails or the listener closes. It calls ready once listening.
func (l *listener) listen(ready func()) error {
	ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(ctx)
		cancel()
	}()
	if _, err := conn.Exec(l.ctx, "LISTEN "+quoteIdent(l.channel)); err != nil {
		return err
	}
	l.setUp(true)
	ready()
	for {
		ctx, cancel := context.WithTimeout(l.ctx, listenPing)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		if err == nil {
			l.signal(n.Payload, false)
			continue
		}
		if l.ctx.Err() != nil {
			return l.ctx.Err()
		}
		if ctx.Err() == nil || conn.IsClosed() {
			return err
		}
		// Quiet for listenPing: check that the connection still answers.
		pctx, pcancel := context.WithTimeout(l.ctx, 10*time.Second)
		err = conn.Ping(pctx)
		pcancel()
		if err != nil {
			return err
		}
	}
}
