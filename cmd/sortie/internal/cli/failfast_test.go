package cli

import (
	"bytes"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// silentServer listens on loopback, accepts connections and never answers
// (a half-dead server, a wrong port behind something that accepts). It
// returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// A PostgreSQL server that accepts and never answers makes a command fail
// after the default connect timeout (10 s), naming the server, instead of
// hanging; connect_timeout in the URL overrides it.
func TestPostgresConnectTimeout(t *testing.T) {
	t.Parallel()
	addr := silentServer(t)
	for _, tt := range []struct {
		name, url string
		within    time.Duration
	}{
		{"default", "postgres://postgres@" + addr + "/sortie?sslmode=disable", 15 * time.Second},
		{"connect_timeout=1", "postgres://postgres@" + addr + "/sortie?sslmode=disable&connect_timeout=1", 5 * time.Second},
	} {
		for _, args := range [][]string{{"queues", "--store", tt.url}, {"serve", "--store", tt.url, "--addr", "127.0.0.1:0"}} {
			t.Run(tt.name+"/"+args[0], func(t *testing.T) {
				t.Parallel()
				type result struct {
					code   int
					stderr string
				}
				done := make(chan result, 1)
				begin := time.Now()
				go func() {
					code, _, stderr := run(t, args...)
					done <- result{code, stderr}
				}()
				select {
				case r := <-done:
					want := "cannot reach the PostgreSQL server at " + addr + ": timed out connecting"
					if r.code != exitError || !strings.Contains(r.stderr, want) {
						t.Errorf("sortie %s against a silent server: exit status %d after %s, stderr %q; want 1 and %q", args[0], r.code, time.Since(begin), r.stderr, want)
					}
				case <-time.After(tt.within):
					t.Fatalf("sortie %s against a silent server still runs after %s", args[0], tt.within)
				}
			})
		}
	}
}

// A directory given as the SQLite file is named as such, by every command
// that opens a store.
func TestSQLiteDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "jobs.db")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	want := dir + " is a directory, not a database file: give a file path such as " + filepath.Join(dir, "sortie.db")
	for _, args := range [][]string{{"queues"}, {"migrate"}, {"serve", "--addr", "127.0.0.1:0"}} {
		code, _, stderr := run(t, append(args, "--store", dir)...)
		if code != exitError || !strings.Contains(stderr, want) {
			t.Errorf("sortie %s --store DIR: exit status %d, stderr %q; want 1 and %q", args[0], code, stderr, want)
		}
	}
	if _, err := sqlitestore.Open(dir, nil); err == nil || !strings.Contains(err.Error(), "is a directory, not a database file") {
		t.Errorf("sqlitestore.Open(DIR) = %v, want an error naming the directory", err)
	}
}

// serve binds its address before it opens the store: a busy port fails
// with the flag and address named, and leaves no new database behind.
func TestServeBusyPortCreatesNoFile(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	db := filepath.Join(t.TempDir(), "new.db")
	for _, tt := range []struct{ flag, want string }{
		{"--addr", "sortie serve: --addr " + busy.Addr().String() + ": bind: address already in use"},
		{"--metrics-addr", "sortie serve: --metrics-addr " + busy.Addr().String() + ": bind: address already in use"},
	} {
		args := []string{"serve", "--store", db, "--addr", "127.0.0.1:0"}
		if tt.flag == "--addr" {
			args[len(args)-1] = busy.Addr().String()
		} else {
			args = append(args, tt.flag, busy.Addr().String())
		}
		code, _, stderr := run(t, args...)
		if code != exitError || !strings.Contains(stderr, tt.want) {
			t.Errorf("serve with %s busy: exit status %d, stderr %q; want 1 and %q", tt.flag, code, stderr, tt.want)
		}
		if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("serve with %s busy left %s behind (stat: %v)", tt.flag, db, err)
		}
	}
}

// serve refuses a SQLite file whose pages are damaged, at start, with one
// line naming the file and what to do, instead of serving 503s and logging
// an outage.
func TestServeRefusesCorruptFile(t *testing.T) {
	t.Parallel()
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
		if _, err := st.JobEnqueueMany(t.Context(), &store.JobEnqueueManyParams{Jobs: jobs, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xA5}, 4*4096), fi.Size()/2&^4095); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	for _, args := range [][]string{{"serve", "--addr", "127.0.0.1:0"}, {"queues"}} {
		code, _, stderr := run(t, append(args, "--store", path)...)
		if code != exitError || !strings.Contains(stderr, path+" is corrupt: ") || !strings.Contains(stderr, "; restore it from a backup") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("sortie %s on a damaged file: exit status %d, stderr %q; want 1 and one line saying the file is corrupt", args[0], code, stderr)
		}
	}
}
