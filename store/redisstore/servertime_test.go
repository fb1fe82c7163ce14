package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// BenchmarkServerTime reports how much of Redis's one core each step of a
// job's life takes, from INFO commandstats and INFO cpu read before and
// after each phase, on an empty server of its own (appendonly yes,
// appendfsync everysec):
//
//   - enqueue-single: 8 goroutines enqueue SORTIE_BENCH_SERVER_JOBS jobs
//     (default 100,000) of sortie bench's shape, one per JobEnqueueMany
//     call, as `sortie bench --workload enqueue-single` does;
//   - claim: 8 goroutines claim them 100 at a time (JobFetch) until none
//     is left;
//   - complete: the claimed jobs completed 100 to a JobFinish call, from 8
//     goroutines (so every job is running before the first completes);
//   - floor: as many jobs again, of a queue of their own, enqueued 1,000 a
//     call before the phase, drained as the drain phase does but by
//     floorLibrary's functions (which keep none of the queue's bookkeeping):
//     the least the same commands cost with no logic between them;
//   - least: as many jobs again, drained the same way by floorLibrary's
//     other two functions, which keep a running job's claim apart from
//     its hash: the least a drained job that is fenced and whose outcome
//     is kept can cost, whatever the layout;
//   - drain: as many jobs again, enqueued 1,000 a call before the phase,
//     then claimed and completed as a drain does: 8 goroutines each claim
//     100, complete them and claim again, so at most 800 are running at
//     once. Its figure per job is a claim and a completion together.
//
// Each phase is a sub-benchmark that runs once, whatever b.N, and reports
// per job: server-us/job, the time Redis spent in the commands sortie
// sent (commandstats: FCALL and EXEC with everything they ran, and every
// other command sent on its own); cpu-us/job, the server's main thread's
// CPU time (used_cpu_user_main_thread and used_cpu_sys_main_thread),
// which adds reading and writing the connections; and calls/job, the
// commands sortie sent. It also logs each phase's commandstats, command
// by command (the commands a function runs are counted there as well,
// and within the function's time):
//
//	go test -run '^$' -bench ServerTime -benchtime 1x ./store/redisstore/
func BenchmarkServerTime(b *testing.B) {
	jobs := 100_000
	if v := os.Getenv("SORTIE_BENCH_SERVER_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("SORTIE_BENCH_SERVER_JOBS=%q: want a number of jobs, at least 1000", v)
		}
		jobs = n
	}
	srv := redistest.StartServer(b, &redistest.ServerOptions{})
	ctx := context.Background()
	opts, _, err := redisstore.ParseURL(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	admin := redis.NewClient(opts)
	defer admin.Close()
	st, err := redisstore.Open(ctx, srv.URL, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const producers = 8
	now := time.Now()
	var claimed []store.LeaseRef
	var fq floorQueue
	phases := []struct {
		name  string
		setup func() error
		run   func() error
	}{
		{"enqueue-single", nil, func() error {
			var next atomic.Int64
			return parallel(producers, func() error {
				for i := next.Add(1); i <= int64(jobs); i = next.Add(1) {
					j := &store.NewJob{Kind: "sortie_bench", Queue: "default", Args: fmt.Appendf(nil, `{"s":%d}`, i)}
					if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{j}}); err != nil {
						return err
					}
				}
				return nil
			})
		}},
		{"claim", nil, func() error {
			var mu sync.Mutex
			return parallel(producers, func() error {
				for {
					res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 100, Now: now, Lease: time.Hour, Worker: "bench"})
					if err != nil || len(res.Jobs) == 0 {
						return err
					}
					mu.Lock()
					for _, j := range res.Jobs {
						claimed = append(claimed, store.LeaseRef{ID: j.ID, ClaimToken: j.ClaimToken})
					}
					mu.Unlock()
				}
			})
		}},
		{"complete", nil, func() error {
			var next atomic.Int64
			return parallel(producers, func() error {
				for lo := next.Add(100) - 100; lo < int64(len(claimed)); lo = next.Add(100) - 100 {
					var rs []*store.Report
					for _, c := range claimed[lo:min(lo+100, int64(len(claimed)))] {
						rs = append(rs, &store.Report{ID: c.ID, ClaimToken: c.ClaimToken, Kind: store.ReportCompleted})
					}
					out, err := st.JobFinish(ctx, &store.JobFinishParams{Now: now, Reports: rs})
					if err != nil {
						return err
					}
					for _, r := range out {
						if !r.Applied {
							return fmt.Errorf("a completion was refused")
						}
					}
				}
				return nil
			})
		}},
		{"floor", func() (err error) { fq, err = loadFloor(admin, st, "floor", jobs); return err }, func() error { return drainFloor(admin, fq) }},
		{"least", func() (err error) { fq, err = loadFloor(admin, st, "least", jobs); return err }, func() error { return drainFloor(admin, fq) }},
		{"drain", func() error { return enqueueBatches(st, "default", jobs) }, func() error {
			return parallel(producers, func() error {
				for {
					res, err := st.JobFetch(ctx, &store.JobFetchParams{Queue: "default", Limit: 100, Now: time.Now(), Lease: time.Hour, Worker: "bench"})
					if err != nil || len(res.Jobs) == 0 {
						return err
					}
					rs := make([]*store.Report, len(res.Jobs))
					for i, j := range res.Jobs {
						rs[i] = &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted}
					}
					if _, err := st.JobFinish(ctx, &store.JobFinishParams{Now: time.Now(), Reports: rs}); err != nil {
						return err
					}
				}
			})
		}},
	}
	for _, ph := range phases {
		b.Run(ph.name, func(b *testing.B) {
			if ph.setup != nil {
				if err := ph.setup(); err != nil {
					b.Fatal(err)
				}
			}
			if err := admin.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			cpu0 := mainThreadCPU(b, admin)
			b.ResetTimer()
			if err := ph.run(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			cpu := mainThreadCPU(b, admin) - cpu0
			stats := commandStats(b, admin)
			var usec, calls float64
			var lines []string
			for name, c := range stats {
				lines = append(lines, fmt.Sprintf("%-22s %9.0f calls %11.0f us %7.2f us/call", name, c.calls, c.usec, c.usec/c.calls))
				// An enqueue sends no HGETALL of its own: the one its
				// function runs (the queue's waiters) is in the call's time.
				if !sentAlone[name] || (ph.name == "enqueue-single" && name == "hgetall") {
					continue
				}
				usec += c.usec
				calls += c.calls
			}
			sort.Strings(lines)
			b.Logf("%s: commandstats\n%s", ph.name, strings.Join(lines, "\n"))
			n := float64(jobs)
			b.ReportMetric(usec/n, "server-us/job")
			b.ReportMetric(cpu.Seconds()*1e6/n, "cpu-us/job")
			b.ReportMetric(calls/n, "calls/job")
		})
	}
}

// floorLibrary holds the least a drained job can cost the server in Redis
// Functions, for BenchmarkServerTime's floor and least phases, each a
// claim and a completion function with nothing between their commands:
// no check but the token, no order but the list's, no history, no
// wake-up, no feature a job may use.
//
// floor_claim and floor_complete run the commands sortie's claim and
// completion run for a plain job, in the same shape: per job one HMGET and
// one HSET each; per call the running set's add and removal, a bucket of
// the completed index, the finished list, the count. least_claim and
// least_complete keep a running job's claim (token, lease, worker) in one
// hash of the queue's, written once a call, instead of in the job's hash:
// per job only the completion's HSET of the outcome is left, with the
// caller's HGETALL of the claimed job.
const floorLibrary = `#!lua name=sortiefloor
-- finished does a completion call's work for the jobs ids completed: the
-- running set's removal, a bucket of the completed index, the finished
-- list, the count. It returns how many there are.
local function finished(qp, now, ids)
  if #ids == 0 then return 0 end
  local b, f = {}, {}
  for _, id in ipairs(ids) do
    b[#b + 1] = id
    b[#b + 1] = id
    f[#f + 1] = now .. id
  end
  redis.call('ZREM', qp .. 'r', unpack(ids))
  redis.call('ZADD', qp .. 'floor:' .. ids[1], unpack(b))
  redis.call('RPUSH', qp .. 'F:completed', unpack(f))
  redis.call('HINCRBY', qp .. 'n', 'completed', #ids)
  return #ids
end
redis.register_function('floor_claim', function(keys, argv)
  local lane, qp, n, lu, tok = keys[1], argv[1], tonumber(argv[2]), argv[3], tonumber(argv[4])
  local ms = redis.call('LPOP', lane, n)
  if not ms then return {} end
  local out, r = {}, {}
  for _, m in ipairs(ms) do
    local id = string.sub(m, 20)
    local key = argv[5] .. id
    local v = redis.call('HMGET', key, 'st', 'ra', 'ca')
    tok = tok + 1
    local ts = string.format('%d', tok)
    redis.call('HSET', key, 'st', 'running', 'ata', v[2], 'atb', 'floor', 'lu', lu, 'tok', ts)
    r[#r + 1] = lu
    r[#r + 1] = id
    out[#out + 1] = id
    out[#out + 1] = ts
  end
  redis.call('ZADD', qp .. 'r', unpack(r))
  redis.call('HINCRBY', qp .. 'n', 'available', -#ms)
  return out
end)
redis.register_function('floor_complete', function(keys, argv)
  local qp, now, jp = argv[1], argv[2], argv[3]
  local ids = {}
  for i = 4, #argv, 2 do
    local id, tok = argv[i], argv[i + 1]
    local key = jp .. id
    local v = redis.call('HMGET', key, 'st', 'tok', 'q', 'pk', 'u', 'hd', 'a', 'g', 'ft', 'cr', 'hr', 'par', 'ss')
    if v[2] == tok then
      redis.call('HSET', key, 'st', 'completed', 'a', '1', 'fa', now, 'lu', '', 'ft', tok .. ':completed')
      ids[#ids + 1] = id
    end
  end
  return finished(qp, now, ids)
end)
redis.register_function('least_claim', function(keys, argv)
  local lane, qp, n, lu, tok = keys[1], argv[1], tonumber(argv[2]), argv[3], tonumber(argv[4])
  local ms = redis.call('LPOP', lane, n)
  if not ms then return {} end
  local out, r, c = {}, {}, {}
  for _, m in ipairs(ms) do
    local id = string.sub(m, 20)
    tok = tok + 1
    local ts = string.format('%d', tok)
    r[#r + 1] = lu
    r[#r + 1] = id
    c[#c + 1] = id
    c[#c + 1] = ts .. ':' .. lu .. ':floor'
    out[#out + 1] = id
    out[#out + 1] = ts
  end
  redis.call('HSET', qp .. 'claims', unpack(c))
  redis.call('ZADD', qp .. 'r', unpack(r))
  redis.call('HINCRBY', qp .. 'n', 'available', -#ms)
  return out
end)
redis.register_function('least_complete', function(keys, argv)
  local qp, now, jp = argv[1], argv[2], argv[3]
  local ids, toks = {}, {}
  for i = 4, #argv, 2 do
    ids[#ids + 1] = argv[i]
    toks[#toks + 1] = argv[i + 1]
  end
  local cs = redis.call('HMGET', qp .. 'claims', unpack(ids))
  local done = {}
  for i, id in ipairs(ids) do
    local c = cs[i]
    if c and string.sub(c, 1, string.find(c, ':', 1, true) - 1) == toks[i] then
      redis.call('HSET', jp .. id, 'st', 'completed', 'a', '1', 'fa', now, 'ata', now, 'atb', 'floor', 'ft', toks[i] .. ':completed')
      done[#done + 1] = id
    end
  end
  if #done > 0 then redis.call('HDEL', qp .. 'claims', unpack(done)) end
  return finished(qp, now, done)
end)
`

// floorQueue is a queue the floor or least phase drains: the functions'
// prefix (the phase's name, five letters, which is the queue's name too),
// its lane's key, its key prefix, and the jobs' key prefix.
type floorQueue struct{ fn, lane, qp, jobs string }

// loadFloor loads floorLibrary and enqueues n jobs to queue name, of a
// phase of floorLibrary's.
func loadFloor(admin *redis.Client, st store.Store, name string, n int) (floorQueue, error) {
	ctx := context.Background()
	if err := admin.FunctionLoadReplace(ctx, floorLibrary).Err(); err != nil {
		return floorQueue{}, err
	}
	if err := enqueueBatches(st, name, n); err != nil {
		return floorQueue{}, err
	}
	pattern := fmt.Sprintf("sortie:*:q%d:%s:L:*", len(name), name)
	lanes, err := admin.Keys(ctx, pattern).Result()
	if err != nil || len(lanes) != 1 {
		return floorQueue{}, fmt.Errorf("the %s phase wants one lane list, found %v (%v)", name, lanes, err)
	}
	return floorQueue{fn: name, lane: lanes[0], qp: lanes[0][:strings.LastIndex(lanes[0], ":L:")+1], jobs: "sortie:j:"}, nil
}

// drainFloor drains fq's lane as the drain phase does sortie's queue: 8
// goroutines each claim 100, read them (HGETALL, as sortie's claim of
// many leaves to its caller), complete them and claim again.
func drainFloor(admin *redis.Client, fq floorQueue) error {
	ctx := context.Background()
	var tok atomic.Int64
	return parallel(8, func() error {
		for {
			base := tok.Add(100) - 100
			now := fmt.Sprintf("%018d", time.Now().UnixMicro())
			v, err := admin.FCall(ctx, fq.fn+"_claim", []string{fq.lane}, fq.qp, 100, now, base, fq.jobs).StringSlice()
			if err != nil || len(v) == 0 {
				return err
			}
			pipe := admin.Pipeline()
			for i := 0; i < len(v); i += 2 {
				pipe.HGetAll(ctx, fq.jobs+v[i])
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			args := []any{fq.qp, fmt.Sprintf("%018d", time.Now().UnixMicro()), fq.jobs}
			for _, x := range v {
				args = append(args, x)
			}
			n, err := admin.FCall(ctx, fq.fn+"_complete", []string{fq.qp + "r"}, args...).Int()
			if err != nil {
				return err
			}
			if n != len(v)/2 {
				return fmt.Errorf("%s: %d of %d completions applied", fq.fn, n, len(v)/2)
			}
		}
	})
}

// enqueueBatches enqueues n jobs of sortie bench's shape to queue q,
// 1,000 a call.
func enqueueBatches(st store.Store, q string, n int) error {
	for lo := 0; lo < n; lo += 1000 {
		batch := make([]*store.NewJob, min(1000, n-lo))
		for i := range batch {
			batch[i] = &store.NewJob{Kind: "sortie_bench", Queue: q, Args: fmt.Appendf(nil, `{"s":%d}`, lo+i)}
		}
		if _, err := st.JobEnqueueMany(context.Background(), &store.JobEnqueueManyParams{Now: time.Now(), Jobs: batch}); err != nil {
			return err
		}
	}
	return nil
}

// sentAlone names the commands the store sends on its own on these
// paths (HGETALL: reading claimed jobs; sortie_fetch_rows, which runs it
// inside, is not used on a near server), the ones BenchmarkServerTime
// adds up. A claim of a few jobs, the last of a phase's, reads them
// inside its call, counted twice: a few in 100,000.
var sentAlone = map[string]bool{"fcall": true, "exec": true, "multi": true, "hgetall": true}

// parallel runs f in n goroutines and returns the first error.
func parallel(n int, f func() error) error {
	errs := make(chan error, n)
	for range n {
		go func() { errs <- f() }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

type commandStat struct{ calls, usec float64 }

// commandStats reads INFO commandstats: command -> calls and microseconds.
func commandStats(b *testing.B, rdb *redis.Client) map[string]commandStat {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := make(map[string]commandStat)
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var c commandStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				c.calls = f
			case "usec":
				c.usec = f
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = c
	}
	return out
}

// mainThreadCPU reads the CPU time of the server's main thread (INFO cpu).
func mainThreadCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, l := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if ok && (k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// handTrips times rounds pushes of pub, one a tick, each from just before
// it is sent to its receipt by sub's BLPOP, already waiting, in order.
func handTrips(b *testing.B, pub, sub *redis.Client, rounds int, tick *time.Ticker) []time.Duration {
	ctx := context.Background()
	got := make(chan time.Time)
	go func() {
		defer close(got)
		for range rounds {
			if err := sub.BLPop(ctx, 5*time.Second, "floorlist").Err(); err != nil {
				b.Error(err)
				return
			}
			got <- time.Now()
		}
	}()
	trips := make([]time.Duration, 0, rounds)
	for range rounds {
		<-tick.C
		start := time.Now()
		if err := pub.RPush(ctx, "floorlist", "").Err(); err != nil {
			b.Fatal(err)
		}
		at, ok := <-got
		if !ok {
			b.FailNow()
		}
		trips = append(trips, at.Sub(start))
	}
	sort.Slice(trips, func(i, j int) bool { return trips[i] < trips[j] })
	return trips
}

// BenchmarkWakeFloor reports what a job's latency at a low rate cannot go
// below on this machine and server, whatever sortie does, at 500 rounds a
// second on an empty server of its own:
//
//   - trips-p50-us, trips-p99-us: the three trips between processes of a
//     job's path to a worker woken on its queue's channel, with nothing
//     done on the way: a connection publishes on a shard channel
//     (SPUBLISH), a second one receives it, sends PING and reads the
//     answer;
//
//   - hand-p50-us, hand-p99-us: the two trips of a job's path to a worker
//     waiting on the server (the waiting claims), with nothing done on the
//     way: a connection pushes to a list (RPUSH) that a second one waits
//     on (BLPOP), which receives it;
//
//   - fcall-paced-us, fcall-busy-us: the server's time in a function that
//     returns a constant (the library's sortie_version), per call in INFO
//     commandstats, called 500 times a second and then back to back: at
//     that rate the server is idle between calls, and each runs cold.
//
//     go test -run '^$' -bench WakeFloor -benchtime 1x ./store/redisstore/
func BenchmarkWakeFloor(b *testing.B) {
	const rounds, pace = 2000, 2 * time.Millisecond
	srv := redistest.StartServer(b, &redistest.ServerOptions{})
	ctx := context.Background()
	opts, _, err := redisstore.ParseURL(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	st, err := redisstore.Open(ctx, srv.URL, nil) // loads the library
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	pub, sub := redis.NewClient(opts), redis.NewClient(opts)
	defer pub.Close()
	defer sub.Close()
	ps := sub.SSubscribe(ctx, "floor")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		b.Fatal(err)
	}
	b.ResetTimer()
	trips := make([]time.Duration, 0, rounds)
	tick := time.NewTicker(pace)
	defer tick.Stop()
	for range rounds {
		<-tick.C
		start := time.Now()
		if err := pub.SPublish(ctx, "floor", "").Err(); err != nil {
			b.Fatal(err)
		}
		if _, err := ps.ReceiveMessage(ctx); err != nil {
			b.Fatal(err)
		}
		if err := sub.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		trips = append(trips, time.Since(start))
	}
	sort.Slice(trips, func(i, j int) bool { return trips[i] < trips[j] })
	b.ReportMetric(float64(trips[len(trips)/2].Microseconds()), "trips-p50-us")
	b.ReportMetric(float64(trips[len(trips)*99/100].Microseconds()), "trips-p99-us")
	hands := handTrips(b, pub, sub, rounds, tick)
	b.ReportMetric(float64(hands[len(hands)/2].Microseconds()), "hand-p50-us")
	b.ReportMetric(float64(hands[len(hands)*99/100].Microseconds()), "hand-p99-us")
	for _, paced := range []bool{true, false} {
		if err := pub.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		for range rounds {
			if paced {
				<-tick.C
			}
			if err := pub.FCall(ctx, "sortie_version", nil).Err(); err != nil {
				b.Fatal(err)
			}
		}
		c := commandStats(b, pub)["fcall"]
		name := "fcall-busy-us"
		if paced {
			name = "fcall-paced-us"
		}
		b.ReportMetric(c.usec/c.calls, name)
	}
}
