package sortie

import (
	"crypto/rand"
	"encoding/hex"
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
	// batches. It is measured on Clock, like every wait of the client: on
	// a fake clock that does not move, such a queue fetches again once half
	// its workers are free. Defaults to 1 millisecond.
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
	// HistoryRetention is how long the store keeps the history counts
	// (JobHistory: finished jobs per queue, minute and outcome). Defaults
	// to 7 days; negative keeps them forever.
	HistoryRetention time.Duration
	// Periodic are schedules this client runs (when started). Several
	// clients may run the same schedules; each slot is enqueued once.
	Periodic []*PeriodicJob
	// WorkMiddleware wraps every job's handler, the first outermost.
	WorkMiddleware []WorkMiddleware
	// EnqueueMiddleware wraps every enqueue, the first outermost.
	EnqueueMiddleware []EnqueueMiddleware
	// ProcessBeat is how often a started client records itself in the
	// store's process registry (Client.Processes): host, PID, version,
	// queues, busy workers. A process silent for ProcessForget is taken
	// for dead and its row deleted by the next beat of any process.
	// Defaults to 10 seconds; negative keeps the client out of the
	// registry (it then gets no quiet or stop commands).
	ProcessBeat time.Duration
	// ProcessForget defaults to 6 beats (1 minute); at least 2 beats.
	ProcessForget time.Duration
	// Clock is the client's time source: due times, leases, heartbeats,
	// polls, backoffs after store failures and durations all read it. Only
	// deadlines of contexts (Stop's, a job's timeout) stay on the wall
	// clock. Defaults to the wall clock; tests use sortietest's fake clock.
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
	served, err := cfg.validateQueues()
	if err != nil {
		return nil, err
	}
	if err := cfg.validateWorkers(served); err != nil {
		return nil, err
	}
	if err := cfg.defaultJobLimits(); err != nil {
		return nil, err
	}
	if err := cfg.defaultIntervals(); err != nil {
		return nil, err
	}
	if err := cfg.defaultProcessBeat(); err != nil {
		return nil, err
	}
	cfg.defaultRetention()
	if cfg.Periodic, err = validatePeriodic(cfg.Periodic); err != nil {
		return nil, err
	}
	cfg.defaultIdentity()
	return &cfg, nil
}

// validateQueues checks Queues and Pools and returns, for every queue
// served, where the config lists it.
func (c *Config) validateQueues() (map[string]string, error) {
	served := make(map[string]string, len(c.Queues))
	for _, name := range sortedKeys(c.Queues) {
		if err := validateQueueConfig(name, c.Queues[name]); err != nil {
			return nil, err
		}
		served[name] = "Config.Queues"
	}
	for _, name := range sortedKeys(c.Pools) {
		where := fmt.Sprintf("Config.Pools[%q]", name)
		pc := c.Pools[name]
		if err := validatePool(where, &pc); err != nil {
			return nil, err
		}
		for _, q := range pc.Queues {
			if err := store.ValidateQueueName(q); err != nil {
				return nil, invalidf("%s.Queues: %v", where, err)
			}
			if other, dup := served[q]; dup {
				return nil, invalidf("queue %q is in both %s and %s", q, other, where)
			}
			served[q] = where
		}
	}
	return served, nil
}

// validateQueueConfig checks Config.Queues[name].
func validateQueueConfig(name string, qc QueueConfig) error {
	if err := store.ValidateQueueName(name); err != nil {
		return invalidf("Config.Queues: %v", err)
	}
	if qc.MaxWorkers < 1 {
		return invalidf("Config.Queues[%q].MaxWorkers must be at least 1, got %d", name, qc.MaxWorkers)
	}
	if qc.Settings != nil {
		return validateQueueSettings(fmt.Sprintf("Config.Queues[%q].Settings", name), qc.Settings)
	}
	return nil
}

// validatePool checks a pool's size and order; where names it in errors.
func validatePool(where string, pc *PoolConfig) error {
	if len(pc.Queues) == 0 {
		return invalidf("%s.Queues is empty", where)
	}
	if pc.MaxWorkers < 1 {
		return invalidf("%s.MaxWorkers must be at least 1, got %d", where, pc.MaxWorkers)
	}
	switch pc.Order {
	case PoolStrict:
		return nil
	case PoolWeighted:
		if len(pc.Weights) != len(pc.Queues) {
			return invalidf("%s.Weights has %d weights for %d queues", where, len(pc.Weights), len(pc.Queues))
		}
		for i, w := range pc.Weights {
			if w < 1 {
				return invalidf("%s.Weights[%d] must be at least 1, got %d", where, i, w)
			}
		}
		return nil
	default:
		return invalidf("%s.Order: unknown order %d", where, pc.Order)
	}
}

// validateWorkers checks that a working client has workers, and that every
// worker's queue is one the client serves.
func (c *Config) validateWorkers(served map[string]string) error {
	if len(served) > 0 && len(c.Workers.Kinds()) == 0 {
		return invalidf("Config.Workers must register at least one worker when Config.Queues or Config.Pools is set")
	}
	if c.Workers == nil || len(served) == 0 {
		return nil
	}
	for _, kind := range c.Workers.Kinds() {
		q := c.Workers.entry(kind).opts.Queue
		if q == "" {
			continue
		}
		if _, ok := served[q]; !ok {
			return invalidf("WorkerOpts.Queue of kind %q is %q, which neither Config.Queues nor Config.Pools lists", kind, q)
		}
	}
	return nil
}

// defaultJobLimits checks and fills in what bounds a job: attempts,
// timeout, result size, retry policy, lease and heartbeat.
func (c *Config) defaultJobLimits() error {
	if c.MaxAttempts < 0 || c.MaxAttempts > store.MaxAttemptsLimit {
		return invalidf("Config.MaxAttempts must be between 1 and %d, got %d", store.MaxAttemptsLimit, c.MaxAttempts)
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = store.MaxAttemptsDefault
	}
	if c.JobTimeout < 0 {
		return invalidf("Config.JobTimeout must not be negative, got %s", c.JobTimeout)
	}
	if c.MaxResultBytes < 0 {
		return invalidf("Config.MaxResultBytes must not be negative, got %d", c.MaxResultBytes)
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = 64 << 10
	}
	if c.RetryPolicy == nil {
		c.RetryPolicy = ExponentialBackoff{}
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.Lease < time.Second {
		return invalidf("Config.Lease must be at least 1s, got %s", c.Lease)
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.Lease / 3
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.Lease {
		return invalidf("Config.HeartbeatInterval must be positive and less than Lease (%s), got %s", c.Lease, c.HeartbeatInterval)
	}
	return nil
}

// defaultIntervals checks and fills in the background loops' intervals.
func (c *Config) defaultIntervals() error {
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"RescueInterval", &c.RescueInterval, 5 * time.Second},
		{"PollInterval", &c.PollInterval, time.Second},
		{"FetchCooldown", &c.FetchCooldown, time.Millisecond},
	} {

		if *d.v < 0 {
			return invalidf("Config.%s must not be negative, got %s", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	return nil
}

// defaultProcessBeat checks and fills in the process registry's intervals.
func (c *Config) defaultProcessBeat() error {
	if c.ProcessBeat < 0 {
		return nil
	}
	if c.ProcessBeat == 0 {
		c.ProcessBeat = 10 * time.Second
	}
	if c.ProcessForget == 0 {
		c.ProcessForget = 6 * c.ProcessBeat
	}
	if c.ProcessForget < 2*c.ProcessBeat {
		return invalidf("Config.ProcessForget must be at least two ProcessBeat intervals (%s), got %s", 2*c.ProcessBeat, c.ProcessForget)
	}
	return nil
}

// defaultRetention fills in the retention of finished jobs and of the
// history.
func (c *Config) defaultRetention() {
	if c.CompletedRetention == 0 {
		c.CompletedRetention = 24 * time.Hour
	}
	if c.CancelledRetention == 0 {
		c.CancelledRetention = 7 * 24 * time.Hour
	}
	if c.DeadRetention == 0 {
		c.DeadRetention = 30 * 24 * time.Hour
	}
	if c.HistoryRetention == 0 {
		c.HistoryRetention = 7 * 24 * time.Hour
	}
}

// defaultIdentity fills in the logger, the clock and the client's ID.
func (c *Config) defaultIdentity() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), randomID())
	}
}

func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
