package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
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
// sortie_unwait, which takes an item pushed meanwhile; a ctx that ends,
// or a wait shorter than the BLPOP's whole second, wakes the BLPOP the
// same way. A wait is at most blockMax, so a longer one comes back empty
// sooner. At most half the connection pool blocks at once (blockSlots); a
// caller that finds every slot taken waits on the queue's watch channel
// instead (watchWait). The claim and the reads of what it claimed do not
// end with ctx: jobs claimed for the caller are returned. See
// store.FetchWaiter.
func (s *Store) JobFetchWait(ctx context.Context, p *store.JobFetchParams, wait time.Duration) (*store.JobFetchResult, error) {
	if err := store.ValidateLimit("JobFetchParams", p.Limit); err != nil {
		return nil, err
	}
	if wait < time.Millisecond {
		return s.JobFetch(ctx, p)
	}
	wait = min(wait, blockMax)
	if s.noBlock.Load() {
		return s.watchWait(ctx, p, wait)
	}
	select {
	case s.blocking <- struct{}{}:
		defer func() { <-s.blocking }()
	default:
		return s.watchWait(ctx, p, wait)
	}
	bg := context.WithoutCancel(ctx)
	now := time.UnixMicro(p.Now.UnixMicro()).UTC()
	lease := time.Duration(p.Lease.Microseconds()) * time.Microsecond
	wid := s.nonce + "." + strconv.FormatInt(s.waiters.Add(1), 10)
	args := make([]any, 0, 10+len(p.Kinds))
	args = append(args, s.arg0, p.Queue, group(s.k.groupOf(p.Queue)), micros(now), micros(now.Add(lease)), p.Worker,
		strconv.Itoa(p.Limit), wid, strconv.FormatInt(wait.Microseconds(), 10), strconv.FormatInt(lease.Microseconds(), 10))
	for _, k := range p.Kinds {
		args = append(args, k)
	}
	v, err := s.fcall(bg, "sortie_claim_wait", s.k.queue(p.Queue)+"h", args...)
	if err != nil {
		// The call may have registered the waiter, whose reply was lost.
		s.abandonWait(p.Queue, wid)
		return nil, err
	}
	v, flag, err := splitRowsFlag(v)
	if err != nil {
		return nil, err
	}
	switch flag {
	case "w":
	case "h":
		// A reply to a call sent again: the item handed to the first.
		item, _ := v.([]any)[1].(string)
		return s.handedJobs(p.Queue, item)
	default:
		return s.claimedJobs(bg, p.Queue, v, flag == "1")
	}
	res, err := s.claimedJobs(bg, p.Queue, v, false)
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
// and returns the item handed to it ("" for a wake-up or none). The BLPOP
// blocks for blockMax, a whole second (go-redis gives a blocking command
// its time and ten seconds more to answer); a shorter wait, or a ctx that
// ends first, wakes it with sortie_unwait.
func (s *Store) awaitHand(ctx context.Context, q, wid string, wait time.Duration) (string, error) {
	bg := context.WithoutCancel(ctx)
	wake := func() {
		wctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		_, _ = s.unwait(wctx, q, wid, true)
	}
	stop := context.AfterFunc(ctx, wake)
	defer stop()
	if wait < blockMax {
		t := time.AfterFunc(wait, wake)
		defer t.Stop()
	}
	got, err := s.rdb.BLPop(bg, blockMax, s.k.queue(q)+"H:"+wid).Result()
	if err == nil {
		return got[1], nil
	}
	// Timed out, or failed: take what was handed meanwhile, if anything.
	item, uerr := s.unwait(bg, q, wid, false)
	refused := strings.Contains(err.Error(), "NOPERM")
	if refused && !s.noBlock.Swap(true) {
		s.log().Warn("redisstore: the server refuses BLPOP to this user; idle workers wait on the queues' shard channels instead, a round trip later",
			slog.String("error", err.Error()))
	}
	switch {
	case uerr == nil && (item != "" || errors.Is(err, redis.Nil) || refused):
		return item, nil
	case uerr == nil:
		return "", s.readError("wait for jobs", err)
	case errors.Is(err, redis.Nil):
		s.abandonWait(q, wid)
		return "", uerr
	default:
		s.abandonWait(q, wid)
		return "", s.readError("wait for jobs", err)
	}
}

// unwait calls sortie_unwait for waiter wid of queue q (see sortie.lua).
func (s *Store) unwait(ctx context.Context, q, wid string, wake bool) (string, error) {
	w := "0"
	if wake {
		w = "1"
	}
	v, err := s.fcall(ctx, "sortie_unwait", s.k.queue(q)+"h", s.arg0, q, group(s.k.groupOf(q)), wid, w)
	item, _ := v.(string)
	return item, err
}

// abandonWait ends, in the background, a wait whose caller could not: it
// calls sortie_unwait until the server answers (or the waiter has expired
// on the server, or the store closes), and releases any job handed to the
// waiter meanwhile, so that it is available again at once instead of after
// its lease (with an attempt counted).
func (s *Store) abandonWait(q, wid string) {
	go func() {
		ctx := context.Background()
		deadline := time.Now().Add(blockMax + waitGrace + time.Second)
		for {
			item, err := s.unwait(ctx, q, wid, false)
			if err == nil {
				if item != "" {
					s.releaseHanded(ctx, q, item)
				}
				return
			}
			if time.Now().After(deadline) {
				return
			}
			select {
			case <-s.closed:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// waitGrace is how long past its wait a waiter stays registered on the
// server (sortie.lua's WAIT_GRACE).
const waitGrace = 2 * time.Second

// releaseHanded puts back, unstarted, the jobs of a hand list's item that
// no caller will run; their release is stamped with their claim's own
// time.
func (s *Store) releaseHanded(ctx context.Context, q, item string) {
	res, err := s.handedJobs(q, item)
	if err != nil || len(res.Jobs) == 0 {
		return
	}
	reports := make([]*store.Report, len(res.Jobs))
	for i, j := range res.Jobs {
		reports[i] = &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportReleased, Unstarted: true}
	}
	_, _ = s.JobFinish(ctx, &store.JobFinishParams{Reports: reports, Now: res.Jobs[0].AttemptedAt})
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

// blockMax is how long a waiting fetch blocks at most: one BLPOP of a
// whole second (go-redis sends a blocking command's time in whole
// seconds).
const blockMax = time.Second

// watchWait is JobFetchWait for a caller that found every blocking slot
// taken: it claims, and when that finds nothing, waits on the queue's
// watch channel and returns empty at the first signal (the caller
// fetches again, as a watching worker does), or when wait passes or ctx
// ends. The channel's subscription stays open for the store's next waits
// (fallbackWatch).
func (s *Store) watchWait(ctx context.Context, p *store.JobFetchParams, wait time.Duration) (*store.JobFetchResult, error) {
	if _, err := s.fallbackWatch(ctx, p.Queue); err != nil {
		return nil, err
	}
	// The subscription is the store's; each wait has a watch of its own
	// in the store's fan-out, so that a signal wakes every waiting caller.
	w := s.hub.queues.Watch(p.Queue)
	defer w.Close()
	res, err := s.JobFetch(context.WithoutCancel(ctx), p)
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

// log returns the store's logger (Options.Logger, or slog's default).
func (s *Store) log() *slog.Logger {
	if s.logger != nil {
		return s.logger
	}
	return slog.Default()
}
