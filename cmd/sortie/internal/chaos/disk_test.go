package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// diskSize returns the size of the small disk a store is put on to fill
// it: small, so it fills in a moment.
func diskSize() int64 { return pick[int64](16<<20, 64<<20) }

// mountTmpfs mounts a tmpfs of size bytes for t, unmounted (by its path)
// when t ends. Mounting needs root: without it t skips, except under
// CI=true, where it fails.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		msg := "mounting the small tmpfs the disk-full faults need takes root"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + ", and CI=true: run the suite as root")
		}
		t.Skip("SKIPPED: " + msg)
	}
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0755", size), "sortie-chaos", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s: %v: %s", size, dir, err, out)
	}
	t.Cleanup(func() {
		out, err := exec.Command("umount", dir).CombinedOutput()
		if err == nil {
			return
		}
		// Something still holds a file there: say what, and detach the
		// mount anyway, so none is left behind.
		t.Errorf("umount %s: %v: %s; files this process holds open there: %v", dir, err, out, openFiles(dir))
		if out, err := exec.Command("umount", "--lazy", dir).CombinedOutput(); err != nil {
			t.Errorf("umount --lazy %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// openFiles returns the files under dir this process has open.
func openFiles(dir string) []string {
	var out []string
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if name, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(name, dir+"/") {
			out = append(out, name)
		}
	}
	return out
}

// newSmallDiskSQLite makes a SQLite store on a small tmpfs of its own, with
// the outage that fills it.
func newSmallDiskSQLite(t *testing.T) *target {
	dir := mountTmpfs(t, diskSize())
	tg := newSQLiteStoreAt(t, filepath.Join(dir, "sortie.db"))
	tg.outage = &diskOutage{dir: dir, st: tg.st}
	return tg
}

// ballastQueue holds the jobs that fill a disk; no worker takes them.
const ballastQueue = "ballast"

// Ballast is the job that fills a disk: its args are big.
type Ballast struct {
	Pad string `json:"pad"`
}

// Kind implements sortie.JobArgs.
func (Ballast) Kind() string { return "chaos.ballast" }

// diskOutage fills the disk of a store (fill) as another program sharing
// it would with the store in use: a file takes half the free space, then
// jobs with big args go in until the store refuses one for want of room.
// Freeing the space (free) removes the file: whatever the store wrote into
// its half (its database and its write-ahead log) can then be copied where
// it belongs.
//
// As an outage (begin, end), it also holds a read transaction open from
// the start, so that the store's write-ahead log cannot be restarted and
// every write needs room, and takes whatever room is left once the store
// refused a job: the store then records nothing until end.
type diskOutage struct {
	dir string
	st  store.Store

	// ballast is how many ballast jobs the store acknowledged.
	ballast int
	// err is the error that refused the last ballast job.
	err error
	// reader holds the read transaction of an outage.
	reader *sql.DB
}

func (d *diskOutage) fill(t *testing.T) {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(d.dir, &fs); err != nil {
		t.Fatal(err)
	}
	fillFile(t, filepath.Join(d.dir, "filler"), int64(fs.Bavail)*fs.Bsize/2)
	c, err := sortie.NewClient(d.st, &sortie.Config{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 32<<10)
	for d.err == nil {
		if d.ballast > int(diskSize()/(32<<10)) {
			t.Fatalf("the store took %d jobs of 32 KiB on a %d-byte disk, want an error once it is full", d.ballast, diskSize())
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, d.err = c.Enqueue(ctx, Ballast{Pad: pad}, &sortie.EnqueueOpts{Queue: ballastQueue})
		cancel()
		if d.err == nil {
			d.ballast++
		}
	}
}

func (d *diskOutage) free(t *testing.T) {
	t.Helper()
	fillers, err := filepath.Glob(filepath.Join(d.dir, "filler*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range fillers {
		if err := os.Remove(name); err != nil {
			t.Fatalf("free the disk: %v", err)
		}
	}
}

func (d *diskOutage) begin(t *testing.T) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(d.dir, "sortie.db"))
	if err != nil {
		t.Fatal(err)
	}
	d.reader = db
	t.Cleanup(func() { d.unpin() })
	db.SetMaxOpenConns(1)
	// A read of the snapshot, in a transaction left open until end.
	if _, err := db.Exec(`BEGIN`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	d.fill(t)
	// A write that failed for want of room may leave room in the store's
	// files that a smaller one then uses: take what is left until a write
	// fails right after.
	for try := 0; ; try++ {
		fillFile(t, filepath.Join(d.dir, fmt.Sprintf("filler-rest%d", try)), 1<<62)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := probeWrite(ctx, d.st)
		cancel()
		if err != nil {
			return
		}
		if try == 100 {
			t.Fatal("the store keeps taking writes on a full disk with its log pinned by a reader")
		}
	}
}

func (d *diskOutage) end(t *testing.T) {
	t.Helper()
	d.unpin()
	d.free(t)
}

// unpin ends the read transaction of an outage.
func (d *diskOutage) unpin() {
	if d.reader != nil {
		_ = d.reader.Close()
		d.reader = nil
	}
}

func (*diskOutage) kind() faultKind { return faultDisk }

// fillFile writes size bytes to path, or fewer if the disk fills first.
func fillFile(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for done := int64(0); done < size; done += int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), size-done)]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatalf("fill %s: %v", path, err)
		}
	}
}

// checkSQLite runs SQLite's integrity check on the database at path, which
// no store has open.
func checkSQLite(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var res string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&res); err != nil {
		t.Fatalf("integrity check of %s: %v", path, err)
	}
	if res != "ok" {
		t.Errorf("integrity check of %s: %s, want ok", path, res)
	}
}
