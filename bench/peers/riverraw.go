package peers

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
)

// RiverRaw runs raw PostgreSQL baselines on a plain table (id bigserial,
// seq, args jsonb), the floor under any queue on the same server:
//
//   - drain: Producers connections (default 8) each loop on
//     DELETE ... WHERE id IN (SELECT id ... FOR UPDATE SKIP LOCKED LIMIT
//     Workers) RETURNING seq, until the table is empty;
//   - enqueue-single: one-row INSERTs from Producers connections;
//   - enqueue-batch: COPY FROM with BatchSize rows per call, what River's
//     InsertManyFast sends.
//
// Latency has no raw form: there is no worker to wake.
type RiverRaw struct {
	pool   *pgxpool.Pool
	server string
}

var _ Peer = (*RiverRaw)(nil)

// OpenRiverRaw connects to the PostgreSQL database at url. Each run makes
// a new schema there and drops it after.
func OpenRiverRaw(ctx context.Context, url string) (*RiverRaw, error) {
	pool, err := pgPool(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("river-raw: connect: %w", err)
	}
	return &RiverRaw{pool: pool, server: serverVersion(ctx, pool)}, nil
}

// Name returns "river-raw".
func (p *RiverRaw) Name() string { return "river-raw" }

// Config returns "".
func (p *RiverRaw) Config() string { return "" }

// Version returns pgx's and the server's versions.
func (p *RiverRaw) Version() string {
	return fmt.Sprintf("pgx %s, PostgreSQL %s", moduleVersion("github.com/jackc/pgx/v5"), p.server)
}

// Settings describes the statements of w.
func (p *RiverRaw) Settings(w bench.Workload, o Options) string {
	o, _ = withDefaults(o, w)
	switch w {
	case bench.Drain:
		return fmt.Sprintf("DELETE ... FOR UPDATE SKIP LOCKED LIMIT %d RETURNING seq, %d connections", o.Workers, o.Producers)
	case bench.EnqueueSingle:
		return fmt.Sprintf("one-row INSERT, %d connections", o.Producers)
	case bench.EnqueueBatch:
		return fmt.Sprintf("COPY FROM %d rows per call, %d connections", o.BatchSize, o.Producers)
	}
	return "-"
}

// Close closes the pool.
func (p *RiverRaw) Close() error {
	p.pool.Close()
	return nil
}

// Run runs w once on a new table.
func (p *RiverRaw) Run(ctx context.Context, w bench.Workload, opts Options) (res bench.Result, err error) {
	if w != bench.Drain && w != bench.EnqueueSingle && w != bench.EnqueueBatch {
		return res, fmt.Errorf("river-raw: workload %s has no raw form", w)
	}
	o, err := withDefaults(opts, w)
	if err != nil {
		return res, err
	}
	schema := randomName("peerbench_raw_")
	table := pgx.Identifier{schema, "jobs"}.Sanitize()
	if _, err := p.pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+table+
		" (id bigserial PRIMARY KEY, seq bigint NOT NULL, args jsonb NOT NULL)"); err != nil {
		return res, fmt.Errorf("river-raw: create table: %w", err)
	}
	defer func() {
		if derr := dropSchema(ctx, p.pool, schema); derr != nil && err == nil {
			err = fmt.Errorf("river-raw: drop schema: %w", derr)
		}
	}()
	r := &rawRun{pool: p.pool, table: table, rec: bench.NewRecorder(o.Jobs, false)}
	copyRows := func(ctx context.Context, lo, hi int64) error {
		rows := make([][]any, 0, hi-lo)
		for seq := lo; seq < hi; seq++ {
			rows = append(rows, []any{seq, rawArgs(seq)})
		}
		n, err := p.pool.CopyFrom(ctx, pgx.Identifier{schema, "jobs"}, []string{"seq", "args"}, pgx.CopyFromRows(rows))
		if err == nil && n != hi-lo {
			err = fmt.Errorf("COPY wrote %d of %d rows", n, hi-lo)
		}
		return err
	}

	n := o.Jobs
	switch w {
	case bench.EnqueueSingle, bench.EnqueueBatch:
		insert := "INSERT INTO " + table + " (seq, args) VALUES ($1, $2)"
		res, err = timeEnqueues(ctx, w, o, func(ctx context.Context, seq int64) error {
			_, err := p.pool.Exec(ctx, insert, seq, rawArgs(seq))
			return err
		}, copyRows)
		if err != nil {
			return res, fmt.Errorf("river-raw: %w", err)
		}
	case bench.Drain:
		if err := bench.Preload(ctx, n, copyRows); err != nil {
			return res, fmt.Errorf("river-raw: %w", err)
		}
	}
	counts, err := r.counts(ctx)
	if err != nil {
		return res, err
	}
	problems := availableCheck(counts, n)
	// Drain is timed; after an enqueue workload the same loop empties the
	// table untimed, so that the check covers every row.
	runtime.GC()
	took, err := r.drain(ctx, o.Producers, o.Workers)
	if err != nil {
		return res, err
	}
	if w == bench.Drain {
		res.SetThroughput(n, took)
		res.Workers, res.Producers = o.Workers, o.Producers
	}
	counts, err = r.counts(ctx)
	if err != nil {
		return res, err
	}
	return res, bench.Check(r.rec.Tally(counts, problems))
}

func rawArgs(seq int64) []byte { return []byte(`{"s":` + strconv.FormatInt(seq, 10) + `}`) }

// rawRun is one run of river-raw.
type rawRun struct {
	pool    *pgxpool.Pool
	table   string
	rec     *bench.Recorder
	deleted atomic.Int64
}

// drain runs loops delete loops of limit rows per statement until the
// table is empty, records each deleted seq, and returns how long it took.
func (r *rawRun) drain(ctx context.Context, loops, limit int) (time.Duration, error) {
	del := "DELETE FROM " + r.table + " WHERE id IN (SELECT id FROM " + r.table +
		" ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING seq"
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range loops {
		g.Go(func() error {
			for gctx.Err() == nil {
				rows, err := r.pool.Query(gctx, del, limit)
				if err != nil {
					return fmt.Errorf("river-raw: delete: %w", err)
				}
				got := 0
				var seq int64
				_, err = pgx.ForEachRow(rows, []any{&seq}, func() error {
					got++
					r.rec.Record(seq, 0)
					return nil
				})
				if err != nil {
					return fmt.Errorf("river-raw: delete: %w", err)
				}
				r.deleted.Add(int64(got))
				if got == 0 {
					return nil
				}
			}
			return nil
		})
	}
	err := g.Wait()
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	return took, ctx.Err()
}

// counts counts the rows left as available and the deleted ones as
// completed.
func (r *rawRun) counts(ctx context.Context) ([]store.QueueStateCount, error) {
	var left int64
	if err := r.pool.QueryRow(ctx, "SELECT count(*) FROM "+r.table).Scan(&left); err != nil {
		return nil, fmt.Errorf("river-raw: count rows: %w", err)
	}
	return []store.QueueStateCount{
		{Queue: "raw", State: store.JobStateAvailable, Count: left},
		{Queue: "raw", State: store.JobStateCompleted, Count: r.deleted.Load()},
	}, nil
}
