package redistest

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestDeletePrefixEscapesGlob deletes prefixes holding each of Redis's glob
// characters: each must delete its own keys, and not a key that the prefix
// would match as a pattern, nor the other prefixes' keys.
func TestDeletePrefixEscapesGlob(t *testing.T) {
	t.Parallel()
	base := Prefix(t) // deletes what is left, when the test ends
	opts, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()

	// Unescaped, each of these prefixes followed by * would match decoy.
	prefixes := []string{base + "*", base + "?", base + "[x]", base + `\x`, base + "[^y]"}
	decoy := base + "x:1"
	keys := []string{decoy}
	for _, p := range prefixes {
		keys = append(keys, p, p+":{q:mail}:job:1")
	}
	for _, k := range keys {
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	gone := map[string]bool{}
	for _, p := range prefixes {
		if err := deletePrefix(ctx, c, p); err != nil {
			t.Fatalf("deletePrefix(%q): %v", p, err)
		}
		gone[p], gone[p+":{q:mail}:job:1"] = true, true
		for _, k := range keys {
			n, err := c.Exists(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := !gone[k]; (n == 1) != want {
				t.Errorf("after deletePrefix(%q), key %q exists: %v, want %v", p, k, n == 1, want)
			}
		}
	}
}

func TestEscapeGlob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{name: "plain", in: "t0123456789ab", want: "t0123456789ab"},
		{name: "every special", in: `a*b?c[d]e\f`, want: `a\*b\?c\[d\]e\\f`},
		{name: "hash tag", in: "p:{q:mail}", want: "p:{q:mail}"},
		{name: "multibyte", in: "é*", want: `é\*`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := escapeGlob(tt.in); got != tt.want {
				t.Errorf("escapeGlob(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
