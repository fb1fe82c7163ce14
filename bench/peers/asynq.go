package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
)

// AsynqConfig names an asynq Server configuration.
type AsynqConfig string

// The asynq configurations. They differ only in TaskCheckInterval, how
// long the server's one fetch loop sleeps when it finds every queue empty
// (the interval halved plus a random jitter of up to the interval): it
// shows in latency, where the queue is often empty, and hardly elsewhere.
const (
	// AsynqDefaults is asynq's default Config: TaskCheckInterval 1 s.
	AsynqDefaults AsynqConfig = "defaults"
	// AsynqTuned is TaskCheckInterval 100 ms, what asynq issue #506
	// measured and pull request #858 proposes as the default.
	AsynqTuned AsynqConfig = "tuned"
)

// ParseAsynqConfig returns the configuration named s.
func ParseAsynqConfig(s string) (AsynqConfig, error) {
	switch c := AsynqConfig(s); c {
	case AsynqDefaults, AsynqTuned:
		return c, nil
	}
	return "", fmt.Errorf("unknown asynq config %q: want defaults or tuned", s)
}

const (
	// asynqDefaultTaskCheckInterval is asynq's default TaskCheckInterval
	// (the Config field's doc; the constant is unexported).
	asynqDefaultTaskCheckInterval = time.Second
	asynqTunedTaskCheckInterval   = 100 * time.Millisecond
	// asynqTaskType is the type of the benchmark's tasks.
	asynqTaskType = "peerbench"
	// asynqAllQueues is the set asynq adds every queue's name to
	// (base.AllQueues); a run removes its queue from it afterwards.
	asynqAllQueues = "asynq:queues"
)

// asynqFanout is how many goroutines one call of enqueue-batch (and the
// preloads) spreads its Enqueue calls over: asynq has no batch enqueue, so
// the fastest its public API goes is concurrent Enqueue calls, one per
// connection of the client's pool, whose size is go-redis's default of 10
// per GOMAXPROCS.
func asynqFanout() int { return 10 * runtime.GOMAXPROCS(0) }

// Asynq runs the workloads on asynq (github.com/hibiken/asynq): a Client
// enqueues, a Server with Concurrency workers runs the jobs.
type Asynq struct {
	opt    asynq.RedisConnOpt
	rdb    *redis.Client
	config AsynqConfig
	logger *slog.Logger
	server string
}

var _ MemoryPeer = (*Asynq)(nil)

// OpenAsynq connects to the Redis server at url (a redis:// URL). Each run
// uses a queue of its own, peerbench_<random>, and deletes its keys after.
// logger receives asynq's warnings and errors.
func OpenAsynq(ctx context.Context, url string, config AsynqConfig, logger *slog.Logger) (*Asynq, error) {
	opt, err := asynq.ParseRedisURI(url)
	if err != nil {
		return nil, fmt.Errorf("asynq: %w", err)
	}
	rdb, version, err := openRedis(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("asynq: connect: %w", err)
	}
	return &Asynq{opt: opt, rdb: rdb, config: config, logger: logger, server: version}, nil
}

// Name returns "asynq".
func (p *Asynq) Name() string { return "asynq" }

// Config returns the configuration's name.
func (p *Asynq) Config() string { return string(p.config) }

// Version returns asynq's, go-redis's and the server's versions.
func (p *Asynq) Version() string {
	return fmt.Sprintf("asynq %s, go-redis %s, Redis %s",
		moduleVersion("github.com/hibiken/asynq"), moduleVersion("github.com/redis/go-redis/v9"), p.server)
}

func (p *Asynq) taskCheckInterval() time.Duration {
	if p.config == AsynqTuned {
		return asynqTunedTaskCheckInterval
	}
	return asynqDefaultTaskCheckInterval
}

// Settings lists the server's settings and the enqueue calls of a run
// with o.
func (p *Asynq) Settings(w bench.Workload, o Options) string {
	o, _ = withDefaults(o, w)
	s := fmt.Sprintf("TaskCheckInterval=%s Concurrency=%d Retention=0 (deleted on completion) MaxRetry=25 pool=%d conns",
		p.taskCheckInterval(), o.Workers, asynqFanout())
	switch w {
	case bench.EnqueueBatch:
		s += fmt.Sprintf(" %d×Enqueue over %d goroutines per call (no batch API; not atomic) producers=%d", o.BatchSize, asynqFanout(), o.Producers)
	case bench.EnqueueSingle:
		s += fmt.Sprintf(" Enqueue producers=%d", o.Producers)
	}
	return s
}

// MemorySettings describes the memory workload's enqueues.
func (p *Asynq) MemorySettings(o MemoryOptions) string {
	o, _ = o.withDefaults()
	return fmt.Sprintf("Enqueue over %d goroutines, Retention=0, args {\"s\":seq} + %d bytes of padding", asynqFanout(), o.PayloadBytes)
}

// Close closes the harness's connection.
func (p *Asynq) Close() error { return p.rdb.Close() }

// drop deletes the keys of queue, all named asynq:{queue}:..., and removes
// it from the set of queues.
func (p *Asynq) drop(ctx context.Context, queue string) error {
	if _, err := deleteKeys(ctx, p.rdb, "asynq:{"+globEscape(queue)+"}:*"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return p.rdb.SRem(ctx, asynqAllQueues, queue).Err()
}

func asynqTask(a jobArgs) (*asynq.Task, error) {
	payload, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	return asynq.NewTask(asynqTaskType, payload), nil
}

// enqueueFanout enqueues jobs lo to hi-1 with asynqFanout goroutines
// calling Enqueue, and stores each job's ID in ids[seq] when ids is not nil.
func enqueueFanout(ctx context.Context, client *asynq.Client, queue string, lo, hi int64, pad string, ids []string) error {
	g, ctx := errgroup.WithContext(ctx)
	var next atomic.Int64
	next.Store(lo)
	for range min(int64(asynqFanout()), hi-lo) {
		g.Go(func() error {
			for {
				seq := next.Add(1) - 1
				if seq >= hi {
					return nil
				}
				task, err := asynqTask(jobArgs{Seq: seq, Pad: pad})
				if err != nil {
					return err
				}
				info, err := client.EnqueueContext(ctx, task, asynq.Queue(queue))
				if err != nil {
					return err
				}
				if ids != nil {
					ids[seq] = info.ID
				}
			}
		})
	}
	return g.Wait()
}

// Run runs w once on a queue of its own.
func (p *Asynq) Run(ctx context.Context, w bench.Workload, opts Options) (res bench.Result, err error) {
	o, err := withDefaults(opts, w)
	if err != nil {
		return res, err
	}
	queue := randomName("peerbench_")
	defer func() {
		if derr := p.drop(ctx, queue); derr != nil && err == nil {
			err = fmt.Errorf("asynq: delete the run's keys: %w", derr)
		}
	}()
	client := asynq.NewClient(p.opt)
	defer client.Close()
	inspector := asynq.NewInspector(p.opt)
	defer inspector.Close()

	rec := bench.NewRecorder(o.Jobs, w == bench.Latency)
	handler := asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		var a jobArgs
		if err := json.Unmarshal(t.Payload(), &a); err != nil {
			return err
		}
		rec.Record(a.Seq, a.At)
		return nil
	})
	var srv *asynq.Server
	ids := make([]string, o.Jobs)
	r := &clientRun{
		peer: "asynq",
		o:    o,
		rec:  rec,
		st:   &asynqState{inspector: inspector, queue: queue},
		start: func(context.Context) error {
			srv = asynq.NewServer(p.opt, asynq.Config{
				Concurrency:       o.Workers,
				Queues:            map[string]int{queue: 1},
				TaskCheckInterval: p.taskCheckInterval(),
				Logger:            asynqLogger{p.logger},
				LogLevel:          asynq.WarnLevel,
			})
			if err := srv.Start(handler); err != nil {
				return fmt.Errorf("asynq: start server: %w", err)
			}
			return nil
		},
		stop: func(context.Context) error {
			// Shutdown waits for the handlers, up to the server's
			// ShutdownTimeout (8 s by default); none is running by now.
			srv.Shutdown()
			return nil
		},
		insert: func(ctx context.Context, a jobArgs) error {
			task, err := asynqTask(a)
			if err != nil {
				return err
			}
			info, err := client.EnqueueContext(ctx, task, asynq.Queue(queue))
			if err != nil {
				return err
			}
			ids[a.Seq] = info.ID
			return nil
		},
		insertMany: func(ctx context.Context, lo, hi int64) error {
			return enqueueFanout(ctx, client, queue, lo, hi, "", ids)
		},
		idProblems: func() []string { return idCheck(ids) },
	}
	return r.run(ctx, w)
}

// RunMemory enqueues o.Jobs jobs into a queue of its own, with the
// fan-out of enqueue-batch, and measures Redis's used_memory per job.
func (p *Asynq) RunMemory(ctx context.Context, opts MemoryOptions) (res bench.Result, m MemoryStats, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return res, m, err
	}
	queue := randomName("peerbench_")
	defer func() {
		if derr := p.drop(ctx, queue); derr != nil && err == nil {
			err = fmt.Errorf("asynq: delete the run's keys: %w", derr)
		}
	}()
	pad := padding(o.PayloadBytes)
	enqueue := func(ctx context.Context) (time.Duration, error) {
		client := asynq.NewClient(p.opt)
		defer client.Close()
		begin := time.Now()
		err := bench.Preload(ctx, o.Jobs, func(ctx context.Context, lo, hi int64) error {
			return enqueueFanout(ctx, client, queue, lo, hi, pad, nil)
		})
		return time.Since(begin), err
	}
	pending := func(context.Context) (int64, error) {
		inspector := asynq.NewInspector(p.opt)
		defer inspector.Close()
		info, err := inspector.GetQueueInfo(queue)
		if err != nil {
			return 0, fmt.Errorf("asynq: queue info: %w", err)
		}
		return int64(info.Pending), nil
	}
	res, m, err = measureMemory(ctx, p.rdb, o, enqueue, pending)
	if err != nil {
		return res, m, fmt.Errorf("asynq: %w", err)
	}
	return res, m, nil
}

// asynqState reads the run's queue through asynq's Inspector. With
// Retention 0 a task's hash is deleted when it succeeds, so the finished
// tasks are counted by the queue's cumulative counters: processed (every
// attempt that ended) less failed (those that ended in an error), plus
// the archived (dead) tasks.
type asynqState struct {
	inspector *asynq.Inspector
	queue     string
}

func (s *asynqState) info() (*asynq.QueueInfo, error) {
	info, err := s.inspector.GetQueueInfo(s.queue)
	if err != nil {
		return nil, fmt.Errorf("asynq: queue info: %w", err)
	}
	return info, nil
}

func (s *asynqState) finished(context.Context) (int64, error) {
	info, err := s.info()
	if err != nil {
		return 0, err
	}
	return int64(info.ProcessedTotal - info.FailedTotal + info.Archived), nil
}

// counts names asynq's states as sortie's: pending is available, active
// running, retry retrying, archived dead, aggregating waiting; completed
// is processed less failed (the completed tasks themselves are gone).
func (s *asynqState) counts(context.Context) ([]store.QueueStateCount, error) {
	info, err := s.info()
	if err != nil {
		return nil, err
	}
	count := func(state store.JobState, n int) store.QueueStateCount {
		return store.QueueStateCount{Queue: s.queue, State: state, Count: int64(n)}
	}
	return []store.QueueStateCount{
		count(store.JobStateAvailable, info.Pending),
		count(store.JobStateScheduled, info.Scheduled),
		count(store.JobStateRunning, info.Active),
		count(store.JobStateRetrying, info.Retry),
		count(store.JobStateDead, info.Archived),
		count(store.JobStateWaiting, info.Aggregating),
		count(store.JobStateCompleted, info.ProcessedTotal-info.FailedTotal),
	}, nil
}

// asynqLogger passes asynq's logs to a slog.Logger.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...), "peer", "asynq") }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...), "peer", "asynq") }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...), "peer", "asynq") }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...), "peer", "asynq") }

// Fatal logs and exits, as asynq's Logger interface asks.
func (a asynqLogger) Fatal(args ...any) {
	a.l.Error(fmt.Sprint(args...), "peer", "asynq")
	os.Exit(1)
}
