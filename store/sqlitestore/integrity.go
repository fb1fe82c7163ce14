package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"
)

// Open refuses a database file whose structure is damaged, and does it
// cheaply at any size. PRAGMA quick_check reads every page: 45 s for a
// 2 GB file of 10 million finished jobs here (modernc's SQLite), far too
// long for every start. So:
//
//   - a file of at most quickCheckMaxBytes gets the whole quick_check
//     (0.2 s for a file of 31 MiB, 155,000 jobs, here), bounded by
//     quickCheckTimeout on a slow disk;
//   - every file gets a probe of each table's first and last rows, which
//     reads the header, the schema and each table's path from its root
//     page to its first and last leaves: a few pages a table (Open of the
//     2 GB file takes 10 to 90 ms in all).
//
// Damage the probe does not reach in a larger file is found when a read
// or write meets it, and reported as corruption (store.ErrCorrupt), not as
// an outage.
const (
	quickCheckMaxBytes = 32 << 20
	quickCheckTimeout  = 2 * time.Second
)

// checkIntegrity returns a *corruptError when conn's database is damaged
// where the checks above look.
func checkIntegrity(ctx context.Context, conn *sql.Conn, path string) error {
	var pages, pageSize int64
	if err := conn.QueryRowContext(ctx, `SELECT page_count, page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&pages, &pageSize); err != nil {
		return wrapRunErr(path, err)
	}
	if pages*pageSize <= quickCheckMaxBytes {
		qctx, cancel := context.WithTimeout(ctx, quickCheckTimeout)
		defer cancel()
		problems, err := quickCheck(qctx, conn)
		switch {
		case err == nil && len(problems) > 0:
			return &corruptError{path: path, err: errors.New(strings.Join(problems, "; "))}
		case err != nil && qctx.Err() == nil:
			return wrapRunErr(path, err)
		}
		// A check cut short by its time bound leaves it to the probe.
	}
	return probeTables(ctx, conn, path)
}

// quickCheck runs PRAGMA quick_check on conn and returns the first
// problems it reports, none for a sound file.
func quickCheck(ctx context.Context, conn *sql.Conn) ([]string, error) {
	rows, err := conn.QueryContext(ctx, `PRAGMA quick_check(3)`) // at most 3 problems
	if err != nil {
		return nil, err
	}
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			rows.Close()
			return nil, err
		}
		if line == "ok" {
			continue
		}
		// The first problem comes after a line naming the database.
		if head, rest, ok := strings.Cut(line, "\n"); ok && strings.HasPrefix(head, "*** ") {
			line = rest
		}
		problems = append(problems, strings.Split(line, "\n")...)
	}
	return problems[:min(len(problems), 3)], errors.Join(rows.Close(), rows.Err())
}

// probeTables reads the first and last rows of every table of conn.
func probeTables(ctx context.Context, conn *sql.Conn, path string) error {
	rows, err := conn.QueryContext(ctx, `SELECT name, sql LIKE '%WITHOUT ROWID%' FROM sqlite_schema WHERE type = 'table'`)
	if err != nil {
		return wrapRunErr(path, err)
	}
	type table struct {
		name  string
		rowid bool
	}
	var tables []table
	for rows.Next() {
		var t table
		var withoutRowid bool
		if err := rows.Scan(&t.name, &withoutRowid); err != nil {
			rows.Close()
			return wrapRunErr(path, err)
		}
		t.rowid = !withoutRowid
		tables = append(tables, t)
	}
	if err := errors.Join(rows.Close(), rows.Err()); err != nil {
		return wrapRunErr(path, err)
	}
	for _, t := range tables {
		name := `"` + strings.ReplaceAll(t.name, `"`, `""`) + `"`
		probes := []string{`SELECT count(*) FROM (SELECT 1 FROM ` + name + ` LIMIT 1)`}
		if t.rowid {
			probes = append(probes, `SELECT count(*) FROM (SELECT 1 FROM `+name+` ORDER BY rowid DESC LIMIT 1)`)
		}
		for _, q := range probes {
			var n int
			if err := conn.QueryRowContext(ctx, q).Scan(&n); err != nil {
				if c := sqliteCode(err); c == sqlite3.SQLITE_CORRUPT || c == sqlite3.SQLITE_NOTADB {
					return &corruptError{path: path, err: fmt.Errorf("table %s: %w", t.name, err)}
				}
				return wrapRunErr(path, err)
			}
		}
	}
	return nil
}
