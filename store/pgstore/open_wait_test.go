package pgstore_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// A worker started by a supervisor while the database restarts waits for
// it when told to (Options.WaitForServer), logging the wait once, instead
// of exiting; without the option Open fails at once, as before.
func TestOpenWaitsForRestartingServer(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t)
	ctx := context.Background()
	// Create the schema while the server is up.
	st, err := pgstore.Open(ctx, srv.URL, &pgstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()

	var wg sync.WaitGroup
	wg.Go(func() { srv.Restart(t, 3*time.Second, pgtest.Fast) })
	defer wg.Wait()
	for { // until the server is down
		conn, err := pgx.Connect(ctx, srv.URL)
		if err != nil {
			break
		}
		_ = conn.Close(ctx)
		time.Sleep(20 * time.Millisecond)
	}

	begin := time.Now()
	if _, err := pgstore.Open(ctx, srv.URL, nil); err == nil {
		t.Fatal("Open() without WaitForServer succeeded while the server was down")
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("Open() without WaitForServer took %s to fail, want at once", took)
	}

	logs := &testkit.LogBuffer{}
	st, err = pgstore.Open(ctx, srv.URL, &pgstore.Options{WaitForServer: time.Minute, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatalf("Open() with WaitForServer = %v, want it to wait for the restart", err)
	}
	defer st.Close()
	if _, err := st.QueueList(ctx, &store.QueueListParams{}); err != nil {
		t.Fatalf("QueueList() after the wait = %v", err)
	}
	out := logs.String()
	if strings.Count(out, "server unreachable, waiting for it") != 1 || strings.Count(out, "server reachable") != 1 {
		t.Errorf("logs = %q, want one line when the wait starts and one when it ends", out)
	}
}

// WaitForServer is a bound: a server that does not come back within it
// fails Open with an error saying how long it waited.
func TestOpenWaitForServerIsBounded(t *testing.T) {
	t.Parallel()
	// Nothing listens on this port of the loopback address.
	url := "postgres://postgres@127.0.0.1:1/sortie?sslmode=disable&connect_timeout=1"
	begin := time.Now()
	_, err := pgstore.Open(context.Background(), url, &pgstore.Options{WaitForServer: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, pgstore.ErrServerWait) || !strings.Contains(err.Error(), "gave up waiting for the server after 500ms") {
		t.Fatalf("Open() = %v, want it to give up after 500ms", err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("Open() took %s with WaitForServer 500ms", took)
	}
}

// silentServer listens on loopback, accepts connections and never answers,
// as a half-dead server or a wrong port behind a firewall that accepts. It
// returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
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

// Against a server that accepts and never answers, Open, Version and
// Migrate give up after the connect timeout, naming the server, instead of
// hanging: Options.ConnectTimeout when the URL sets none, else the URL's.
func TestOpenTimesOutOnSilentServer(t *testing.T) {
	t.Parallel()
	addr := silentServer(t)
	url := "postgres://postgres@" + addr + "/sortie?sslmode=disable"
	for _, tt := range []struct {
		name string
		url  string
		opts *pgstore.Options
	}{
		{"Options.ConnectTimeout", url, &pgstore.Options{ConnectTimeout: 200 * time.Millisecond}},
		{"connect_timeout in the URL", url + "&connect_timeout=1", &pgstore.Options{ConnectTimeout: time.Hour}},
	} {
		for name, open := range map[string]func() error{
			"Open":    func() error { _, err := pgstore.Open(t.Context(), tt.url, tt.opts); return err },
			"Version": func() error { _, err := pgstore.Version(t.Context(), tt.url, tt.opts); return err },
			"Migrate": func() error { _, err := pgstore.Migrate(t.Context(), tt.url, tt.opts); return err },
		} {
			begin := time.Now()
			err := open()
			if took := time.Since(begin); err == nil || took > 5*time.Second || !strings.Contains(err.Error(), addr) {
				t.Errorf("%s with %s against a silent server: %v after %s, want an error naming %s within seconds", name, tt.name, err, took, addr)
			}
		}
	}
}
