package sqlitestore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// filledFile makes a closed sortie database of about 1.5 MB: 3000 jobs with
// 400-byte args, and returns its path and size.
func filledFile(t *testing.T) (string, int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jobs.db")
	st, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	args := []byte(`{"pad":"` + strings.Repeat("x", 400) + `"}`)
	for range 3 {
		jobs := make([]*store.NewJob, 1000)
		for i := range jobs {
			jobs[i] = &store.NewJob{Kind: "k", Queue: "q", Args: args, Priority: 2, MaxAttempts: 3}
		}
		if _, err := st.JobEnqueueMany(context.Background(), &store.JobEnqueueManyParams{Jobs: jobs, Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, fi.Size()
}

// damage overwrites 4 pages (4 KiB each) of the file at path from byte off
// with garbage, as a bad disk block or a stray write does.
func damage(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := make([]byte, 4*4096)
	for i := range junk {
		junk[i] = byte(i*7 + 3)
	}
	if _, err := f.WriteAt(junk, off&^4095); err != nil {
		t.Fatal(err)
	}
}

// A file whose data pages are damaged is refused at Open, naming the file
// and what to do, with an error wrapping store.ErrCorrupt: not served as
// if the store were away.
func TestOpenRefusesCorruptFile(t *testing.T) {
	t.Parallel()
	path, size := filledFile(t)
	damage(t, path, size/2)
	_, err := sqlitestore.Open(path, nil)
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path+" is corrupt: ") || !strings.HasSuffix(err.Error(), "; restore it from a backup") {
		t.Fatalf("Open(damaged file) = %v, want an error wrapping store.ErrCorrupt: %q is corrupt: ...; restore it from a backup", err, path)
	}
}

// Damage met after Open (a larger file's pages the start-up check does not
// read, or a disk going bad) is reported as corruption by the call that
// meets it, on reads and writes.
func TestCorruptionFoundLater(t *testing.T) {
	t.Parallel()
	path, size := filledFile(t)
	st := openAt(t, path, nil)
	damage(t, path, size/2)
	ctx := context.Background()
	var err error
	for after := int64(0); err == nil; {
		var rows []*store.JobRow
		rows, err = st.JobList(ctx, &store.JobListParams{Queue: "q", AfterID: after, Limit: 1000})
		if err == nil && len(rows) == 0 {
			t.Fatal("listed every job of a damaged file without an error")
		}
		if len(rows) > 0 {
			after = rows[len(rows)-1].ID
		}
	}
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path+" is corrupt: ") {
		t.Fatalf("JobList over damaged pages = %v, want an error wrapping store.ErrCorrupt naming %s", err, path)
	}
}
