package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
)

// history_minute is store.HistoryMinute in SQL: the same minute whatever
// the session's time zone, half-hour offsets included.
func TestHistoryMinuteSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	s, err := Open(ctx, pgtest.URL(t), &Options{Schema: schema, Migrate: true, MaxConns: 1, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	times := []time.Time{
		time.Date(2026, 1, 2, 3, 4, 5, 999_999_000, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 1000, time.UTC),
	}
	for _, zone := range []string{"UTC", "Asia/Kolkata", "America/St_Johns", "Pacific/Chatham"} {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('TimeZone', $1, true)`, zone); err != nil {
				return err
			}
			for _, at := range times {
				var got time.Time
				if err := tx.QueryRow(ctx, s.q.get(`SELECT {s}.history_minute($1)`), at).Scan(&got); err != nil {
					return err
				}
				if want := store.HistoryMinute(at); !got.Equal(want) {
					t.Errorf("history_minute(%v) in time zone %s = %v, want %v", at, zone, got, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("time zone %s: %v", zone, err)
		}
	}
}

// The latency statement reads the heads of jobs_fetch and jobs_due, never
// the jobs table itself, however many jobs are available.
func TestLatencyReadsIndexHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	s, err := Open(ctx, pgtest.URL(t), &Options{Schema: schema, Migrate: true, MaxConns: 2, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for b := range 10 {
		jobs := make([]*store.NewJob, 2000)
		for i := range jobs {
			jobs[i] = &store.NewJob{Kind: "k", Queue: "q", Args: []byte(`{}`), Priority: 1 + i%4,
				RunAt: now.Add(-time.Duration(b*2000+i) * time.Second)}
		}
		if _, err := s.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, s.q.get(`ANALYZE {s}.jobs`)); err != nil {
		t.Fatal(err)
	}
	rows, err := s.pool.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) `+s.q.get(sqlLatency), "q")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if strings.Contains(plan, "Seq Scan on jobs") || strings.Count(plan, "jobs_fetch") != 4 || !strings.Contains(plan, "jobs_due") {
		t.Errorf("latency plan does not read the heads of jobs_fetch (once per priority) and jobs_due:\n%s", plan)
	}
	got, err := s.QueueLatency(ctx, &store.QueueLatencyParams{Now: now})
	if want := now.Add(-19999 * time.Second); err != nil || len(got) != 1 || !got[0].OldestRunAt.Equal(want) {
		t.Errorf("QueueLatency() = %+v, %v; want q's oldest at %v", got, err, want)
	}
}
