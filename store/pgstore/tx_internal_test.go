package pgstore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/internal/pgtest"
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
	settings := []string{"enable_seqscan", "enable_bitmapscan", "enable_sort", "enable_hashjoin", "enable_mergejoin"}
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
		if v != "on" {
			t.Errorf("after a store transaction %s = %s, want on (SET LOCAL)", name, v)
		}
	}
}
