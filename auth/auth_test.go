package auth_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/auth"
)

func TestParse(t *testing.T) {
	tokens, err := auth.Parse("tokens", "# comment\n\n ops admin 0123456789abcdef \nbill enqueue,read,enqueue fedcba9876543210\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 2 || tokens[0].Name != "ops" || tokens[0].Secret != "0123456789abcdef" ||
		len(tokens[1].Scopes) != 2 || !tokens[1].Allows(auth.ScopeRead) || tokens[1].Allows(auth.ScopeWork) {
		t.Errorf("Parse = %+v", tokens)
	}
	if !tokens[0].Allows(auth.ScopeWork) {
		t.Errorf("an admin token does not allow work")
	}
	for _, c := range []struct{ text, want string }{
		{"ops admin", "tokens line 1: want NAME SCOPES SECRET (3 fields separated by spaces), got 2 fields"},
		{"ops root 0123456789abcdef", `tokens line 1: token "ops": unknown scope "root"`},
		{"ops admin short", `tokens line 1: token "ops": secret is 5 bytes, want at least 16`},
		{"a admin 0123456789abcdef\na read 0123456789abcdeX", `tokens line 2: token name "a" is used twice`},
		{"a admin 0123456789abcdef\nb read 0123456789abcdef", `tokens line 2: token "b" has the same secret as an earlier one`},
	} {
		if _, err := auth.Parse("tokens", c.text); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want %q", c.text, err, c.want)
		}
	}
}

func TestKeyringSet(t *testing.T) {
	k := auth.NewKeyring([]auth.Token{{Name: "a", Secret: "first-secret-000", Scopes: []auth.Scope{auth.ScopeRead}}})
	if tok, ok := k.Check("first-secret-000"); !ok || tok.Name != "a" {
		t.Fatalf("Check = %+v, %v", tok, ok)
	}
	k.Set([]auth.Token{{Name: "a", Secret: "second-secret-00", Scopes: []auth.Scope{auth.ScopeRead}}})
	if _, ok := k.Check("first-secret-000"); ok {
		t.Errorf("a replaced secret is still accepted")
	}
	if _, ok := k.Check("second-secret-00"); !ok {
		t.Errorf("the new secret is not accepted")
	}
	var none *auth.Keyring
	if _, ok := none.Check(""); ok || none.Len() != 0 {
		t.Errorf("a nil keyring accepts a token")
	}
	if auth.Plain(nil, nil) != nil {
		t.Errorf("Plain(nil, nil) is not nil: no tokens must mean no authentication")
	}
	if tok, ok := auth.Plain(nil, []string{"x"}).Check("x"); !ok || !tok.Allows(auth.ScopeAdmin) {
		t.Errorf("a plain token = %+v, %v; want every scope", tok, ok)
	}
}

func TestThrottle(t *testing.T) {
	now := time.Unix(1000, 0)
	th := &auth.Throttle{Burst: 3, Refill: 10 * time.Second, Now: func() time.Time { return now }}
	for i := range 3 {
		if w := th.Wait("1.2.3.4"); w != 0 {
			t.Fatalf("refusal %d: Wait = %v, want 0", i, w)
		}
		th.Refused("1.2.3.4")
	}
	if w := th.Wait("1.2.3.4"); w != 10*time.Second {
		t.Errorf("after the burst: Wait = %v, want 10s", w)
	}
	if w := th.Wait("5.6.7.8"); w != 0 {
		t.Errorf("another address waits %v", w)
	}
	now = now.Add(4 * time.Second)
	if w := th.Wait("1.2.3.4"); w != 6*time.Second {
		t.Errorf("4 s later: Wait = %v, want 6s", w)
	}
	now = now.Add(6 * time.Second)
	if w := th.Wait("1.2.3.4"); w != 0 {
		t.Errorf("after one refill: Wait = %v, want 0", w)
	}
	th.Refused("1.2.3.4")
	if w := th.Wait("1.2.3.4"); w != 10*time.Second {
		t.Errorf("one more refusal: Wait = %v, want 10s", w)
	}
}
