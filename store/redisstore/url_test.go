package redisstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store/redisstore"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, url            string
		addr, prefix, errSub string
		db                   int
	}{
		{name: "plain", url: "redis://127.0.0.1:6379/2", addr: "127.0.0.1:6379", db: 2},
		{name: "prefix", url: "redis://h:1/0?prefix=app&dial_timeout=3s", addr: "h:1", prefix: "app"},
		{name: "tls", url: "rediss://:pw@h:6380", addr: "h:6380"},
		{name: "scheme", url: "postgres://h/db", errSub: `URL scheme "postgres"`},
		{name: "braces", url: "redis://h?prefix=a{b}", errSub: `prefix "a{b}" may not contain '{' or '}'`},
		{name: "database", url: "redis://h/x", errSub: "invalid database number"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts, prefix, err := redisstore.ParseURL(tt.url)
			if tt.errSub != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errSub) {
					t.Fatalf("ParseURL(%q) error = %v, want one containing %q", tt.url, err, tt.errSub)
				}
				return
			}
			if err != nil || opts.Addr != tt.addr || opts.DB != tt.db || prefix != tt.prefix {
				t.Fatalf("ParseURL(%q) = addr %q, db %d, prefix %q, %v; want %q, %d, %q", tt.url, opts.Addr, opts.DB, prefix, err, tt.addr, tt.db, tt.prefix)
			}
		})
	}
}

// Version reads the library that Open loaded, and loads nothing itself.
func TestVersion(t *testing.T) {
	t.Parallel()
	u := redistest.URL(t)
	st, err := redisstore.Open(context.Background(), u, &redisstore.Options{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	if v, err := redisstore.Version(context.Background(), u); err != nil || v != redisstore.LibraryVersion {
		t.Errorf("Version() = %d, %v; want %d", v, err, redisstore.LibraryVersion)
	}
}

// An Options.ClaimRows outside its constants is refused at Open, before
// any server is reached, with the choices named.
func TestOpenRefusesUnknownClaimRows(t *testing.T) {
	_, err := redisstore.Open(context.Background(), "redis://127.0.0.1:1/0", &redisstore.Options{ClaimRows: 7})
	if err == nil || !strings.Contains(err.Error(), "Options.ClaimRows is 7") || !strings.Contains(err.Error(), "ClaimRowsNever") {
		t.Fatalf("Open with ClaimRows 7 = %v, want an error naming the option and its choices", err)
	}
}
