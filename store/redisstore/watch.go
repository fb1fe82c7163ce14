package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/notify"
	"github.com/sortiehq/sortie/store"
)

// The library announces on two kinds of shard channel (SPUBLISH, Redis 7):
// a queue's watch channel when its jobs may have become available, and a
// key group's done channel with the ID of each job that finished. A store
// keeps one subscription connection per key group it listens to (a shard
// channel lives on its slot's node, so on Cluster a group's channels share
// one), subscribed to the channels its watchers and waiters need.

// hub manages the store's subscriptions and fans their messages out.
type hub struct {
	s      *Store
	queues notify.Hub

	mu     sync.Mutex
	groups map[int64]*groupSub
	waits  map[int64]map[chan struct{}]struct{}
	done   bool
}

// groupSub is the subscription connection of one key group.
type groupSub struct {
	ps *redis.PubSub
	// chans counts the users of each subscribed channel; queue maps a watch
	// channel to its queue.
	chans map[string]int
	queue map[string]string
}

func newHub(s *Store) *hub {
	return &hub{s: s, groups: make(map[int64]*groupSub), waits: make(map[int64]map[chan struct{}]struct{})}
}

// subscribe adds a user of channel ch of group g (a watch channel when
// queue is set).
func (h *hub) subscribe(ctx context.Context, g int64, ch, queue string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return store.ErrClosed
	}
	gs := h.groups[g]
	if gs == nil {
		// The first channel picks the connection's node (on a cluster,
		// the one serving the group's slot), so it is subscribed at once.
		gs = &groupSub{ps: h.s.rdb.SSubscribe(ctx, ch), chans: map[string]int{ch: 1}, queue: make(map[string]string)}
		if queue != "" {
			gs.queue[ch] = queue
		}
		h.groups[g] = gs
		go h.receive(gs)
		return nil
	}
	if gs.chans[ch]++; gs.chans[ch] > 1 {
		return nil
	}
	if queue != "" {
		gs.queue[ch] = queue
	}
	if err := gs.ps.SSubscribe(ctx, ch); err != nil {
		gs.chans[ch]--
		return h.s.readError("subscribe", err)
	}
	return nil
}

// unsubscribe removes a user of channel ch of group g.
func (h *hub) unsubscribe(g int64, ch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	gs := h.groups[g]
	if gs == nil || h.done {
		return
	}
	if gs.chans[ch]--; gs.chans[ch] > 0 {
		return
	}
	delete(gs.chans, ch)
	delete(gs.queue, ch)
	_ = gs.ps.SUnsubscribe(context.Background(), ch)
}

// receive reads one group's messages until the store closes. After an
// error or a (re)subscription, which is what a reconnection looks like,
// it wakes every watcher and waiter of the group: a message sent while
// the connection was down is lost, so they look again.
func (h *hub) receive(gs *groupSub) {
	backoff := 50 * time.Millisecond
	for {
		msg, err := gs.ps.Receive(context.Background())
		select {
		case <-h.s.closed:
			return
		default:
		}
		if err != nil {
			h.wakeGroup(gs)
			t := time.NewTimer(backoff)
			select {
			case <-h.s.closed:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Message:
			h.dispatch(gs, m.Channel, m.Payload)
		case *redis.Subscription:
			h.wakeGroup(gs)
		}
	}
}

func (h *hub) dispatch(gs *groupSub, ch, payload string) {
	h.mu.Lock()
	q, isQueue := gs.queue[ch]
	h.mu.Unlock()
	if isQueue {
		h.queues.Notify(q)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.waits) == 0 {
		return
	}
	for _, f := range strings.Split(payload, ",") {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			continue
		}
		for c := range h.waits[id] {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// wakeGroup signals every watcher and waiter of a group.
func (h *hub) wakeGroup(gs *groupSub) {
	h.mu.Lock()
	var queues []string
	for _, q := range gs.queue {
		queues = append(queues, q)
	}
	for _, set := range h.waits {
		for c := range set {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
	h.mu.Unlock()
	for _, q := range queues {
		h.queues.Notify(q)
	}
}

// close ends every subscription.
func (h *hub) close() {
	h.mu.Lock()
	h.done = true
	groups := h.groups
	h.groups = nil
	h.mu.Unlock()
	for _, gs := range groups {
		gs.ps.Close()
	}
}

// QueueWatch returns a Watch signalled through the queue's shard channel,
// which the library publishes on after enqueues, retries, rescues,
// resumes, dependents released, running slots freed in limited queues and
// outcomes that leave jobs available or scheduled. See store.Store.
func (s *Store) QueueWatch(ctx context.Context, p *store.QueueWatchParams) (*store.Watch, error) {
	g, ch := s.k.groupOf(p.Queue), s.k.watch(p.Queue)
	w := s.hub.queues.Watch(p.Queue)
	if err := s.hub.subscribe(ctx, g, ch, p.Queue); err != nil {
		w.Close()
		return nil, err
	}
	return store.NewWatch(w.C, func() {
		w.Close()
		s.hub.unsubscribe(g, ch)
	}), nil
}

// waitPollMax is the longest JobWait goes without reading the job, in
// case a message was lost.
const waitPollMax = 5 * time.Second

// JobWait returns the job once it is finished, woken by its group's done
// channel. See store.Store.
func (s *Store) JobWait(ctx context.Context, p *store.JobWaitParams) (*store.JobRow, error) {
	// The job's group, whose channel it finishes on: read first, since an
	// imported job's ID may give another (see locate.go).
	j, g, err := s.getJob(ctx, p.ID)
	if err != nil || j.State.Finished() {
		return j, err
	}
	ch := s.k.done(g)
	if err := s.hub.subscribe(ctx, g, ch, ""); err != nil {
		return nil, err
	}
	defer s.hub.unsubscribe(g, ch)
	c := make(chan struct{}, 1)
	s.hub.mu.Lock()
	if s.hub.waits[p.ID] == nil {
		s.hub.waits[p.ID] = make(map[chan struct{}]struct{})
	}
	s.hub.waits[p.ID][c] = struct{}{}
	s.hub.mu.Unlock()
	defer func() {
		s.hub.mu.Lock()
		delete(s.hub.waits[p.ID], c)
		if len(s.hub.waits[p.ID]) == 0 {
			delete(s.hub.waits, p.ID)
		}
		s.hub.mu.Unlock()
	}()
	poll := 100 * time.Millisecond
	for {
		// Read again once subscribed: the job may have finished before.
		j, err := s.JobGet(ctx, &store.JobGetParams{ID: p.ID})
		if err != nil || j.State.Finished() {
			return j, err
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-s.closed:
			t.Stop()
			return nil, store.ErrClosed
		case <-c:
		case <-t.C:
			poll = min(2*poll, waitPollMax)
		}
		t.Stop()
	}
}
