// Package pgtest gives tests a PostgreSQL server to use: the throwaway one
// that `make test` starts (scripts/testpg.sh) and names in
// SORTIE_TEST_POSTGRES_URL. Without it, tests skip with a loud message,
// except under CI=true, where a missing server fails the run: CI must never
// pass by skipping the PostgreSQL suite. A test that stops or restarts its
// server starts one of its own with StartServer.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL is the environment variable naming the test server.
const EnvURL = "SORTIE_TEST_POSTGRES_URL"

// URL returns the test server's URL. When EnvURL is unset it skips t, or
// under CI=true fails it.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u != "" {
		return u
	}
	msg := "\n" +
		"################################################################\n" +
		"  PostgreSQL tests NOT RUN: " + EnvURL + " is not set.\n" +
		"  Run them with `make test` (it starts a throwaway server), or\n" +
		"  eval \"$(scripts/testpg.sh start)\" and run go test again.\n" +
		"################################################################"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Schema creates an empty schema with a random name on the test server,
// drops it (with everything in it) when t ends, and returns its name. Tests
// that each use their own schema run in parallel on one server.
func Schema(t testing.TB) string {
	t.Helper()
	u := URL(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "sortie_test_" + hex.EncodeToString(b[:])
	exec(t, u, "CREATE SCHEMA "+name)
	t.Cleanup(func() {
		if os.Getenv("SORTIE_TEST_KEEP_SCHEMA") != "" {
			t.Logf("keeping schema %s", name)
			return
		}
		exec(t, u, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	})
	return name
}

// Exec runs one SQL statement on the test server, failing t on error.
func Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	exec(t, URL(t), sql, args...)
}

// Strings runs one query of one text column on the test server and
// returns its rows, failing t on error.
func Strings(t testing.TB, sql string, args ...any) []string {
	t.Helper()
	var out []string
	withConn(t, URL(t), func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}, sql)
	return out
}

func exec(t testing.TB, url, sql string, args ...any) {
	t.Helper()
	withConn(t, url, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, sql, args...)
		return err
	}, sql)
}

// withConn runs fn on a new connection to url, failing t with sql named
// when it returns an error.
func withConn(t testing.TB, url string, fn func(ctx context.Context, conn *pgx.Conn) error, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", EnvURL, err)
	}
	defer conn.Close(ctx)
	if err := fn(ctx, conn); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}
