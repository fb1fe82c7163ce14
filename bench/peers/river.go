package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
)

// RiverConfig names a River client configuration.
type RiverConfig string

// The River configurations.
const (
	// RiverDefaults is River's default Config (FetchCooldown 100 ms,
	// FetchPollInterval 1 s) with MaxWorkers 100.
	RiverDefaults RiverConfig = "defaults"
	// RiverBench is the configuration of River's own benchmark (`river
	// bench`): FetchCooldown 2 ms and FetchPollInterval 20 ms, here with
	// sortie's 100 workers.
	RiverBench RiverConfig = "river-bench"
	// RiverTuned is RiverBench with 2,000 workers, the pool size of River's
	// benchmark.
	RiverTuned RiverConfig = "tuned"
)

// ParseRiverConfig returns the configuration named s.
func ParseRiverConfig(s string) (RiverConfig, error) {
	switch c := RiverConfig(s); c {
	case RiverDefaults, RiverBench, RiverTuned:
		return c, nil
	}
	return "", fmt.Errorf("unknown River config %q: want defaults, river-bench or tuned", s)
}

// Settings of River's own benchmark, and the worker pool of tuned.
const (
	riverBenchFetchCooldown     = 2 * time.Millisecond
	riverBenchFetchPollInterval = 20 * time.Millisecond
	riverTunedWorkers           = 2000
	// defaultPoolConns is the pgx pool size when the URL sets no
	// pool_max_conns: enough for 8 producers, the listener, the leader's
	// maintenance and the completer. pgxpool's own default, max(4, CPUs),
	// would make the 8 producers of enqueue-single queue for connections.
	defaultPoolConns = 40
	stopTimeout      = 30 * time.Second
)

// Kind names the River job kind of the benchmark.
func (jobArgs) Kind() string { return "peerbench" }

// pgPool opens a pgx pool on url, with defaultPoolConns connections
// unless the URL says otherwise.
func pgPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultPoolConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func serverVersion(ctx context.Context, pool *pgxpool.Pool) string {
	var v string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "unknown"
	}
	// "15.18 (Debian 15.18-0+deb12u1)": the version is the first word.
	if i := strings.IndexByte(v, ' '); i > 0 {
		v = v[:i]
	}
	return v
}

// dropSchema drops schema and everything in it, given a minute even when
// ctx has ended.
func dropSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_, err := pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	return err
}

// riverSchema creates a schema of its own for one run and migrates River's
// tables into it; the caller drops it (dropSchema).
func riverSchema(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (string, error) {
	schema := randomName("peerbench_")
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", fmt.Errorf("river: create schema: %w", err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: logger})
	if err == nil {
		_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		return "", errors.Join(fmt.Errorf("river: migrate: %w", err), dropSchema(ctx, pool, schema))
	}
	return schema, nil
}

// River runs the workloads on River with its pgx v5 driver.
type River struct {
	pool   *pgxpool.Pool
	config RiverConfig
	logger *slog.Logger
	server string
}

var _ Peer = (*River)(nil)

// OpenRiver connects to the PostgreSQL database at url. Each run migrates
// River's tables into a new schema of that database and drops it after.
// logger receives River's logs.
func OpenRiver(ctx context.Context, url string, config RiverConfig, logger *slog.Logger) (*River, error) {
	pool, err := pgPool(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("river: connect: %w", err)
	}
	return &River{pool: pool, config: config, logger: logger, server: serverVersion(ctx, pool)}, nil
}

// Name returns "river".
func (p *River) Name() string { return "river" }

// Config returns the configuration's name.
func (p *River) Config() string { return string(p.config) }

// Version returns River's, the driver's and the server's versions.
func (p *River) Version() string {
	return fmt.Sprintf("river %s, riverpgxv5 %s, pgx %s, PostgreSQL %s",
		moduleVersion("github.com/riverqueue/river"), moduleVersion("github.com/riverqueue/river/riverdriver/riverpgxv5"),
		moduleVersion("github.com/jackc/pgx/v5"), p.server)
}

// Settings lists the client's settings for a run with o.
func (p *River) Settings(w bench.Workload, o Options) string {
	o, _ = withDefaults(p.options(o), w)
	cfg := p.clientConfig("", o.Workers)
	s := fmt.Sprintf("FetchCooldown=%s FetchPollInterval=%s MaxWorkers=%d pool_max_conns=%d",
		cmpOr(cfg.FetchCooldown, river.FetchCooldownDefault), cmpOr(cfg.FetchPollInterval, river.FetchPollIntervalDefault),
		o.Workers, p.pool.Config().MaxConns)
	switch w {
	case bench.EnqueueBatch:
		s += fmt.Sprintf(" InsertManyFast×%d producers=%d", o.BatchSize, o.Producers)
	case bench.EnqueueSingle:
		s += fmt.Sprintf(" Insert producers=%d", o.Producers)
	}
	return s
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// options applies the configuration's default worker pool.
func (p *River) options(o Options) Options {
	if o.Workers == 0 && p.config == RiverTuned {
		o.Workers = riverTunedWorkers
	}
	return o
}

// clientConfig is the River Config of the configuration, without Workers.
func (p *River) clientConfig(schema string, workers int) *river.Config {
	cfg := &river.Config{
		Logger: p.logger,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Schema: schema,
	}
	if p.config != RiverDefaults {
		cfg.FetchCooldown = riverBenchFetchCooldown
		cfg.FetchPollInterval = riverBenchFetchPollInterval
	}
	return cfg
}

// Close closes the pool.
func (p *River) Close() error {
	p.pool.Close()
	return nil
}

// Run runs w once in a new schema.
func (p *River) Run(ctx context.Context, w bench.Workload, opts Options) (res bench.Result, err error) {
	o, err := withDefaults(p.options(opts), w)
	if err != nil {
		return res, err
	}
	schema, err := riverSchema(ctx, p.pool, p.logger)
	if err != nil {
		return res, err
	}
	defer func() {
		if derr := dropSchema(ctx, p.pool, schema); derr != nil && err == nil {
			err = fmt.Errorf("river: drop schema: %w", derr)
		}
	}()
	driver := riverpgxv5.New(p.pool)

	rec := bench.NewRecorder(o.Jobs, w == bench.Latency)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, job *river.Job[jobArgs]) error {
		rec.Record(job.Args.Seq, job.Args.At)
		return nil
	}))
	cfg := p.clientConfig(schema, o.Workers)
	cfg.Workers = workers
	client, err := river.NewClient(driver, cfg)
	if err != nil {
		return res, fmt.Errorf("river: %w", err)
	}
	// Insert returns the job's ID; the run checks them after enqueue-single.
	var ids []int64
	if w == bench.EnqueueSingle {
		ids = make([]int64, o.Jobs)
	}
	r := &clientRun{
		peer: "river",
		o:    o,
		rec:  rec,
		st:   &riverState{pool: p.pool, table: pgx.Identifier{schema, "river_job"}.Sanitize()},
		start: func(ctx context.Context) error {
			if err := client.Start(ctx); err != nil {
				return fmt.Errorf("river: start client: %w", err)
			}
			return nil
		},
		stop: func(ctx context.Context) error {
			if err := client.Stop(ctx); err != nil {
				return fmt.Errorf("river: stop client: %w", err)
			}
			return nil
		},
		insert: func(ctx context.Context, a jobArgs) error {
			got, err := client.Insert(ctx, a, nil)
			if err != nil {
				return err
			}
			if ids != nil && !got.UniqueSkippedAsDuplicate {
				ids[a.Seq] = got.Job.ID
			}
			return nil
		},
		insertMany: func(ctx context.Context, lo, hi int64) error {
			params := make([]river.InsertManyParams, hi-lo)
			for i := range params {
				params[i].Args = jobArgs{Seq: lo + int64(i)}
			}
			n, err := client.InsertManyFast(ctx, params)
			if err != nil {
				return err
			}
			if n != len(params) {
				return fmt.Errorf("InsertManyFast inserted %d of %d jobs", n, len(params))
			}
			return nil
		},
		idProblems: func() []string { return idCheck(ids) },
	}
	return r.run(ctx, w)
}

// riverState reads River's job table of one run.
type riverState struct {
	pool  *pgxpool.Pool
	table string
}

func (s *riverState) finished(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+s.table+" WHERE state IN ('completed', 'cancelled', 'discarded')").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("river: count finished jobs: %w", err)
	}
	return n, nil
}

// counts returns the jobs per state, River's discarded named dead as
// sortie calls it.
func (s *riverState) counts(ctx context.Context) ([]store.QueueStateCount, error) {
	rows, err := s.pool.Query(ctx, "SELECT state::text, count(*) FROM "+s.table+" GROUP BY state")
	if err != nil {
		return nil, fmt.Errorf("river: count jobs: %w", err)
	}
	var counts []store.QueueStateCount
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("river: count jobs: %w", err)
		}
		if state == "discarded" {
			state = string(store.JobStateDead)
		}
		counts = append(counts, store.QueueStateCount{Queue: river.QueueDefault, State: store.JobState(state), Count: n})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("river: count jobs: %w", err)
	}
	return counts, nil
}
