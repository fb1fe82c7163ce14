package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
)

var _ store.FetchWaiter = (*Store)(nil)

// JobFetchWait claims like JobFetch in one call of sortie_claim_wait,
// which, when it claims nothing, registers the caller as one of the
// queue's waiters; the caller then blocks on its hand list (BLPOP), where
// the next call that notes the queue pushes the jobs it claimed for it in
// its own step, or a wake-up. A wait that times out ends with
// sortie_unwait, which takes an item pushed meanwhile; a ctx that ends
// wakes the wait the same way. One BLPOP blocks for at most blockMax (a
// wait longer than the connection's read timeout would break the
// connection), so a longer wait comes back empty sooner. At most half
// the connection pool blocks at once (blockSlots); a caller that finds
// every slot taken waits on the queue's watch channel instead
// (watchWait). See store.FetchWaiter.
func (s *Store) JobFetchWait(ctx context.Context, p *store.JobFetchParams, wait time.Duration) (*store.JobFetchResult, error) {
	if err := store.ValidateLimit("JobFetchParams", p.Limit); err != nil {
		return nil, err
	}
	if wait < time.Millisecond {
		return s.JobFetch(ctx, p)
	}
	wait = min(wait, s.blockMax)
	select {
	case s.blocking <- struct{}{}:
		defer func() { <-s.blocking }()
	default:
		return s.watchWait(ctx, p, wait)
	}
	now := time.UnixMicro(p.Now.UnixMicro()).UTC()
	lease := time.Duration(p.Lease.Microseconds()) * time.Microsecond
	wid := s.nonce + "." + strconv.FormatInt(s.waiters.Add(1), 10)
	args := make([]any, 0, 10+len(p.Kinds))
	args = append(args, s.arg0, p.Queue, group(s.k.groupOf(p.Queue)), micros(now), micros(now.Add(lease)), p.Worker,
		strconv.Itoa(p.Limit), wid, strconv.FormatInt(wait.Microseconds(), 10), strconv.FormatInt(lease.Microseconds(), 10))
	for _, k := range p.Kinds {
		args = append(args, k)
	}
	v, err := s.fcall(ctx, "sortie_claim_wait", s.k.queue(p.Queue)+"h", args...)
	if err != nil {
		return nil, err
	}
	v, flag, err := splitRowsFlag(v)
	if err != nil {
		return nil, err
	}
	if flag != "w" {
		return s.claimedJobs(ctx, p.Queue, v, flag == "1")
	}
	res, err := s.claimedJobs(ctx, p.Queue, v, false)
	if err != nil {
		return nil, err
	}
	if !res.NextAt.IsZero() {
		wait = min(wait, res.NextAt.Sub(now))
	}
	item, err := s.awaitHand(ctx, p.Queue, wid, wait)
	if err != nil || item == "" {
		return &store.JobFetchResult{}, err
	}
	return s.handedJobs(p.Queue, item)
}

// awaitHand blocks on waiter wid's hand list of queue q for up to wait
// and returns the item handed to it ("" for a wake-up or none).
func (s *Store) awaitHand(ctx context.Context, q, wid string, wait time.Duration) (string, error) {
	key := s.k.queue(q) + "h"
	unwait := func(ctx context.Context, wake string) (string, error) {
		v, err := s.fcall(ctx, "sortie_unwait", key, s.arg0, q, group(s.k.groupOf(q)), wid, wake)
		item, _ := v.(string)
		return item, err
	}
	// A ctx that ends wakes the wait with an empty item, unless one was
	// handed already; the BLPOP itself runs to its end, so that what it
	// pops is read.
	stop := context.AfterFunc(ctx, func() {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_, _ = unwait(wctx, "1")
	})
	defer stop()
	secs := strconv.FormatFloat(wait.Seconds(), 'f', 3, 64)
	cmd := redis.NewStringSliceCmd(ctx, "blpop", s.k.queue(q)+"H:"+wid, secs)
	err := s.rdb.Process(context.WithoutCancel(ctx), cmd)
	if err == nil {
		return cmd.Val()[1], nil
	}
	if !errors.Is(err, redis.Nil) {
		err = s.readError("wait for jobs", err)
	}
	// Timed out, or failed: take what was handed meanwhile, if anything;
	// after a failure that has no answer either, the waiter expires on
	// the server and jobs handed to it are rescued after their lease.
	item, uerr := unwait(context.WithoutCancel(ctx), "0")
	if uerr != nil {
		if errors.Is(err, redis.Nil) {
			return "", uerr
		}
		return "", err
	}
	return item, nil
}

// handedJobs decodes a hand list's item: NextAt, then per claimed job its
// ID, claim token, the number of its hash's fields and values and those,
// each string as its length, ':' and itself.
func (s *Store) handedJobs(q, item string) (*store.JobFetchResult, error) {
	l, err := splitLengths(item)
	if err != nil || len(l) < 1 {
		return nil, fmt.Errorf("redisstore: wait for jobs: unexpected item %q", item)
	}
	head := []any{l[0]}
	var hashes []any
	for i := 1; i < len(l); {
		if i+3 > len(l) {
			return nil, fmt.Errorf("redisstore: wait for jobs: unexpected item %q", item)
		}
		n, err := strconv.Atoi(l[i+2])
		if err != nil || n < 0 || i+3+n > len(l) {
			return nil, fmt.Errorf("redisstore: wait for jobs: unexpected item %q", item)
		}
		head = append(head, l[i], l[i+1])
		h := make([]any, n)
		for k := range n {
			h[k] = l[i+3+k]
		}
		hashes = append(hashes, h)
		i += 3 + n
	}
	return s.claimedJobs(context.Background(), q, append(head, hashes...), true)
}

// splitLengths splits s into the strings it joins, each written as its
// length, ':' and itself.
func splitLengths(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		c := i
		for c < len(s) && s[c] != ':' {
			c++
		}
		n, err := strconv.Atoi(s[i:c])
		if err != nil || c == len(s) || n < 0 || c+1+n > len(s) {
			return nil, fmt.Errorf("bad length at %d", i)
		}
		out = append(out, s[c+1:c+1+n])
		i = c + 1 + n
	}
	return out, nil
}

// blockLimit returns the longest a blocking command may wait on rdb's
// connections: under their read timeout (go-redis's default 3 s when it
// is 0), at most a second.
func blockLimit(rdb redis.UniversalClient) time.Duration {
	var rt time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		rt = c.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = c.Options().ReadTimeout
	}
	switch {
	case rt == 0:
		rt = 3 * time.Second
	case rt < 0:
		return time.Second
	}
	return min(time.Second, rt/2)
}

// watchWait is JobFetchWait for a caller that found every blocking slot
// taken: it claims, and when that finds nothing, waits on the queue's
// watch channel and returns empty at the first signal (the caller
// fetches again, as a watching worker does), or when wait passes or ctx
// ends. The watch stays open for the store's next waits (fallbackWatch).
func (s *Store) watchWait(ctx context.Context, p *store.JobFetchParams, wait time.Duration) (*store.JobFetchResult, error) {
	w, err := s.fallbackWatch(ctx, p.Queue)
	if err != nil {
		return nil, err
	}
	// A signal from before this claim is stale.
	select {
	case <-w.C:
	default:
	}
	res, err := s.JobFetch(ctx, p)
	if err != nil || len(res.Jobs) > 0 {
		return res, err
	}
	if !res.NextAt.IsZero() {
		wait = min(wait, res.NextAt.Sub(p.Now))
	}
	if wait <= 0 {
		return res, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.C:
	case <-t.C:
	case <-ctx.Done():
	}
	return &store.JobFetchResult{}, nil
}

// fallbackWatch returns the store's watch of queue q for watchWait,
// opening it on first use; Close closes it.
func (s *Store) fallbackWatch(ctx context.Context, q string) (*store.Watch, error) {
	s.fallbackMu.Lock()
	defer s.fallbackMu.Unlock()
	if w := s.fallback[q]; w != nil {
		return w, nil
	}
	w, err := s.QueueWatch(ctx, &store.QueueWatchParams{Queue: q})
	if err != nil {
		return nil, err
	}
	if s.fallback == nil {
		s.fallback = make(map[string]*store.Watch)
	}
	s.fallback[q] = w
	return w, nil
}

// blockSlots returns how many calls may block on rdb's connections at
// once: half its pool (go-redis's default pool when none is set), so the
// other half serves enqueues, outcomes and heartbeats.
func blockSlots(rdb redis.UniversalClient) int {
	var n int
	switch c := rdb.(type) {
	case *redis.Client:
		n = c.Options().PoolSize
	case *redis.ClusterClient:
		n = c.Options().PoolSize
	}
	if n <= 0 {
		n = 10 * runtime.GOMAXPROCS(0)
	}
	return max(1, n/2)
}
