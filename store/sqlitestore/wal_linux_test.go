package sqlitestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store/sqlitestore"
)

// smallDisk mounts a tmpfs of size bytes on a new directory for the test
// and unmounts it at the end. It needs root: elsewhere the test skips, but
// under CI=true (where tests run as root) it fails instead.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	unable := t.Skipf
	if os.Getenv("CI") == "true" {
		unable = t.Fatalf
	}
	if os.Geteuid() != 0 {
		unable("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		unable("mount a %d-byte tmpfs on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			// Something still holds a file there: detach the mount anyway,
			// so that no test leaves one behind.
			t.Errorf("unmount %s: %v", dir, err)
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

// A store on a full disk fails writes with a clear error and works again
// once space is freed: the log is checkpointed and restarted, so the space
// comes back to the database instead of feeding the log's growth. Before,
// a store with less than 16 MiB free never checkpointed (that came every
// 4,000 pages of log), and after space was freed the log took it and the
// disk filled up again. With 2 MiB free, the log keeps to the room there
// is, and what fills the disk is the database's own growth.
func TestDiskFullRecovers(t *testing.T) {
	t.Parallel()
	dir := smallDisk(t, 32<<20)
	ballast := filepath.Join(dir, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 30<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	st := openAt(t, filepath.Join(dir, "sortie.db"), nil)
	wal := &walMax{path: st.Path()}
	load := &soakLoad{st: st, wal: wal, producers: 8, workers: 4, readers: 1, backlog: 500}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := load.run(ctx)
	if err == nil || !strings.Contains(err.Error(), "full") {
		t.Fatalf("filling a 32 MiB disk ended with %v, want a database-full error", err)
	}
	t.Logf("disk full after %d jobs finished: %v", load.finished.Load(), err)

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	more := int64(3000)
	if raceEnabled {
		more = 300
	}
	load.until = load.finished.Load() + more
	if err := load.run(ctx); err != nil {
		t.Fatalf("with 30 MiB free again, %d of %d more jobs finished before: %v",
			load.finished.Load()-(load.until-more), more, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("with 30 MiB free again, only %d of %d more jobs finished in 2 minutes",
			load.finished.Load()-(load.until-more), more)
	}
	t.Logf("%d more jobs finished; %d restarts; largest WAL %.1f MiB",
		more, sqlitestore.Restarts(st), float64(wal.max.Load())/(1<<20))
}
