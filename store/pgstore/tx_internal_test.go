package pgstore

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
)

// The store's own transactions plan with index scans and nested loops
// only, set in the same round trip as BEGIN, and the settings end with the
// transaction.
func TestStoreTransactionsPinPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, pgtest.URL(t), &Options{Schema: pgtest.Schema(t), Migrate: true, MaxConns: 1, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// jit is among them: a rescue's plan is costed over jit_above_cost
	// (it sorts, which the settings disable), and compiling it cost 50 ms
	// of a 0.4 ms statement.
	settings := []string{"enable_seqscan", "enable_bitmapscan", "enable_sort", "enable_hashjoin", "enable_mergejoin", "jit"}
	before := map[string]string{}
	for _, name := range settings {
		var v string
		if err := s.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		before[name] = v
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		for _, name := range settings {
			var v string
			if err := tx.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
				return err
			}
			if v != "off" {
				t.Errorf("in a store transaction %s = %s, want off", name, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// One connection: the next statement runs where the transaction ran.
	for _, name := range settings {
		var v string
		if err := s.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != before[name] {
			t.Errorf("after a store transaction %s = %s, want %s as before it (SET LOCAL)", name, v, before[name])
		}
	}
}

// The hot-path functions carry the same settings in their SET clauses,
// with generic plans, whichever schema version they were created by.
func TestFunctionsPinPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	s, err := Open(ctx, pgtest.URL(t), &Options{Schema: schema, Migrate: true, MaxConns: 1, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := []string{"plan_cache_mode=force_generic_plan"}
	for _, setting := range planSettings {
		want = append(want, strings.ReplaceAll(setting, " = ", "="))
	}
	for _, fn := range pinnedFunctions {
		var config []string
		err := s.pool.QueryRow(ctx, `SELECT coalesce(p.proconfig, '{}') FROM pg_catalog.pg_proc p
			JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
			WHERE n.nspname = $1 AND p.proname = $2`, schema, fn).Scan(&config)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		for _, w := range want {
			if !slices.Contains(config, w) {
				t.Errorf("%s runs with %v, missing %s", fn, config, w)
			}
		}
	}
}
