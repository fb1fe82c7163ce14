// Package names holds the rules for the names of kinds and queues, so the
// library, the HTTP API and the command line check them the same way.
package names

import (
	"fmt"
	"unicode/utf8"
)

// MaxLen is the longest kind or queue name, in bytes.
const MaxLen = 128

// Kind checks a kind name: 1 to 128 bytes of printable UTF-8, no spaces.
func Kind(kind string) error {
	if kind == "" {
		return fmt.Errorf("kind is empty")
	}
	if len(kind) > MaxLen {
		return fmt.Errorf("kind %q is longer than %d bytes", kind[:32]+"...", MaxLen)
	}
	if !utf8.ValidString(kind) {
		return fmt.Errorf("kind %q is not valid UTF-8", kind)
	}
	for _, r := range kind {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("kind %q contains a space or control character", kind)
		}
	}
	return nil
}

// Queue checks a queue name: 1 to 128 of a-z A-Z 0-9 _ - . :
func Queue(q string) error {
	if q == "" {
		return fmt.Errorf("queue name is empty")
	}
	if len(q) > MaxLen {
		return fmt.Errorf("queue name is longer than %d bytes", MaxLen)
	}
	for _, r := range q {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.', r == ':':
		default:
			return fmt.Errorf("queue name %q may only contain letters, digits, '_', '-', '.' and ':'", q)
		}
	}
	return nil
}
