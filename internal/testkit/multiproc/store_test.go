package multiproc

import (
	"path/filepath"
	"testing"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
)

func TestOpenStoreSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sortie.db")
	st, closeStore, err := openStore(t.Context(), path)
	if err != nil {
		t.Fatalf("openStore(%q): %v", path, err)
	}
	defer func() {
		if err := closeStore(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	if _, err := st.JobCounts(t.Context(), &store.JobCountsParams{}); err != nil {
		t.Fatalf("JobCounts on the opened store: %v", err)
	}
}

func TestOpenStoreUnknown(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "memory", "mysql://localhost/sortie", "sortie.sqlite"} {
		if _, _, err := openStore(t.Context(), u); err == nil {
			t.Errorf("openStore(%q) succeeded, want an error", u)
		}
	}
}

func TestSchemaRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		url  string
	}{
		{"bare", "postgres://localhost/sortie"},
		{"with password and options", "postgres://u:p%40ss@localhost:5432/sortie?sslmode=disable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, err := pgtest.WithSchema(tt.url, "sortie_test_abc")
			if err != nil {
				t.Fatal(err)
			}
			dsn, schema, err := pgtest.SplitSchema(u)
			if err != nil {
				t.Fatalf("pgtest.SplitSchema(%q): %v", u, err)
			}
			if dsn != tt.url || schema != "sortie_test_abc" {
				t.Errorf("pgtest.SplitSchema(%q) = %q, %q; want %q, %q", u, dsn, schema, tt.url, "sortie_test_abc")
			}
		})
	}
}
