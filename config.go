package sortie

import (
	"fmt"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/sortiehq/sortie/internal/clock"
	"github.com/sortiehq/sortie/store"
)

// QueueDefault is the queue a job goes to when nothing names another.
const QueueDefault = "default"

// Config configures a Client. A nil *Config means all defaults; a zero field
// means that field's default.
type Config struct {
	// Queues are the queues this client works, by name. Empty means the
	// client only enqueues and inspects.
	Queues map[string]QueueConfig
	// Pools are groups of queues that share one set of workers, by pool
	// name. A queue is in Queues or in one pool, not both.
	Pools map[string]PoolConfig
	// Workers are the handlers by kind. Required when Queues is not empty;
	// an enqueue-only client uses it for the kinds' default options.
	Workers *Workers
	// ID names this client in AttemptedBy and logs. Defaults to
	// "hostname:pid:random".
	ID string
	// Logger receives the client's logs. Defaults to warnings and above on
	// stderr. Job starts and finishes are logged at Info.
	Logger *slog.Logger
	// MaxAttempts is the default number of attempts of a job. Defaults to 25.
	MaxAttempts int
	// JobTimeout cancels a handler's context after this long. Defaults to no
	// timeout (0); WorkerOpts.Timeout and EnqueueOpts.Timeout override it.
	JobTimeout time.Duration
	// MaxResultBytes caps a job's result (SetResult), encoded. Defaults to
	// 64 KiB.
	MaxResultBytes int
	// RetryPolicy decides the wait before a retry. Defaults to
	// ExponentialBackoff{}.
	RetryPolicy RetryPolicy
	// Lease is how long a claimed job stays claimed without a heartbeat; a
	// job whose worker died is rescued after about this long. Defaults to
	// 30 seconds; at least 1 second.
	Lease time.Duration
	// HeartbeatInterval is how often running jobs' leases are extended.
	// Defaults to Lease/3; must be less than Lease.
	HeartbeatInterval time.Duration
	// RescueInterval is how often the client looks for jobs whose lease
	// expired. Defaults to 5 seconds.
	RescueInterval time.Duration
	// PollInterval is the longest a worker waits before checking its queue
	// without a wake-up (wake-ups cover enqueues through this store; polling
	// covers other processes of stores that cannot notify). Defaults to 1 second.
	PollInterval time.Duration
	// FetchCooldown is the least time between two fetches of a queue while
	// fewer than half its workers are free, so a busy queue fetches in
	// batches. Defaults to 1 millisecond.
	FetchCooldown time.Duration
	// CompletedRetention is how long completed jobs are kept. Defaults to 24
	// hours; negative keeps them forever.
	CompletedRetention time.Duration
	// CancelledRetention is how long cancelled jobs are kept. Defaults to 7
	// days; negative keeps them forever.
	CancelledRetention time.Duration
	// DeadRetention is how long dead jobs are kept. Defaults to 30 days;
	// negative keeps them forever.
	DeadRetention time.Duration
	// Periodic are schedules this client runs (when started). Several
	// clients may run the same schedules; each slot is enqueued once.
	Periodic []*PeriodicJob
	// WorkMiddleware wraps every job's handler, the first outermost.
	WorkMiddleware []WorkMiddleware
	// EnqueueMiddleware wraps every enqueue, the first outermost.
	EnqueueMiddleware []EnqueueMiddleware
	// Clock is the client's time source. Defaults to the wall clock; tests
	// use sortietest's fake clock.
	Clock Clock
}

// PoolOrder says how a pool picks the queue to fetch from.
type PoolOrder int

// The pool orders.
const (
	// PoolStrict fetches from the pool's queues in the order listed: a
	// later queue gets workers only while the earlier ones have no jobs.
	PoolStrict PoolOrder = iota
	// PoolWeighted draws the order at every fetch by PoolConfig.Weights, so
	// each queue leads in proportion to its weight and none is starved.
	PoolWeighted
)

// PoolConfig configures a set of workers shared by several queues.
type PoolConfig struct {
	// Queues are the pool's queues; in PoolStrict order, highest first.
	Queues []string
	// Order is PoolStrict (the default) or PoolWeighted.
	Order PoolOrder
	// Weights are the queues' weights for PoolWeighted, one per queue, each
	// at least 1.
	Weights []int
	// MaxWorkers is the most jobs the pool runs at once. At least 1.
	MaxWorkers int
}

// QueueConfig configures one queue a client works.
type QueueConfig struct {
	// MaxWorkers is the most jobs of this queue the client runs at once.
	// At least 1.
	MaxWorkers int
	// Settings, when set, are written to the store when the client starts:
	// the queue's limits shared by every process (global concurrency, rate
	// limits, partition limits, maximum depth). The last client to start
	// wins; nil leaves the store's settings as they are (QueueConfigure and
	// the CLI change them too).
	Settings *QueueSettings
}

// withDefaults validates c and returns a copy with defaults filled in.
func (c *Config) withDefaults() (*Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	names := make([]string, 0, len(cfg.Queues))
	for name := range cfg.Queues {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := validateQueueName(name); err != nil {
			return nil, invalidf("Config.Queues: %v", err)
		}
		if mw := cfg.Queues[name].MaxWorkers; mw < 1 {
			return nil, invalidf("Config.Queues[%q].MaxWorkers must be at least 1, got %d", name, mw)
		}
		if s := cfg.Queues[name].Settings; s != nil {
			if err := validateQueueSettings(fmt.Sprintf("Config.Queues[%q].Settings", name), s); err != nil {
				return nil, err
			}
		}
	}
	served := make(map[string]string, len(cfg.Queues))
	for q := range cfg.Queues {
		served[q] = "Config.Queues"
	}
	for _, name := range sortedKeys(cfg.Pools) {
		pc := cfg.Pools[name]
		where := fmt.Sprintf("Config.Pools[%q]", name)
		if len(pc.Queues) == 0 {
			return nil, invalidf("%s.Queues is empty", where)
		}
		if pc.MaxWorkers < 1 {
			return nil, invalidf("%s.MaxWorkers must be at least 1, got %d", where, pc.MaxWorkers)
		}
		switch pc.Order {
		case PoolStrict:
		case PoolWeighted:
			if len(pc.Weights) != len(pc.Queues) {
				return nil, invalidf("%s.Weights has %d weights for %d queues", where, len(pc.Weights), len(pc.Queues))
			}
			for i, w := range pc.Weights {
				if w < 1 {
					return nil, invalidf("%s.Weights[%d] must be at least 1, got %d", where, i, w)
				}
			}
		default:
			return nil, invalidf("%s.Order: unknown order %d", where, pc.Order)
		}
		for _, q := range pc.Queues {
			if err := validateQueueName(q); err != nil {
				return nil, invalidf("%s.Queues: %v", where, err)
			}
			if other, dup := served[q]; dup {
				return nil, invalidf("queue %q is in both %s and %s", q, other, where)
			}
			served[q] = where
		}
	}
	if len(served) > 0 && len(cfg.Workers.Kinds()) == 0 {
		return nil, invalidf("Config.Workers must register at least one worker when Config.Queues or Config.Pools is set")
	}
	if cfg.Workers != nil {
		for _, kind := range cfg.Workers.Kinds() {
			q := cfg.Workers.entry(kind).opts.Queue
			if q == "" || len(served) == 0 {
				continue
			}
			if _, ok := served[q]; !ok {
				return nil, invalidf("WorkerOpts.Queue of kind %q is %q, which neither Config.Queues nor Config.Pools lists", kind, q)
			}
		}
	}
	if cfg.MaxAttempts < 0 || cfg.MaxAttempts > store.MaxAttemptsLimit {
		return nil, invalidf("Config.MaxAttempts must be between 1 and %d, got %d", store.MaxAttemptsLimit, cfg.MaxAttempts)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = store.MaxAttemptsDefault
	}
	if cfg.JobTimeout < 0 {
		return nil, invalidf("Config.JobTimeout must not be negative, got %s", cfg.JobTimeout)
	}
	if cfg.MaxResultBytes < 0 {
		return nil, invalidf("Config.MaxResultBytes must not be negative, got %d", cfg.MaxResultBytes)
	}
	if cfg.MaxResultBytes == 0 {
		cfg.MaxResultBytes = 64 << 10
	}
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = ExponentialBackoff{}
	}
	if cfg.Lease == 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Lease < time.Second {
		return nil, invalidf("Config.Lease must be at least 1s, got %s", cfg.Lease)
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = cfg.Lease / 3
	}
	if cfg.HeartbeatInterval <= 0 || cfg.HeartbeatInterval >= cfg.Lease {
		return nil, invalidf("Config.HeartbeatInterval must be positive and less than Lease (%s), got %s", cfg.Lease, cfg.HeartbeatInterval)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"RescueInterval", &cfg.RescueInterval, 5 * time.Second},
		{"PollInterval", &cfg.PollInterval, time.Second},
		{"FetchCooldown", &cfg.FetchCooldown, time.Millisecond},
	} {
		if *d.v < 0 {
			return nil, invalidf("Config.%s must not be negative, got %s", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.CompletedRetention == 0 {
		cfg.CompletedRetention = 24 * time.Hour
	}
	if cfg.CancelledRetention == 0 {
		cfg.CancelledRetention = 7 * 24 * time.Hour
	}
	if cfg.DeadRetention == 0 {
		cfg.DeadRetention = 30 * 24 * time.Hour
	}
	periodic, err := validatePeriodic(cfg.Periodic)
	if err != nil {
		return nil, err
	}
	cfg.Periodic = periodic
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), randomID())
	}
	return &cfg, nil
}
