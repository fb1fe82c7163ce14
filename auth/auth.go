// Package auth holds the bearer tokens of sortie's HTTP API and dashboard:
// each token has a name and scopes, a Keyring holds the current set and can
// be replaced while requests are served (rotation without a restart), and a
// Throttle slows down an address that keeps sending tokens that are not
// accepted.
//
// The scopes:
//
//	enqueue  POST /api/v1/jobs and /api/v1/jobs/batch
//	work     fetch, complete, fail, snooze, release, heartbeat, reports:
//	         what a remote worker needs
//	read     the GET endpoints, /metrics and the dashboard's pages
//	admin    everything: retry, cancel, delete, pause, queue settings, the
//	         dashboard's actions
//
// A token file (and the SORTIE_TOKENS environment variable) has one token
// per line, "NAME SCOPES SECRET", scopes separated by commas; blank lines
// and lines starting with # are skipped:
//
//	# name     scopes        secret
//	ops        admin         3f9c...
//	billing    enqueue,read  a81e...
//	worker-eu  work          77d0...
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Scope is what a token may do.
type Scope string

// The scopes; see the package doc.
const (
	ScopeEnqueue Scope = "enqueue"
	ScopeWork    Scope = "work"
	ScopeRead    Scope = "read"
	ScopeAdmin   Scope = "admin"
)

// Scopes are every scope, in the order the docs list them.
var Scopes = []Scope{ScopeEnqueue, ScopeWork, ScopeRead, ScopeAdmin}

// MinSecretLen is the shortest secret a token file may hold.
const MinSecretLen = 16

// Token is one accepted bearer token.
type Token struct {
	// Name identifies the token in logs and in the dashboard; never the
	// secret.
	Name string
	// Secret is what a request sends: Authorization: Bearer SECRET.
	Secret string
	// Scopes are what the token may do; ScopeAdmin allows everything.
	Scopes []Scope
}

// Allows reports whether t may do what scope s covers.
func (t *Token) Allows(s Scope) bool {
	return slices.Contains(t.Scopes, ScopeAdmin) || slices.Contains(t.Scopes, s)
}

// Keyring is the current set of tokens. Its methods are safe for
// concurrent use; Set replaces the set while requests are checked.
type Keyring struct {
	mu     sync.RWMutex
	tokens []Token
	hashes [][sha256.Size]byte
}

// NewKeyring returns a keyring holding tokens.
func NewKeyring(tokens []Token) *Keyring {
	k := &Keyring{}
	k.Set(tokens)
	return k
}

// Set replaces the tokens. Requests checked after it returns see only the
// new ones; dashboard sessions of a removed token end.
func (k *Keyring) Set(tokens []Token) {
	hashes := make([][sha256.Size]byte, len(tokens))
	for i, t := range tokens {
		hashes[i] = sha256.Sum256([]byte(t.Secret))
	}
	k.mu.Lock()
	k.tokens, k.hashes = slices.Clone(tokens), hashes
	k.mu.Unlock()
}

// Len returns how many tokens the keyring holds. A nil keyring holds none.
func (k *Keyring) Len() int {
	if k == nil {
		return 0
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.tokens)
}

// Check returns the token whose secret is secret. It compares hashes in
// constant time, every token each call, so the time taken tells nothing of
// which token (or how much of one) matched.
func (k *Keyring) Check(secret string) (Token, bool) {
	if k == nil {
		return Token{}, false
	}
	h := sha256.Sum256([]byte(secret))
	k.mu.RLock()
	defer k.mu.RUnlock()
	found := -1
	for i := range k.hashes {
		if subtle.ConstantTimeCompare(h[:], k.hashes[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Token{}, false
	}
	return k.tokens[found], true
}

// Find returns the token named name.
func (k *Keyring) Find(name string) (Token, bool) {
	if k == nil {
		return Token{}, false
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, t := range k.tokens {
		if t.Name == name {
			return t, true
		}
	}
	return Token{}, false
}

// Parse reads tokens in the token file format (see the package doc). what
// names the source in errors ("tokens.txt", "$SORTIE_TOKENS"). Names must
// be unique, secrets at least MinSecretLen bytes and unique, scopes known.
func Parse(what, text string) ([]Token, error) {
	var out []Token
	names := map[string]bool{}
	secrets := map[string]bool{}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", what, n+1, err)
		}
		if names[t.Name] {
			return nil, fmt.Errorf("%s line %d: token name %q is used twice", what, n+1, t.Name)
		}
		if secrets[t.Secret] {
			return nil, fmt.Errorf("%s line %d: token %q has the same secret as an earlier one", what, n+1, t.Name)
		}
		names[t.Name], secrets[t.Secret] = true, true
		out = append(out, t)
	}
	return out, nil
}

// parseLine reads "NAME SCOPES SECRET".
func parseLine(line string) (Token, error) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return Token{}, fmt.Errorf("want NAME SCOPES SECRET (3 fields separated by spaces), got %d fields", len(f))
	}
	t := Token{Name: f[0], Secret: f[2]}
	for s := range strings.SplitSeq(f[1], ",") {
		sc := Scope(s)
		if !slices.Contains(Scopes, sc) {
			return Token{}, fmt.Errorf("token %q: unknown scope %q (scopes are enqueue, work, read, admin)", t.Name, s)
		}
		if !slices.Contains(t.Scopes, sc) {
			t.Scopes = append(t.Scopes, sc)
		}
	}
	if len(t.Secret) < MinSecretLen {
		return Token{}, fmt.Errorf("token %q: secret is %d bytes, want at least %d (openssl rand -hex 32 makes one)", t.Name, len(t.Secret), MinSecretLen)
	}
	return t, nil
}

// Plain returns the keyring a handler checks given its options: keys when
// not nil (an empty Keyring refuses everything until tokens are set), else
// the plain secrets as tokens with every scope, named token-1, token-2...;
// nil when there are neither (no authentication).
func Plain(keys *Keyring, plain []string) *Keyring {
	if keys != nil || len(plain) == 0 {
		return keys
	}
	tokens := make([]Token, len(plain))
	for i, s := range plain {
		tokens[i] = Token{Name: fmt.Sprintf("token-%d", i+1), Secret: s, Scopes: []Scope{ScopeAdmin}}
	}
	return NewKeyring(tokens)
}
