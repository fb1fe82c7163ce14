package pgstore

import (
	"context"
	"strings"
	"testing"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
)

// The finish_jobs function a new schema gets applies transition.Rules:
// its SET clauses are the ones finishSet generates from the table, and
// the history outcomes it counts the ones finishOutcomes generates from
// the table and transition.OutcomeOf, so the SQL and the Go rules cannot drift
// apart.
func TestFinishSQLFollowsTransitions(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	s, err := Open(context.Background(), pgtest.URL(t), &Options{Schema: schema, Migrate: true, MaxConns: 1, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defs := pgtest.Strings(t, `SELECT pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname = 'finish_jobs'`, schema)
	if len(defs) != 1 {
		t.Fatalf("found %d finish_jobs functions in schema %s, want 1", len(defs), schema)
	}
	for _, line := range append(strings.Split(finishSet(), "\n"), finishOutcomes()) {
		if !strings.Contains(defs[0], strings.TrimSpace(line)) {
			t.Errorf("finish_jobs does not contain the generated clause %q", strings.TrimSpace(line))
		}
	}
}
