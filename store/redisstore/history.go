package redisstore

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/fetchplan"
)

// historyMinutes is the set of minutes of queue q's history counts (QP hm);
// historyCounts the counts (QP hc), field minute ':' outcome.
func (k keys) historyMinutes(q string) string { return k.queue(q) + "hm" }
func (k keys) historyCounts(q string) string  { return k.queue(q) + "hc" }

// JobHistory reads the history counts in two pipelines: the minutes of
// each queue in the range, then their counts. See store.Store.
func (s *Store) JobHistory(ctx context.Context, p *store.JobHistoryParams) ([]store.HistoryRow, error) {
	queues := []string{p.Queue}
	if p.Queue == "" {
		var err error
		if queues, err = s.queueNames(ctx); err != nil {
			return nil, err
		}
	}
	from, to := "-inf", "+inf"
	if !p.Since.IsZero() {
		from = strconv.FormatInt(p.Since.UnixMicro(), 10)
	}
	if !p.Until.IsZero() {
		to = "(" + strconv.FormatInt(p.Until.UnixMicro(), 10)
	}
	pipe := s.rdb.Pipeline()
	mins := make([]*redis.StringSliceCmd, len(queues))
	for i, q := range queues {
		mins[i] = pipe.ZRangeByScore(ctx, s.k.historyMinutes(q), &redis.ZRangeBy{Min: from, Max: to})
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("read history", err)
	}
	type ask struct {
		q      string
		minute string
		cmd    *redis.SliceCmd
	}
	var asks []ask
	pipe = s.rdb.Pipeline()
	fields := make([]string, len(store.HistoryOutcomes))
	for i, q := range queues {
		for _, m := range mins[i].Val() {
			for k, o := range store.HistoryOutcomes {
				fields[k] = m + ":" + string(o)
			}
			asks = append(asks, ask{q, m, pipe.HMGet(ctx, s.k.historyCounts(q), fields...)})
		}
	}
	out := []store.HistoryRow{}
	if len(asks) == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("read history", err)
	}
	for _, a := range asks {
		at := parseStored(a.minute)
		for k, v := range a.cmd.Val() {
			str, _ := v.(string)
			if n, err := strconv.ParseInt(str, 10, 64); err == nil && n != 0 {
				out = append(out, store.HistoryRow{Queue: a.q, At: at, Outcome: store.HistoryOutcomes[k], Count: n})
			}
		}
	}
	slices.SortFunc(out, store.CompareHistoryRows)
	return out, nil
}

// JobHistoryPrune deletes old history counts queue by queue, each in one
// call of sortie_history_prune; one pipeline first finds the queues that
// have any. See store.Store.
func (s *Store) JobHistoryPrune(ctx context.Context, p *store.JobHistoryPruneParams) (int, error) {
	if err := store.ValidateLimit("JobHistoryPruneParams", p.Limit); err != nil {
		return 0, err
	}
	before := strconv.FormatInt(p.Before.UnixMicro(), 10)
	queues, err := s.queuesWith(ctx, func(q string) (string, string) { return s.k.historyMinutes(q), "(" + before })
	if err != nil {
		return 0, err
	}
	total := 0
	for _, q := range queues {
		if total >= p.Limit {
			break
		}
		v, err := s.fcall(ctx, "sortie_history_prune", s.k.historyMinutes(q), s.arg0, q,
			group(s.k.groupOf(q)), micros(p.Before), strconv.Itoa(p.Limit-total))
		if err != nil {
			return total, err
		}
		n, _ := v.(int64)
		total += int(n)
	}
	return total, nil
}

// QueueLatency reads, in one pipeline, each queue's first lane head of
// each priority (the heads are ordered by priority, RunAt and ID, so the
// first of a priority is the earliest RunAt of its available jobs) and
// its earliest scheduled or retrying job. See store.Store.
func (s *Store) QueueLatency(ctx context.Context, p *store.QueueLatencyParams) ([]store.QueueLatencyRow, error) {
	queues := []string{p.Queue}
	if p.Queue == "" {
		var err error
		if queues, err = s.queueNames(ctx); err != nil {
			return nil, err
		}
	}
	type ask struct {
		heads []*redis.StringSliceCmd
		due   *redis.ZSliceCmd
	}
	asks := make([]ask, len(queues))
	pipe := s.rdb.Pipeline()
	for i, q := range queues {
		for prio := store.PriorityHighest; prio <= store.PriorityLowest; prio++ {
			asks[i].heads = append(asks[i].heads, pipe.ZRangeArgs(ctx, redis.ZRangeArgs{
				Key: s.k.queue(q) + "h", Start: "[" + strconv.Itoa(prio), Stop: "(" + strconv.Itoa(prio+1), ByLex: true, Count: 1,
			}))
		}
		asks[i].due = pipe.ZRangeWithScores(ctx, s.k.queue(q)+"s", 0, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, s.readError("read queue latency", err)
	}
	out := []store.QueueLatencyRow{}
	for i, q := range queues {
		var avail, wait time.Time
		for _, h := range asks[i].heads {
			// A head is priority (1 digit), RunAt (18), ID (16), lane.
			if v := h.Val(); len(v) > 0 && len(v[0]) >= 19 {
				if at := parseStored(v[0][1:19]); avail.IsZero() || at.Before(avail) {
					avail = at
				}
			}
		}
		if v := asks[i].due.Val(); len(v) > 0 {
			wait = time.UnixMicro(int64(v[0].Score)).UTC()
		}
		if at := fetchplan.OldestDue(avail, wait, p.Now); !at.IsZero() {
			out = append(out, store.QueueLatencyRow{Queue: q, OldestRunAt: at})
		}
	}
	return out, nil
}
