package sortie

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// An args search looks at thousands of jobs a call, and decoding every
// job's args whole costs more than reading the job. rawLookup walks the
// raw JSON instead: it follows the path, skipping what is not on it, and
// hands back the bytes of the one value it finds, which matchRaw
// compares with the wanted value, decoding it only when the bytes alone
// cannot tell. Both agree with decoding the whole document (lookup and
// equalJSON) on every valid document: a repeated key counts by its last
// occurrence, keys compare after unescaping, numbers by value. Args are
// valid JSON (the enqueue checks them); on bytes that are not, rawLookup
// reports no value.

// rawLookup returns the raw JSON value at path in doc.
func rawLookup(doc []byte, path []string) ([]byte, bool) {
	s := rawScanner{b: doc}
	for _, p := range path {
		s.space()
		switch s.peek() {
		case '{':
			if !s.member(p) {
				return nil, false
			}
		case '[':
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || !s.element(i) {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	s.space()
	start := s.i
	if !s.skip() {
		return nil, false
	}
	return doc[start:s.i], true
}

// matchRaw reports whether raw, one JSON value, equals want (decoded as
// canonicalValue decodes, numbers as json.Number).
func matchRaw(raw []byte, want any) bool {
	switch w := want.(type) {
	case string:
		if len(raw) == 0 || raw[0] != '"' {
			return false
		}
		if len(raw) >= 2 && plainString(raw[1:len(raw)-1]) {
			return string(raw[1:len(raw)-1]) == w
		}
	case json.Number:
		if string(raw) == string(w) {
			return true
		}
		if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
			return false
		}
		// Both are valid JSON numbers: equalJSON compares them as float64.
		fw, err1 := w.Float64()
		fr, err2 := strconv.ParseFloat(string(raw), 64)
		return err1 == nil && err2 == nil && fw == fr
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return false
	}
	return equalJSON(v, want)
}

// plainString reports whether s, the inside of a JSON string, reads as it
// is: no escapes, and valid UTF-8 (decoding replaces bad bytes).
func plainString(s []byte) bool {
	return bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s)
}

// rawScanner reads JSON at b[i:].
type rawScanner struct {
	b []byte
	i int
}

func (s *rawScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *rawScanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// eat consumes c after optional space.
func (s *rawScanner) eat(c byte) bool {
	s.space()
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// member, at an object, leaves s at the value of its last member named
// key (as decoding into a map keeps the last).
func (s *rawScanner) member(key string) bool {
	s.i++ // '{'
	found := -1
	if s.eat('}') {
		return false
	}
	for {
		s.space()
		start := s.i
		if !s.skipString() {
			return false
		}
		name := s.b[start+1 : s.i-1]
		if !s.eat(':') {
			return false
		}
		s.space()
		if sameKey(name, key) {
			found = s.i
		}
		if !s.skip() {
			return false
		}
		if s.eat(',') {
			continue
		}
		if !s.eat('}') || found < 0 {
			return false
		}
		s.i = found
		return true
	}
}

// sameKey compares the inside of a JSON string with key, unescaping it
// when it must.
func sameKey(raw []byte, key string) bool {
	if plainString(raw) {
		return string(raw) == key
	}
	var k string
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	return json.Unmarshal(quoted, &k) == nil && k == key
}

// element, at an array, leaves s at its element n.
func (s *rawScanner) element(n int) bool {
	s.i++ // '['
	if s.eat(']') {
		return false
	}
	for k := 0; ; k++ {
		s.space()
		if k == n {
			return true
		}
		if !s.skip() {
			return false
		}
		if !s.eat(',') {
			return false
		}
	}
}

// skip passes over one value.
func (s *rawScanner) skip() bool {
	s.space()
	switch c := s.peek(); {
	case c == '"':
		return s.skipString()
	case c == '{' || c == '[':
		return s.skipNested()
	case c == '-' || (c >= '0' && c <= '9'):
		for s.i < len(s.b) && numberByte(s.b[s.i]) {
			s.i++
		}
		return true
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				return true
			}
		}
		return false
	}
}

// numberByte reports whether c may appear in a JSON number.
func numberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// skipString passes over a string, escapes included.
func (s *rawScanner) skipString() bool {
	if s.peek() != '"' {
		return false
	}
	for i := s.i + 1; i < len(s.b); i++ {
		switch s.b[i] {
		case '\\':
			i++
		case '"':
			s.i = i + 1
			return true
		}
	}
	return false
}

// skipNested passes over an object or array, counting brackets outside
// strings.
func (s *rawScanner) skipNested() bool {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			if !s.skipString() {
				return false
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.i++
				return true
			}
		}
		s.i++
	}
	return false
}

// equalJSON compares decoded JSON values, numbers by value (1 = 1.0).
func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		fx, err1 := x.Float64()
		fy, err2 := y.Float64()
		return err1 == nil && err2 == nil && fx == fy
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !equalJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}
