package pgstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// A prune plans with the store's pinned settings, so jobs_prune answers it
// however the statistics look: a statement trigger of the test's own
// records the settings each DELETE of jobs ran with. (Left to a generic
// plan, a prune with nothing to delete was seen scanning all 200,000
// finished jobs of TestBigTable in CI.)
func TestPruneRunsWithPinnedPlans(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	st := openStore(t, pgtest.URL(t), &pgstore.Options{Schema: schema, Migrate: true, DisableListen: true})
	pgtest.Exec(t, `CREATE TABLE `+schema+`.seen (seqscan text, sort text)`)
	pgtest.Exec(t, `CREATE FUNCTION `+schema+`.note() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO `+schema+`.seen VALUES (current_setting('enable_seqscan'), current_setting('enable_sort')); RETURN NULL; END $$`)
	pgtest.Exec(t, `CREATE TRIGGER note BEFORE DELETE ON `+schema+`.jobs FOR EACH STATEMENT EXECUTE FUNCTION `+schema+`.note()`)

	old := time.Now().Add(-time.Hour)
	n, err := st.JobPrune(context.Background(), &store.JobPruneParams{CompletedBefore: old, CancelledBefore: old, DeadBefore: old, Limit: 100})
	if err != nil || n != 0 {
		t.Fatalf("JobPrune() = %d, %v; want 0, nil", n, err)
	}
	seen := pgtest.Strings(t, `SELECT seqscan || '/' || sort FROM `+schema+`.seen`)
	if len(seen) != 3 || slices.ContainsFunc(seen, func(s string) bool { return s != "off/off" }) {
		t.Errorf("the prune's three DELETEs ran with enable_seqscan/enable_sort %q, want off/off each", seen)
	}
}
