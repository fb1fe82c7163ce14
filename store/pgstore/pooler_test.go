package pgstore_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/pgstore"
)

// strictPooler stands in front of a PostgreSQL server the way PgBouncer
// does for startup parameters: a connection whose startup message carries
// a parameter it does not track is refused with 08P01; any other is passed
// through to the server.
type strictPooler struct {
	ln       net.Listener
	upstream string
	refused  atomic.Int64
	passed   atomic.Int64
	wg       sync.WaitGroup
}

// tracked are the startup parameters PgBouncer accepts by default.
var tracked = map[string]bool{"user": true, "database": true, "client_encoding": true, "datestyle": true,
	"timezone": true, "standard_conforming_strings": true, "application_name": true}

// newStrictPooler starts a pooler in front of the server of the URL
// upstream, stopped when t ends.
func newStrictPooler(t *testing.T, upstream string) *strictPooler {
	t.Helper()
	pu, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &strictPooler{ln: ln, upstream: pu.Host}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.serve(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *strictPooler) serve(c net.Conn) {
	defer c.Close()
	be := pgproto3.NewBackend(c, c)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	sm, ok := msg.(*pgproto3.StartupMessage)
	if !ok {
		return
	}
	for name := range sm.Parameters {
		if !tracked[strings.ToLower(name)] {
			p.refused.Add(1)
			be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "08P01", Message: "unsupported startup parameter: " + name})
			_ = be.Flush()
			return
		}
	}
	p.passed.Add(1)
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer up.Close()
	buf, err := sm.Encode(nil)
	if err != nil {
		return
	}
	if _, err := up.Write(buf); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// url returns u with its host replaced by the pooler's address and with
// the query parameters of set ("key=value") added.
func (p *strictPooler) url(t *testing.T, u string, set ...string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	pu.Host = p.ln.Addr().String()
	q := pu.Query()
	for _, kv := range set {
		k, v, _ := strings.Cut(kv, "=")
		q.Set(k, v)
	}
	pu.RawQuery = q.Encode()
	return pu.String()
}

// Behind a pooler that refuses startup parameters it does not track (as
// PgBouncer does), Open connects without plan_cache_mode, says once how to
// set it for the role instead, and the store works. With pgx's exec mode,
// which docs/stores.md asks for behind PgBouncer before 1.21, nothing is
// refused: there are no per-connection plans to keep, so the parameter is
// not sent.
func TestOpenBehindStrictPooler(t *testing.T) {
	t.Parallel()
	base := pgtest.URL(t)
	p := newStrictPooler(t, base)
	ctx := context.Background()

	work := func(t *testing.T, st *pgstore.Store) {
		t.Helper()
		now := time.Now()
		if _, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Jobs: []*store.NewJob{{Kind: "k", Queue: "q", Priority: 2, MaxAttempts: 3}}, Now: now}); err != nil {
			t.Fatal(err)
		}
		jobs, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: "q", Limit: 10, Worker: "w", Now: now, Lease: time.Minute}))
		if err != nil || len(jobs) != 1 {
			t.Fatalf("JobFetch through the pooler = %d jobs, %v; want 1", len(jobs), err)
		}
		res, err := st.JobFinish(ctx, &store.JobFinishParams{Reports: []*store.Report{{ID: jobs[0].ID, ClaimToken: jobs[0].ClaimToken, Kind: store.ReportCompleted}}, Now: now})
		if err != nil || !res[0].Applied {
			t.Fatalf("JobFinish through the pooler = %+v, %v; want applied", res, err)
		}
	}

	t.Run("default mode", func(t *testing.T) {
		var logs testkit.LogBuffer
		st, err := pgstore.Open(ctx, p.url(t, base), &pgstore.Options{Schema: pgtest.Schema(t), Migrate: true, DisableListen: true,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("Open behind a strict pooler: %v", err)
		}
		defer st.Close()
		if p.refused.Load() == 0 {
			t.Fatal("the pooler refused no connection: Open did not send plan_cache_mode, so this test tests nothing")
		}
		if got := logs.String(); !strings.Contains(got, "plan_cache_mode") || !strings.Contains(got, "ALTER ROLE") {
			t.Errorf("log = %q, want a warning naming plan_cache_mode and ALTER ROLE", got)
		}
		work(t, st)
	})

	t.Run("exec mode", func(t *testing.T) {
		before := p.refused.Load()
		u := p.url(t, base, "default_query_exec_mode=exec")
		st, err := pgstore.Open(ctx, u, &pgstore.Options{Schema: pgtest.Schema(t), Migrate: true, DisableListen: true})
		if err != nil {
			t.Fatalf("Open behind a strict pooler in exec mode: %v", err)
		}
		defer st.Close()
		if n := p.refused.Load() - before; n != 0 {
			t.Errorf("the pooler refused %d connections in exec mode, want none", n)
		}
		work(t, st)
	})
}

// A refusal of some other parameter is not mistaken for plan_cache_mode's:
// Open fails, naming it.
func TestOpenBehindStrictPoolerOtherParameter(t *testing.T) {
	t.Parallel()
	base := pgtest.URL(t)
	p := newStrictPooler(t, base)
	u := p.url(t, base, "search_path=public")
	_, err := pgstore.Open(context.Background(), u, &pgstore.Options{Schema: pgtest.Schema(t), Migrate: true, DisableListen: true})
	if err == nil || !strings.Contains(err.Error(), "unsupported startup parameter") {
		t.Fatalf("Open with a refused search_path = %v, want the pooler's error", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open timed out: %v", err)
	}
}
